package sources_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

const (
	bundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	inTotoType      = "application/vnd.in-toto+json"
)

// dsseBundle returns a key-based Sigstore bundle, as `cosign sign --tlog-upload=false`
// writes it: a DSSE envelope, signed by signer, around an in-toto statement of
// predicateType whose subject is digest. tamper, when set, changes the payload after it
// was signed.
func dsseBundle(t *testing.T, signer signature.Signer, predicateType, digest string, tamper bool) []byte {
	t.Helper()
	alg, hexDigest, _ := strings.Cut(digest, ":")
	statement, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"digest": map[string]string{alg: hexDigest}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(inTotoType), inTotoType, len(statement), statement)
	sig, err := signer.SignMessage(bytes.NewReader([]byte(pae)))
	if err != nil {
		t.Fatal(err)
	}
	if tamper {
		statement = bytes.Replace(statement, []byte(`"predicate":{}`), []byte(`"predicate":{"x":1}`), 1)
	}
	return marshalBundle(t, map[string]any{"dsseEnvelope": map[string]any{
		"payload":     base64.StdEncoding.EncodeToString(statement),
		"payloadType": inTotoType,
		"signatures":  []any{map[string]string{"sig": base64.StdEncoding.EncodeToString(sig)}},
	}})
}

// messageBundle returns a key-based Sigstore bundle holding a message signature of digest:
// signer signed the manifest itself.
func messageBundle(t *testing.T, signer signature.Signer, digest string) []byte {
	t.Helper()
	_, hexDigest, _ := strings.Cut(digest, ":")
	raw, err := hex.DecodeString(hexDigest)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := signer.SignMessage(bytes.NewReader(nil), options.WithDigest(raw))
	if err != nil {
		t.Fatal(err)
	}
	return marshalBundle(t, map[string]any{"messageSignature": map[string]any{
		"messageDigest": map[string]string{"algorithm": "SHA2_256", "digest": base64.StdEncoding.EncodeToString(raw)},
		"signature":     base64.StdEncoding.EncodeToString(sig),
	}})
}

func marshalBundle(t *testing.T, content map[string]any) []byte {
	t.Helper()
	content["mediaType"] = bundleMediaType
	content["verificationMaterial"] = map[string]any{"publicKey": map[string]string{"hint": "test"}}
	out, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// attachReferrer pushes a manifest whose subject is subject and whose single layer is
// body, of mediaType, as cosign v3 attaches a bundle; the registry lists it through the
// referrers tag (go-containerregistry's registry, by default, has no referrers API).
func attachReferrer(t *testing.T, subject name.Digest, mediaType string, body []byte) {
	t.Helper()
	desc, err := remote.Head(subject)
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.oci.empty.v1+json")
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(body, types.MediaType(mediaType))})
	if err != nil {
		t.Fatal(err)
	}
	withSubject, ok := mutate.Subject(img, *desc).(v1.Image)
	if !ok {
		t.Fatal("mutate.Subject did not return an image")
	}
	sum := sha256.Sum256(body)
	if err := remote.Write(subject.Context().Tag("referrer-"+hex.EncodeToString(sum[:8])), withSubject); err != nil {
		t.Fatal(err)
	}
}

