package sources_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

var insecure = publish.RegistryOptions{Insecure: true}

// pushBundle builds the tree at dir and pushes it to reg as repo:tag, returning the digest
// reference.
func pushBundle(t *testing.T, reg *testRegistry, dir, repoTag string, opts publish.BuildOptions) name.Digest {
	t.Helper()
	img, _, err := publish.Build(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := publish.Push(context.Background(), img, reg.host()+"/"+repoTag, insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func ociRequest(ref string) sources.Request {
	return sources.Request{Kind: sources.KindOCI, URL: ref, Auth: sources.Auth{Insecure: true, InsecureLoopback: true}}
}

func TestOCIFetch(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	ref := pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1",
		publish.BuildOptions{OperatorID: "kaddons", MinOperatorVersion: "v0.2.0", KubernetesVersions: ">=1.30.0"})
	f := newFetcher(t, sources.Limits{})
	ctx := context.Background()

	a, err := f.Fetch(ctx, ociRequest("oci://"+reg.host()+"/bundles/demo:v1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Digest).To(Equal(ref.DigestStr()))
	g.Expect(a.Revision).To(Equal("v1@" + ref.DigestStr()))
	g.Expect(a.Metadata).To(Equal(sources.Metadata{MediaType: sources.MediaTypeChannels, OperatorID: "kaddons",
		MinOperatorVersion: "v0.2.0", KubernetesVersions: ">=1.30.0"}))
	g.Expect(filepath.Join(a.Dir, "stable")).To(BeARegularFile())
	g.Expect(configValue(t, a)).To(Equal("one"))
	g.Expect(filepath.Join(a.Dir, "metadata")).NotTo(BeADirectory()) // the tree only

	t.Run("by digest", func(t *testing.T) {
		g := NewWithT(t)
		a, err := f.Fetch(ctx, ociRequest(ref.String()))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a.Digest).To(Equal(ref.DigestStr()))
		g.Expect(a.Revision).To(Equal(ref.DigestStr()))
	})
	t.Run("digest pin", func(t *testing.T) {
		g := NewWithT(t)
		req := ociRequest(reg.host() + "/bundles/demo:v1")
		req.Digest = ref.DigestStr()
		_, err := f.Fetch(ctx, req)
		g.Expect(err).NotTo(HaveOccurred())
		req.Digest = "sha256:" + strings.Repeat("0", 64)
		_, err = f.Fetch(ctx, req)
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonDigestMismatch), "%v", err)
	})
	t.Run("a missing tag", func(t *testing.T) {
		g := NewWithT(t)
		_, err := f.Fetch(ctx, ociRequest(reg.host()+"/bundles/demo:v9"))
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed))
		g.Expect(sources.IsTransient(err)).To(BeFalse())
	})
	t.Run("plain HTTP only when insecure", func(t *testing.T) {
		g := NewWithT(t)
		req := ociRequest(reg.host() + "/bundles/demo:v1")
		req.Auth.Insecure = false
		_, err := f.Fetch(ctx, req)
		g.Expect(err).To(MatchError(ContainSubstring("refusing plain HTTP")))
	})
	t.Run("insecure only to loopback", func(t *testing.T) {
		g := NewWithT(t)
		_, err := f.Fetch(ctx, ociRequest("registry.example.com/bundles/demo:v1"))
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource))
	})
}

