package sources

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	sgbundle "github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
)

// cosign v3's signature layout: `cosign sign` writes a Sigstore bundle (a DSSE envelope
// around an in-toto statement whose subject is the signed manifest digest, of predicate
// type CosignSignPredicateType) as the single layer of a manifest whose subject is the
// signed image. Registries list it through the OCI 1.1 referrers API, or, where they do not
// serve that API, in the image index tagged sha256-<hex> (the referrers tag schema).
const (
	// SigstoreBundleMediaTypePrefix starts the media type of a Sigstore bundle layer
	// (application/vnd.dev.sigstore.bundle.v0.3+json for cosign v3).
	SigstoreBundleMediaTypePrefix = "application/vnd.dev.sigstore.bundle"
	// CosignSignPredicateType is the predicate type of the statement `cosign sign` signs;
	// an attestation of another type (`cosign attest`) says something about the image but
	// is not a signature of it.
	CosignSignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// emptyConfigMediaType is the config of an artifact manifest such as cosign's; registries
	// that ignore a manifest's artifactType (go-containerregistry's own) list it as this.
	emptyConfigMediaType = "application/vnd.oci.empty.v1+json"
	// maxBundleBytes bounds a bundle layer: a key-based bundle is about 1 KiB, one with a
	// certificate chain and log entries a few KiB.
	maxBundleBytes = 256 << 10
)

// signatureCheck is what one place that holds signatures (the referrers, the .sig tag) says
// about a digest.
type signatureCheck struct {
	// found counts the signatures seen, valid or not.
	found int
	// verified is true when one of them verifies and names the digest.
	verified bool
	// mismatch is true when one verifies but names another digest.
	mismatch bool
	// reasons says why each one that was seen was not accepted.
	reasons []string
}

// bundleVerifier verifies Sigstore bundles against public keys, offline: no transparency
// log, no timestamp authority and no certificate is needed or accepted, as cosign does for
// `cosign verify --key`.
type bundleVerifier struct {
	verifiers []*sgverify.Verifier
}

// newBundleVerifier returns a bundleVerifier with one sigstore-go verifier per key, each
// trusting only that key.
func newBundleVerifier(keys []signature.Verifier) (*bundleVerifier, error) {
	out := &bundleVerifier{}
	for i, k := range keys {
		key := root.NewExpiringKey(k, time.Time{}, time.Time{})
		material := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
			return key, nil
		})
		v, err := sgverify.NewVerifier(material, sgverify.WithNoObserverTimestamps())
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i+1, err)
		}
		out.verifiers = append(out.verifiers, v)
	}
	return out, nil
}

// checkBundles reads the Sigstore bundles attached to ref as referrers and checks each
// against the keys. err is a registry failure.
func checkBundles(ref name.Digest, keys *bundleVerifier, opts []remote.Option) (signatureCheck, error) {
	var out signatureCheck
	index, err := remote.Referrers(ref, opts...)
	if err != nil && !IsTransient(err) {
		// go-containerregistry falls back to the referrers tag when the API answers 404, 400
		// or 406; a registry that answers it otherwise (405, or 401 for a path it does not
		// know) does not serve the API either.
		index, err = remote.Index(ref.Context().Tag(strings.Replace(ref.DigestStr(), ":", "-", 1)), opts...)
		if notFound(err) {
			return out, nil
		}
	}
	if err != nil {
		return out, registryError(err, "listing the referrers of %s", ref)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return out, registryError(err, "listing the referrers of %s", ref)
	}
	want, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return out, errorf(ReasonInvalidSource, err, "%s", ref)
	}
	read := 0
	for _, desc := range manifest.Manifests {
		if !maybeBundle(desc) {
			continue
		}
		if read == maxSignatures {
			out.reasons = append(out.reasons, fmt.Sprintf("only the first %d referrers were read", maxSignatures))
			break
		}
		read++
		raw, reason, err := readBundle(ref.Context().Digest(desc.Digest.String()), ref, opts)
		switch {
		case err != nil && notFound(err):
			// Listed but gone (a stale referrers tag): nothing to check.
			continue
		case err != nil:
			return out, registryError(err, "reading the referrers of %s", ref)
		case raw == nil && reason == "":
			// Another kind of artifact (an SBOM, an attestation of another tool).
			continue
		}
		out.found++
		if reason == "" {
			var verified, mismatch bool
			verified, mismatch, reason = keys.check(raw, want)
			out.verified = out.verified || verified
			out.mismatch = out.mismatch || mismatch
		}
		if out.verified {
			return out, nil
		}
		out.reasons = append(out.reasons, fmt.Sprintf("referrer %s: %s", desc.Digest, reason))
	}
	return out, nil
}

// maybeBundle reports whether a referrer may be a Sigstore bundle: an image manifest whose
// artifact type is a bundle's, or is not given, or is the empty config of a registry that
// reports the config's media type instead of the manifest's artifactType.
func maybeBundle(desc v1.Descriptor) bool {
	switch {
	case desc.MediaType != types.OCIManifestSchema1 && desc.MediaType != "":
		return false
	case desc.ArtifactType == "", desc.ArtifactType == emptyConfigMediaType:
		return true
	default:
		return strings.HasPrefix(desc.ArtifactType, SigstoreBundleMediaTypePrefix)
	}
}

