//go:build cosign

package sources_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// cosignEnvVar names the cosign binary the tests run; `make test-cosign` builds it
// (hack/cosign.sh) and sets it.
const cosignEnvVar = "KADDONS_COSIGN"

// cosignCLI runs the real cosign CLI offline: its HOME, TUF root and docker config are
// the test's own, and any request that is not to loopback goes to a proxy on 127.0.0.1
// that refuses it, so no trust root, log or timestamp service is ever reached.
type cosignCLI struct {
	bin string
	dir string
	env []string
}

// newCosign returns the cosign CLI of KADDONS_COSIGN, or fails the test saying how to
// build it: the test runs only under the cosign build tag, so a missing binary is a
// broken setup, not a reason to skip.
func newCosign(t *testing.T) *cosignCLI {
	t.Helper()
	bin := os.Getenv(cosignEnvVar)
	if bin == "" {
		t.Fatalf("%s is not set: run `make test-cosign`, or build cosign with `hack/cosign.sh` (it prints the binary's path) and run "+
			"`%s=$(hack/cosign.sh) go test -tags cosign ./internal/sources -run '^TestCosign'`", cosignEnvVar, cosignEnvVar)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v; `hack/cosign.sh` builds cosign and prints its path", cosignEnvVar, bin, err)
	}
	dir := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"TUF_ROOT=" + filepath.Join(dir, "tuf"),
		"DOCKER_CONFIG=" + filepath.Join(dir, "docker"),
		"COSIGN_PASSWORD=kaddons-test",
		// Port 9 (discard) on loopback: nothing listens, so any request that is not to
		// the loopback registry (Go never proxies loopback) fails at once.
		"HTTPS_PROXY=http://127.0.0.1:9",
		"HTTP_PROXY=http://127.0.0.1:9",
		"NO_PROXY=",
	}
	return &cosignCLI{bin: bin, dir: dir, env: env}
}