func TestOCIAnnotationsFileWins(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	img, _, err := publish.Build(writeTree(t, "x"), publish.BuildOptions{OperatorID: "kaddons"})
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	cfg = cfg.DeepCopy()
	cfg.Config.Labels[sources.LabelMediaType] = "registry+v1"
	cfg.Config.Labels[sources.LabelOperatorID] = "someone-else"
	img, err = mutate.ConfigFile(img, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = publish.Push(context.Background(), img, reg.host()+"/bundles/relabelled:v1", insecure)
	g.Expect(err).NotTo(HaveOccurred())
	a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), ociRequest(reg.host()+"/bundles/relabelled:v1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Metadata.MediaType).To(Equal(sources.MediaTypeChannels))
	g.Expect(a.Metadata.OperatorID).To(Equal("kaddons"))
}

func TestOCICache(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	ref := pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1", publish.BuildOptions{})
	f := newFetcher(t, sources.Limits{})
	ctx := context.Background()
	tagReq := ociRequest(reg.host() + "/bundles/demo:v1")

	// Concurrent fetches of one source share one pull.
	reg.reset()
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.Fetch(ctx, tagReq)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(reg.countMatching("GET /v2/bundles/demo/blobs/")).To(Equal(2), "one config and one layer: %v", reg.served())

	// A tag: one HEAD, nothing pulled.
	reg.reset()
	a, err := f.Fetch(ctx, tagReq)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Digest).To(Equal(ref.DigestStr()))
	g.Expect(reg.served()).To(Equal([]string{"HEAD /v2/bundles/demo/manifests/v1"}))

	// A digest this source resolved: no request at all.
	digestReq := ociRequest(ref.String())
	_, err = f.Fetch(ctx, digestReq)
	g.Expect(err).NotTo(HaveOccurred())
	reg.reset()
	_, err = f.Fetch(ctx, digestReq)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reg.served()).To(BeEmpty())

	// Another source of the same digest resolves it but pulls nothing.
	reg.reset()
	other := ociRequest(reg.host() + "/bundles/demo:v1")
	other.Path = "."
	_, err = f.Fetch(ctx, other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reg.countMatching("/blobs/")).To(BeZero(), "%v", reg.served())
}

func TestOCINewRevision(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	first := pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:stable", publish.BuildOptions{})
	f := newFetcher(t, sources.Limits{})
	req := ociRequest(reg.host() + "/bundles/demo:stable")
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(configValue(t, a)).To(Equal("one"))

	second := pushBundle(t, reg, writeTree(t, "two"), "bundles/demo:stable", publish.BuildOptions{})
	g.Expect(second.DigestStr()).NotTo(Equal(first.DigestStr()))
	b, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Digest).To(Equal(second.DigestStr()))
	g.Expect(b.Dir).NotTo(Equal(a.Dir))
	g.Expect(configValue(t, b)).To(Equal("two"))
	g.Expect(configValue(t, a)).To(Equal("one"), "the old revision stays readable")
}

func TestOCISourceDown(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1", publish.BuildOptions{})
	f := newFetcher(t, sources.Limits{})
	req := ociRequest(reg.host() + "/bundles/demo:v1")
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())

	reg.Close()
	_, err = f.Fetch(context.Background(), req)
	g.Expect(err).To(HaveOccurred())
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed))
	g.Expect(sources.IsTransient(err)).To(BeTrue(), "%v", err)

	last, ok := f.Last(req)
	g.Expect(ok).To(BeTrue())
	g.Expect(last.Digest).To(Equal(a.Digest))
	g.Expect(configValue(t, last)).To(Equal("one"))
}

func TestOCICaps(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, strings.Repeat("x", 4000)), "bundles/demo:big", publish.BuildOptions{})
	_, err := newFetcher(t, sources.Limits{MaxBytes: 1000}).Fetch(context.Background(), ociRequest(reg.host()+"/bundles/demo:big"))
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonArchiveRefused), "%v", err)
	_, err = newFetcher(t, sources.Limits{MaxFiles: 3}).Fetch(context.Background(), ociRequest(reg.host()+"/bundles/demo:big"))
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonArchiveRefused), "%v", err)
}