// TestOCIBundleVerification checks the Sigstore bundles cosign v3 attaches as referrers,
// built here (TestCosignV3Bundles, under the cosign build tag, signs with the real CLI):
// the signature must verify with a given key and name the bundle's digest, and a DSSE
// statement must be a cosign signature.
func TestOCIBundleVerification(t *testing.T) {
	reg := newRegistry(t)
	ctx := context.Background()
	signer, pub := newKey(t)
	_, otherPub := newKey(t)
	push := func(value string) name.Digest {
		return pushBundle(t, reg, writeTree(t, value), "bundles/demo:"+value, publish.BuildOptions{})
	}
	signedBy := func(value string, bundles func(name.Digest) [][]byte) name.Digest {
		ref := push(value)
		for _, b := range bundles(ref) {
			attachReferrer(t, ref, bundleMediaType, b)
		}
		return ref
	}
	other := push("other")
	signed := signedBy("signed", func(d name.Digest) [][]byte {
		return [][]byte{dsseBundle(t, signer, sources.CosignSignPredicateType, d.DigestStr(), false)}
	})
	message := signedBy("message", func(d name.Digest) [][]byte { return [][]byte{messageBundle(t, signer, d.DigestStr())} })
	elsewhere := signedBy("elsewhere", func(name.Digest) [][]byte {
		return [][]byte{dsseBundle(t, signer, sources.CosignSignPredicateType, other.DigestStr(), false)}
	})
	messageElsewhere := signedBy("message-elsewhere", func(name.Digest) [][]byte {
		return [][]byte{messageBundle(t, signer, other.DigestStr())}
	})
	attestation := signedBy("attestation", func(d name.Digest) [][]byte {
		return [][]byte{dsseBundle(t, signer, "https://slsa.dev/provenance/v1", d.DigestStr(), false)}
	})
	tampered := signedBy("tampered", func(d name.Digest) [][]byte {
		return [][]byte{dsseBundle(t, signer, sources.CosignSignPredicateType, d.DigestStr(), true)}
	})
	malformed := signedBy("malformed", func(name.Digest) [][]byte { return [][]byte{[]byte(`{"mediaType":"nonsense"}`)} })
	// A bad bundle first, then a good one: any one that verifies is enough.
	second := signedBy("second", func(d name.Digest) [][]byte {
		return [][]byte{
			dsseBundle(t, signer, sources.CosignSignPredicateType, other.DigestStr(), false),
			dsseBundle(t, signer, sources.CosignSignPredicateType, d.DigestStr(), false),
		}
	})
	sbom := push("sbom")
	attachReferrer(t, sbom, "application/spdx+json", []byte(`{"spdxVersion":"SPDX-2.3"}`))

	cases := []struct {
		name          string
		ref           name.Digest
		keys          [][]byte
		allowUnsigned bool
		wantReason    string
		wantMessage   string
	}{
		{name: "signed", ref: signed, keys: [][]byte{pub}},
		{name: "signed, one of two keys", ref: signed, keys: [][]byte{otherPub, pub}},
		{name: "message signature", ref: message, keys: [][]byte{pub}},
		{name: "one of two bundles", ref: second, keys: [][]byte{pub}},
		{name: "wrong key", ref: signed, keys: [][]byte{otherPub},
			wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
		{name: "wrong key, unsigned allowed", ref: signed, keys: [][]byte{otherPub}, allowUnsigned: true,
			wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
		{name: "a statement of another digest", ref: elsewhere, keys: [][]byte{pub},
			wantReason: sources.ReasonDigestMismatch, wantMessage: "signs " + other.DigestStr() + ", not " + elsewhere.DigestStr()},
		{name: "a message signature of another digest", ref: messageElsewhere, keys: [][]byte{pub},
			wantReason: sources.ReasonDigestMismatch, wantMessage: "signs " + other.DigestStr() + ", not " + messageElsewhere.DigestStr()},
		{name: "an attestation", ref: attestation, keys: [][]byte{pub},
			wantReason: sources.ReasonVerificationFailed, wantMessage: `an attestation of type "https://slsa.dev/provenance/v1"`},
		{name: "tampered statement", ref: tampered, keys: [][]byte{pub},
			wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
		{name: "malformed bundle", ref: malformed, keys: [][]byte{pub},
			wantReason: sources.ReasonVerificationFailed, wantMessage: "not a Sigstore bundle"},
		{name: "only an SBOM", ref: sbom, keys: [][]byte{pub},
			wantReason: sources.ReasonVerificationFailed, wantMessage: "is not signed"},
		{name: "only an SBOM, unsigned allowed", ref: sbom, keys: [][]byte{pub}, allowUnsigned: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFetcher(t, sources.Limits{})
			req := ociRequest(tc.ref.String())
			req.Verify = &sources.Verification{PublicKeys: tc.keys, AllowUnsigned: tc.allowUnsigned}
			_, err := f.Fetch(ctx, req)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.wantMessage))
			g.Expect(sources.IsTransient(err)).To(BeFalse())
			_, ok := f.Last(req)
			g.Expect(ok).To(BeFalse())
		})
	}
}

// TestOCIBundleWithoutReferrersAPI checks that a registry that answers the referrers API
// with an error go-containerregistry does not fall back on (405 here) is read through the
// referrers tag, and that its legacy signatures are still read.
func TestOCIBundleWithoutReferrersAPI(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	ctx := context.Background()
	signer, pub := newKey(t)
	bundled := pushBundle(t, reg, writeTree(t, "bundled"), "bundles/demo:bundled", publish.BuildOptions{})
	attachReferrer(t, bundled, bundleMediaType, dsseBundle(t, signer, sources.CosignSignPredicateType, bundled.DigestStr(), false))
	legacy := pushBundle(t, reg, writeTree(t, "legacy"), "bundles/demo:legacy", publish.BuildOptions{})
	g.Expect(publish.Sign(ctx, legacy, signer, insecure)).To(Succeed())
	unsigned := pushBundle(t, reg, writeTree(t, "unsigned"), "bundles/demo:unsigned", publish.BuildOptions{})
	// Only now: pushing a referrer reads the referrers to update the tag.
	handler := reg.Config.Handler
	var refused atomic.Int32
	reg.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/referrers/") {
			refused.Add(1)
			http.Error(w, "no such API", http.StatusMethodNotAllowed)
			return
		}
		handler.ServeHTTP(w, r)
	})

	for _, ref := range []name.Digest{bundled, legacy} {
		req := ociRequest(ref.String())
		req.Verify = &sources.Verification{PublicKeys: [][]byte{pub}}
		_, err := newFetcher(t, sources.Limits{}).Fetch(ctx, req)
		g.Expect(err).NotTo(HaveOccurred(), "%s", ref)
	}
	req := ociRequest(unsigned.String())
	req.Verify = &sources.Verification{PublicKeys: [][]byte{pub}, AllowUnsigned: true}
	_, err := newFetcher(t, sources.Limits{}).Fetch(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(refused.Load()).To(BeEquivalentTo(3))
	g.Expect(reg.countMatching("/manifests/sha256-")).To(BeNumerically(">=", 3), "%v", reg.served())
}
