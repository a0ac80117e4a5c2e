package sources

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// cosign's key-based signature layout before v3 (verify_bundle.go has v3's): the
// signatures of image@sha256:<hex> are the layers of the image tagged sha256-<hex>.sig in
// the same repository; each layer is a simple-signing payload (JSON naming the signed
// manifest digest) and carries the base64 signature of that payload in an annotation.
const (
	// SignatureAnnotation holds a layer's base64 signature.
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// SimpleSigningMediaType is the media type of a signature layer.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// maxPayloadBytes bounds a signature payload, maxSignatures the layers read.
	maxPayloadBytes = 64 << 10
	maxSignatures   = 32
)

// SignatureTag returns the tag cosign stores the signatures of digest under:
// sha256-<hex>.sig.
func SignatureTag(repo name.Repository, digest string) name.Tag {
	return repo.Tag(strings.Replace(digest, ":", "-", 1) + ".sig")
}

// LoadPublicKeys parses PEM public keys for verification.
func LoadPublicKeys(pems [][]byte) ([]signature.Verifier, error) {
	var out []signature.Verifier
	for i, p := range pems {
		key, err := cryptoutils.UnmarshalPEMToPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		v, err := signature.LoadVerifier(key, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// verifySignature checks that a signature of ref's digest verifies against one of the
// public keys and names that digest. It reads both places cosign writes signatures: the
// Sigstore bundles attached to ref as OCI referrers (cosign v3's default, checked with
// sigstore-go) and the sha256-<hex>.sig tag (cosign's key-based format before v3). No
// signature in either (unless v.AllowUnsigned), or none that verifies, is
// VerificationFailed; a valid signature of another digest is DigestMismatch.
func verifySignature(ref name.Digest, v *Verification, opts []remote.Option) error {
	verifiers, err := LoadPublicKeys(v.PublicKeys)
	if err != nil {
		return errorf(ReasonInvalidSource, err, "the verification keys")
	}
	keys, err := newBundleVerifier(verifiers)
	if err != nil {
		return errorf(ReasonInvalidSource, err, "the verification keys")
	}
	bundles, err := checkBundles(ref, keys, opts)
	if err != nil || bundles.verified {
		return err
	}
	sigTag := SignatureTag(ref.Context(), ref.DigestStr())
	tagged, err := checkSignatureTag(ref, sigTag, verifiers, opts)
	if err != nil || tagged.verified {
		return err
	}
	if bundles.found+tagged.found == 0 {
		if v.AllowUnsigned {
			return nil
		}
		return errorf(ReasonVerificationFailed, nil, "%s is not signed: no Sigstore bundle among its referrers and no signature at %s", ref, sigTag)
	}
	reasons := strings.Join(append(bundles.reasons, tagged.reasons...), "; ")
	if bundles.mismatch || tagged.mismatch {
		return errorf(ReasonDigestMismatch, nil, "no signature of %s names its digest: %s", ref, reasons)
	}
	return errorf(ReasonVerificationFailed, nil, "no valid signature of %s: %s", ref, reasons)
}

// checkSignatureTag checks the signatures in cosign's key-based format under sigTag. err
// is a registry failure.
func checkSignatureTag(ref name.Digest, sigTag name.Tag, verifiers []signature.Verifier, opts []remote.Option) (signatureCheck, error) {
	var out signatureCheck
	img, err := remote.Image(sigTag, opts...)
	if err != nil {
		if notFound(err) {
			return out, nil
		}
		return out, registryError(err, "reading the signatures of %s", ref)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return out, registryError(err, "reading the signatures of %s", ref)
	}
	for i, l := range manifest.Layers {
		if i == maxSignatures {
			out.reasons = append(out.reasons, fmt.Sprintf("only the first %d signatures at %s were read", maxSignatures, sigTag))
			break
		}
		out.found++
		signed, reason, err := checkSignatureLayer(img, l, verifiers)
		switch {
		case err != nil:
			return out, registryError(err, "reading the signatures of %s", ref)
		case reason != "":
			out.reasons = append(out.reasons, fmt.Sprintf("%s layer %d: %s", sigTag.TagStr(), i, reason))
		case signed != ref.DigestStr():
			out.mismatch = true
			out.reasons = append(out.reasons, fmt.Sprintf("%s layer %d signs %s", sigTag.TagStr(), i, signed))
		default:
			out.verified = true
			return out, nil
		}
	}
	return out, nil
}

// checkSignatureLayer returns the digest a signature layer signs when its signature
// verifies with one of the verifiers, or why it does not; err is a registry failure.
func checkSignatureLayer(img v1.Image, l v1.Descriptor, verifiers []signature.Verifier) (signed, reason string, err error) {
	sig, ok := l.Annotations[SignatureAnnotation]
	if !ok {
		return "", "no " + SignatureAnnotation + " annotation", nil
	}
	if l.Size > maxPayloadBytes {
		return "", fmt.Sprintf("a payload of %d bytes", l.Size), nil
	}
	layer, err := img.LayerByDigest(l.Digest)
	if err != nil {
		return "", "", err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return "", "", err
	}
	// The reader checks the payload against its digest at the end.
	body, err := io.ReadAll(io.LimitReader(rc, maxPayloadBytes+1))
	_ = rc.Close()
	if err != nil {
		if IsTransient(err) {
			return "", "", err
		}
		return "", err.Error(), nil
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return "", "the signature is not base64", nil
	}
	if !verifiesWithAny(verifiers, raw, body) {
		return "", "the signature does not verify with the given keys", nil
	}
	signed, err = signedDigest(body)
	if err != nil {
		return "", err.Error(), nil
	}
	return signed, "", nil
}

func verifiesWithAny(verifiers []signature.Verifier, sig, body []byte) bool {
	for _, v := range verifiers {
		if v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) == nil {
			return true
		}
	}
	return false
}

// signedDigest returns the manifest digest a simple-signing payload names.
func signedDigest(body []byte) (string, error) {
	var p payload.SimpleContainerImage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		return "", fmt.Errorf("the payload is not simple-signing JSON: %w", err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return "", fmt.Errorf("the payload's type is %q, not %q", p.Critical.Type, payload.CosignSignatureType)
	}
	if p.Critical.Image.DockerManifestDigest == "" {
		return "", errors.New("the payload names no manifest digest")
	}
	return p.Critical.Image.DockerManifestDigest, nil
}