func TestOCIVerification(t *testing.T) {
	reg := newRegistry(t)
	ctx := context.Background()
	signer, pub := newKey(t)
	_, otherPub := newKey(t)

	signed := pushBundle(t, reg, writeTree(t, "signed"), "bundles/signed:v1", publish.BuildOptions{})
	g := NewWithT(t)
	g.Expect(publish.Sign(ctx, signed, signer, insecure)).To(Succeed())
	unsigned := pushBundle(t, reg, writeTree(t, "unsigned"), "bundles/unsigned:v1", publish.BuildOptions{})

	// The signature of signed, copied to another bundle: valid, but of another digest.
	copied := pushBundle(t, reg, writeTree(t, "copied"), "bundles/signed:v2", publish.BuildOptions{})
	sigImg, err := remote.Image(sources.SignatureTag(signed.Context(), signed.DigestStr()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.Write(sources.SignatureTag(copied.Context(), copied.DigestStr()), sigImg)).To(Succeed())

	// A payload that claims the digest of tampered but carries the signature of another payload.
	tampered := pushBundle(t, reg, writeTree(t, "tampered"), "bundles/signed:v3", publish.BuildOptions{})
	sigBody := fmt.Sprintf(`{"critical":{"identity":{"docker-reference":%q},"image":{"docker-manifest-digest":%q},"type":"cosign container image signature"},"optional":null}`,
		tampered.Context().Name(), tampered.DigestStr())
	realSig, err := signer.SignMessage(bytes.NewReader([]byte(sigBody + " ")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(publish.AppendSignature(ctx, tampered, []byte(sigBody), base64.StdEncoding.EncodeToString(realSig), insecure)).To(Succeed())

	// A signed bundle whose layer the registry then serves altered.
	altered := pushBundle(t, reg, writeTree(t, "altered"), "bundles/altered:v1", publish.BuildOptions{})
	g.Expect(publish.Sign(ctx, altered, signer, insecure)).To(Succeed())
	img, err := remote.Image(altered)
	g.Expect(err).NotTo(HaveOccurred())
	layers, err := img.Layers()
	g.Expect(err).NotTo(HaveOccurred())
	layerDigest, err := layers[0].Digest()
	g.Expect(err).NotTo(HaveOccurred())
	reg.tamper = func(r *http.Request, body []byte) []byte {
		if strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest.String()) && len(body) > 100 {
			body = append([]byte(nil), body...)
			body[len(body)/2] ^= 0xff
		}
		return body
	}

	cases := []struct {
		name          string
		ref           string
		keys          [][]byte
		allowUnsigned bool
		wantValue     string
		wantReason    string
	}{
		{name: "signed", ref: signed.String(), keys: [][]byte{pub}},
		{name: "signed, by tag, one of two keys", ref: reg.host() + "/bundles/signed:v1", keys: [][]byte{otherPub, pub}},
		{name: "unsigned", ref: unsigned.String(), keys: [][]byte{pub}, wantReason: sources.ReasonVerificationFailed},
		{name: "unsigned, allowed", ref: unsigned.String(), keys: [][]byte{pub}, allowUnsigned: true, wantValue: "unsigned"},
		{name: "wrong key, unsigned allowed", ref: signed.String(), keys: [][]byte{otherPub}, allowUnsigned: true,
			wantReason: sources.ReasonVerificationFailed},
		{name: "wrong key", ref: signed.String(), keys: [][]byte{otherPub}, wantReason: sources.ReasonVerificationFailed},
		{name: "a signature of another digest", ref: copied.String(), keys: [][]byte{pub}, wantReason: sources.ReasonDigestMismatch},
		{name: "tampered payload", ref: tampered.String(), keys: [][]byte{pub}, wantReason: sources.ReasonVerificationFailed},
		{name: "tampered layer", ref: altered.String(), keys: [][]byte{pub}, wantReason: sources.ReasonDigestMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFetcher(t, sources.Limits{})
			req := ociRequest(tc.ref)
			req.Verify = &sources.Verification{PublicKeys: tc.keys, AllowUnsigned: tc.allowUnsigned}
			a, err := f.Fetch(ctx, req)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(configValue(t, a)).To(Equal(cmp.Or(tc.wantValue, "signed")))
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			g.Expect(sources.IsTransient(err)).To(BeFalse())
			// Nothing of a refused bundle reaches the cache.
			_, ok := f.Last(req)
			g.Expect(ok).To(BeFalse())
		})
	}
}

func TestOCIRestartReusesCache(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1", publish.BuildOptions{})
	dir := t.TempDir()
	req := ociRequest(reg.host() + "/bundles/demo:v1")
	f, err := sources.NewFetcher(sources.Options{CacheDir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())

	reg.reset()
	f, err = sources.NewFetcher(sources.Options{CacheDir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(configValue(t, a)).To(Equal("one"))
	g.Expect(reg.countMatching("/blobs/")).To(BeZero(), "%v", reg.served())
	_, err = os.Stat(filepath.Join(dir, "tmp"))
	g.Expect(err).NotTo(HaveOccurred())
}