// run runs cosign with args and fails the test, with cosign's output, when it fails.
func (c *cosignCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keyPair runs `cosign generate-key-pair` and returns the private key's path and the PEM
// public key.
func (c *cosignCLI) keyPair(t *testing.T, prefix string) (string, []byte) {
	t.Helper()
	c.run(t, "generate-key-pair", "--output-key-prefix", filepath.Join(c.dir, prefix))
	pub, err := os.ReadFile(filepath.Join(c.dir, prefix+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(c.dir, prefix+".key"), pub
}

// offlineSign are the flags of a key-based `cosign sign` with no transparency log (v3
// deprecates --tlog-upload, which cannot go with a signing config) to a plain-HTTP
// registry.
var offlineSign = []string{"--yes", "--allow-http-registry", "--tlog-upload=false", "--use-signing-config=false"}

// signingConfig writes, with cosign itself, what v3 prefers to --tlog-upload=false: a
// signing config that names no service and a trusted root that trusts none, and returns
// the flags that use them.
func (c *cosignCLI) signingConfig(t *testing.T) []string {
	t.Helper()
	config, trustedRoot := filepath.Join(c.dir, "signing-config.json"), filepath.Join(c.dir, "trusted-root.json")
	c.run(t, "signing-config", "create", "--out", config)
	c.run(t, "trusted-root", "create", "--out", trustedRoot)
	return []string{"--yes", "--allow-http-registry", "--signing-config", config, "--trusted-root", trustedRoot}
}

// newReferrersRegistry is go-containerregistry's registry on 127.0.0.1, serving the OCI
// 1.1 referrers API when api is set; without it, clients fall back to the referrers tag
// (sha256-<hex>). It records the requests it serves.
func newReferrersRegistry(t *testing.T, api bool) *testRegistry {
	t.Helper()
	reg := &testRegistry{}
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(api))
	reg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg.mu.Lock()
		reg.requests = append(reg.requests, r.Method+" "+r.URL.Path)
		reg.mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	return reg
}

// replayBundle attaches the Sigstore bundle that cosign attached to from to another image,
// to: the referrer manifest is copied with its subject changed, as someone who can push to
// the repository could.
func replayBundle(t *testing.T, from, to name.Digest) {
	t.Helper()
	index, err := remote.Referrers(from)
	if err != nil {
		t.Fatal(err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s has %d referrers, want the one cosign wrote", from, len(im.Manifests))
	}
	got, err := remote.Get(from.Context().Digest(im.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := remote.Head(to)
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]any
	if err := json.Unmarshal(got.Manifest, &manifest); err != nil {
		t.Fatal(err)
	}
	manifest["subject"] = v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
	raw, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(to.Context().Digest(digest.String()), rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
}

// rawManifest is an OCI image manifest pushed as is.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// TestCosignV3Bundles signs bundles with the real cosign v3 CLI, key-based and offline, and
// fetches them with verification required: a Sigstore bundle attached as a referrer
// (through the referrers API, or the referrers tag where the registry has no such API)
// verifies; one of another key, one replayed onto another digest, and an attestation that
// is not a signature are refused; the legacy sha256-<hex>.sig signature still verifies.
func TestCosignV3Bundles(t *testing.T) {
	cosign := newCosign(t)
	t.Logf("%s", strings.TrimSpace(cosign.run(t, "version")))
	key, pub := cosign.keyPair(t, "signer")
	otherKey, otherPub := cosign.keyPair(t, "other")
	signingConfig := cosign.signingConfig(t)
	predicate := filepath.Join(cosign.dir, "predicate.json")
	if err := os.WriteFile(predicate, []byte(`{"reviewed":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	for _, mode := range []struct {
		name string
		api  bool
	}{{name: "referrers API", api: true}, {name: "referrers tag", api: false}} {
		t.Run(mode.name, func(t *testing.T) {
			reg := newReferrersRegistry(t, mode.api)
			push := func(value, tag string) name.Digest {
				return pushBundle(t, reg, writeTree(t, value), "bundles/demo:"+tag, publish.BuildOptions{})
			}
			sign := func(ref name.Digest, flags []string, keyPath string, extra ...string) {
				args := append([]string{"sign", "--key", keyPath}, flags...)
				cosign.run(t, append(append(args, extra...), ref.String())...)
			}

			signed := push("signed", "signed")
			sign(signed, offlineSign, key)
			configSigned := push("config-signed", "config-signed")
			sign(configSigned, signingConfig, key)
			otherSigned := push("other-key", "other-key")
			sign(otherSigned, offlineSign, otherKey)
			replayed := push("replayed", "replayed")
			replayBundle(t, signed, replayed)
			legacy := push("legacy", "legacy")
			sign(legacy, offlineSign, key, "--new-bundle-format=false")
			attested := push("attested", "attested")
			cosign.run(t, append(append([]string{"attest", "--key", key, "--predicate", predicate,
				"--type", "https://example.com/review/v1"}, offlineSign...), attested.String())...)
			unsigned := push("unsigned", "unsigned")

			// cosign wrote where it should: a bundle referrer, or the .sig tag for legacy.
			for _, ref := range []name.Digest{signed, configSigned, otherSigned, attested} {
				assertBundleReferrer(t, ref)
				_, err := remote.Head(sources.SignatureTag(ref.Context(), ref.DigestStr()))
				NewWithT(t).Expect(err).To(HaveOccurred(), "cosign v3 wrote a .sig tag for %s", ref)
			}
			_, err := remote.Head(sources.SignatureTag(legacy.Context(), legacy.DigestStr()))
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), "no .sig tag for the legacy signature of %s", legacy)

			cases := []struct {
				name          string
				ref           name.Digest
				keys          [][]byte
				allowUnsigned bool
				wantValue     string
				wantReason    string
				wantMessage   string
			}{
				{name: "bundle", ref: signed, keys: [][]byte{pub}, wantValue: "signed"},
				{name: "bundle, one of two keys", ref: signed, keys: [][]byte{otherPub, pub}, wantValue: "signed"},
				{name: "bundle signed with a signing config", ref: configSigned, keys: [][]byte{pub}, wantValue: "config-signed"},
				{name: "bundle of another key", ref: otherSigned, keys: [][]byte{pub},
					wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
				{name: "bundle of another key, unsigned allowed", ref: otherSigned, keys: [][]byte{pub}, allowUnsigned: true,
					wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
				{name: "bundle of another digest", ref: replayed, keys: [][]byte{pub},
					wantReason: sources.ReasonDigestMismatch, wantMessage: "signs " + signed.DigestStr() + ", not " + replayed.DigestStr()},
				{name: "attestation, not a signature", ref: attested, keys: [][]byte{pub},
					wantReason: sources.ReasonVerificationFailed, wantMessage: `an attestation of type "https://example.com/review/v1"`},
				{name: "legacy .sig", ref: legacy, keys: [][]byte{pub}, wantValue: "legacy"},
				{name: "legacy .sig of another key", ref: legacy, keys: [][]byte{otherPub},
					wantReason: sources.ReasonVerificationFailed, wantMessage: "does not verify with the given keys"},
				{name: "unsigned", ref: unsigned, keys: [][]byte{pub},
					wantReason: sources.ReasonVerificationFailed, wantMessage: "is not signed"},
				{name: "unsigned, allowed", ref: unsigned, keys: [][]byte{pub}, allowUnsigned: true, wantValue: "unsigned"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					g := NewWithT(t)
					f := newFetcher(t, sources.Limits{})
					req := ociRequest(tc.ref.String())
					req.Verify = &sources.Verification{PublicKeys: tc.keys, AllowUnsigned: tc.allowUnsigned}
					reg.reset()
					a, err := f.Fetch(ctx, req)
					if tc.wantReason == "" {
						g.Expect(err).NotTo(HaveOccurred())
						g.Expect(configValue(t, a)).To(Equal(tc.wantValue))
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

			// The fetcher found the bundle where this registry lists it.
			reg.reset()
			req := ociRequest(signed.String())
			req.Verify = &sources.Verification{PublicKeys: [][]byte{pub}}
			_, err = newFetcher(t, sources.Limits{}).Fetch(ctx, req)
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred())
			fallbackTag := "/manifests/" + strings.Replace(signed.DigestStr(), ":", "-", 1)
			if mode.api {
				g.Expect(reg.countMatching("GET /v2/bundles/demo/referrers/"+signed.DigestStr())).To(Equal(1), "%v", reg.served())
				g.Expect(reg.countMatching(fallbackTag)).To(BeZero(), "%v", reg.served())
			} else {
				g.Expect(reg.countMatching("GET /v2/bundles/demo"+fallbackTag)).To(Equal(1), "%v", reg.served())
			}
			// A verified bundle spares the .sig lookup.
			g.Expect(reg.countMatching(".sig")).To(BeZero(), "%v", reg.served())
		})
	}
}

// assertBundleReferrer fails the test unless ref has a referrer whose only layer is a
// Sigstore bundle, as cosign v3 writes it.
func assertBundleReferrer(t *testing.T, ref name.Digest) {
	t.Helper()
	index, err := remote.Referrers(ref)
	if err != nil {
		t.Fatal(err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, desc := range im.Manifests {
		img, err := remote.Image(ref.Context().Digest(desc.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			found = append(found, string(l.MediaType))
		}
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], sources.SigstoreBundleMediaTypePrefix) {
		t.Fatalf("the referrers of %s hold layers %v, want one Sigstore bundle", ref, found)
	}
}