// readBundle returns the bundle layer of the referrer manifest at ref, or why it is not a
// readable bundle, or nil and no reason when it is not a bundle at all. err is a registry
// failure.
func readBundle(ref, subject name.Digest, opts []remote.Option) (raw []byte, reason string, err error) {
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, "", err
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, "", err
	}
	var layer *v1.Descriptor
	for i := range manifest.Layers {
		if strings.HasPrefix(string(manifest.Layers[i].MediaType), SigstoreBundleMediaTypePrefix) {
			layer = &manifest.Layers[i]
			break
		}
	}
	switch {
	case layer == nil:
		return nil, "", nil
	case len(manifest.Layers) != 1:
		return nil, fmt.Sprintf("%d layers; a bundle manifest has one", len(manifest.Layers)), nil
	case manifest.Subject == nil || manifest.Subject.Digest.String() != subject.DigestStr():
		// The index listed it under subject; the manifest must say so too.
		return nil, "the manifest's subject is not " + subject.DigestStr(), nil
	case layer.Size > maxBundleBytes:
		return nil, fmt.Sprintf("a bundle of %d bytes", layer.Size), nil
	}
	l, err := img.LayerByDigest(layer.Digest)
	if err != nil {
		return nil, "", err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, "", err
	}
	// The reader checks the bundle against its digest at the end.
	raw, err = io.ReadAll(io.LimitReader(rc, maxBundleBytes+1))
	_ = rc.Close()
	if err != nil {
		if IsTransient(err) {
			return nil, "", err
		}
		return nil, err.Error(), nil
	}
	return raw, "", nil
}

// check verifies a bundle against each key in turn and requires it to sign digest: the
// subject of its in-toto statement (and a cosign signature's predicate type), or the digest
// of its message signature. mismatch is true when it verifies but signs something else.
func (b *bundleVerifier) check(raw []byte, digest v1.Hash) (verified, mismatch bool, reason string) {
	var bundle sgbundle.Bundle
	if err := bundle.UnmarshalJSON(raw); err != nil {
		return false, false, "not a Sigstore bundle: " + err.Error()
	}
	want, err := hex.DecodeString(digest.Hex)
	if err != nil {
		return false, false, err.Error()
	}
	bound := sgverify.NewPolicy(sgverify.WithArtifactDigest(digest.Algorithm, want), sgverify.WithKey())
	firstErr := errors.New("no public key to verify with")
	for i, v := range b.verifiers {
		res, err := v.Verify(&bundle, bound)
		if err == nil {
			if reason := notASignature(res); reason != "" {
				return false, false, reason
			}
			return true, false, ""
		}
		if i == 0 {
			firstErr = err
		}
	}
	// Not valid for digest: find out whether it is a valid signature of something else.
	unbound, signs := signedElsewhere(&bundle)
	for _, v := range b.verifiers {
		res, err := v.Verify(&bundle, unbound)
		if err != nil {
			continue
		}
		if reason := notASignature(res); reason != "" {
			return false, false, reason
		}
		if res.Statement != nil {
			signs = subjects(res)
		}
		return false, true, "signs " + signs + ", not " + digest.String()
	}
	return false, false, "does not verify with the given keys: " + firstErr.Error()
}

// signedElsewhere returns the policy that verifies a bundle without binding it to the
// digest asked for: a DSSE envelope is checked on its own, a message signature against the
// digest it carries (sigstore-go cannot check one without an artifact), which signs names.
func signedElsewhere(bundle *sgbundle.Bundle) (sgverify.PolicyBuilder, string) {
	content, err := bundle.SignatureContent()
	if err == nil {
		if msg := content.MessageSignatureContent(); msg != nil {
			alg := strings.ToLower(strings.ReplaceAll(msg.DigestAlgorithm(), "SHA2_", "sha"))
			return sgverify.NewPolicy(sgverify.WithArtifactDigest(alg, msg.Digest()), sgverify.WithKey()),
				alg + ":" + hex.EncodeToString(msg.Digest())
		}
	}
	return sgverify.NewPolicy(sgverify.WithoutArtifactUnsafe(), sgverify.WithKey()), "something else"
}

// notASignature says why a verified DSSE bundle is not a cosign signature: its statement
// has another predicate type. A message signature is one.
func notASignature(res *sgverify.VerificationResult) string {
	if res.Statement == nil || res.Statement.GetPredicateType() == CosignSignPredicateType {
		return ""
	}
	return fmt.Sprintf("an attestation of type %q, not a signature (%s)", res.Statement.GetPredicateType(), CosignSignPredicateType)
}

// subjects lists the digests a verified statement names.
func subjects(res *sgverify.VerificationResult) string {
	var out []string
	for _, s := range res.Statement.GetSubject() {
		for alg, hexDigest := range s.GetDigest() {
			out = append(out, alg+":"+hexDigest)
		}
	}
	if len(out) == 0 {
		return "no subject"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
