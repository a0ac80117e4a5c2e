package controllers

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// sharedSourceAddons is how many add-ons share the OCI source of TestOCISourceOnePull.
const sharedSourceAddons = 50

// pullCounter counts the registry requests that read a manifest or a blob, by method
// and path: how often the bundle was resolved and pulled.
type pullCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *pullCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			c.mu.Lock()
			c.counts[r.Method+" "+r.URL.Path]++
			c.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// count returns how many method requests were made for path.
func (c *pullCounter) count(method, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[method+" "+path]
}

// countingFetcher counts the fetches the AddonSource controller asks for.
type countingFetcher struct {
	sources.Fetcher
	calls atomic.Int64
}

func (f *countingFetcher) Fetch(ctx context.Context, req sources.Request) (*sources.Artifact, error) {
	f.calls.Add(1)
	return f.Fetcher.Fetch(ctx, req)
}

// pushedBundle is a bundle pushed to the test registry.
type pushedBundle struct {
	digest, config, layer string
}

// pushBundle builds a bundle from a channels tree listing coredns at version and pushes
// it to ref (through the registry's uncounted door).
func pushBundle(t *testing.T, ref, version string, signer signature.Signer) pushedBundle {
	t.Helper()
	g := NewWithT(t)
	img, _, err := publish.Build(channelsTree(t, version), publish.BuildOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pushed, err := publish.Push(context.Background(), img, ref, publish.RegistryOptions{Insecure: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(publish.Sign(context.Background(), pushed, signer, publish.RegistryOptions{Insecure: true})).To(Succeed())
	manifest, err := img.Manifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(manifest.Layers).To(HaveLen(1))
	return pushedBundle{digest: pushed.DigestStr(), config: manifest.Config.Digest.String(), layer: manifest.Layers[0].Digest.String()}
}

// TestOCISourceOnePull: many add-ons on one OCI AddonSource, fetched with the real
// fetcher from an in-process registry, make one pull of the bundle per revision: the
// manifest and each blob are read once, however many add-ons apply it, and a new revision
// reaches every add-on with one more pull.
func TestOCISourceOnePull(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()

	// The registry has two doors: the AddonSource pulls through the counted one; the
	// test pushes through the other, so that the push's own requests are not counted.
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	pulls := &pullCounter{counts: map[string]int{}}
	pullDoor := httptest.NewServer(pulls.wrap(handler))
	t.Cleanup(pullDoor.Close)
	pushDoor := httptest.NewServer(handler)
	t.Cleanup(pushDoor.Close)
	const repo = "platform/addons"
	pullRef := strings.TrimPrefix(pullDoor.URL, "http://") + "/" + repo + ":stable"
	pushRef := strings.TrimPrefix(pushDoor.URL, "http://") + "/" + repo + ":stable"
	manifestPath := func(ref string) string { return "/v2/" + repo + "/manifests/" + ref }
	blobPath := func(digest string) string { return "/v2/" + repo + "/blobs/" + digest }

	fetcher, err := sources.NewFetcher(sources.Options{CacheDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	fetches := &countingFetcher{Fetcher: fetcher}
	testFetcher.delegate(t, pullRef, fetches)

	// The source follows a tag, so its bundles must be signed: the add-ons are in
	// trusted namespaces and applied as the operator (applyAsOperator).
	signer, keys := signingKeys(t)
	rev1 := pushBundle(t, pushRef, oldVersion, signer)
	src := &addonsv1alpha1.AddonSource{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "oci-one-pull-"},
		Spec: addonsv1alpha1.AddonSourceSpec{
			ApplyAsOperator: true,
			OCI: &addonsv1alpha1.OCISource{URL: pullRef, Insecure: true,
				Verify: &addonsv1alpha1.OCIVerification{SecretRef: addonsv1alpha1.LocalSecretReference{Name: keys}}},
			Interval:         &metav1.Duration{Duration: 10 * time.Second},
			InsecureLoopback: true, // the registry is on 127.0.0.1
		},
	}
	g.Expect(k8sClient.Create(ctx, src)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), src) })

	// One add-on per namespace: a CoreDNS's children have fixed names.
	addons := make(map[string]bool, sharedSourceAddons)
	for range sharedSourceAddons {
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: newNamespace(t)}}
		cr.Spec.Channel = "stable"
		cr.Spec.SourceRef = src.Name
		g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
		addons[cr.Namespace] = true
	}

	// waitAll waits until every add-on applied version from the source's bundle digest.
	waitAll := func(t *testing.T, version, digest string) {
		t.Helper()
		got := waitSourceDigest(t, src, digest)
		want := &addonsv1alpha1.AppliedSource{Name: src.Name, Revision: got.Status.Revision, Digest: digest}
		NewWithT(t).Expect(got.Status.Revision).To(Equal("stable@" + digest))
		NewWithT(t).Eventually(func(g Gomega) {
			list := &addonsv1alpha1.CoreDNSList{}
			g.Expect(k8sClient.List(ctx, list)).To(Succeed())
			done := 0
			for i := range list.Items {
				cr := &list.Items[i]
				if !addons[cr.Namespace] {
					continue
				}
				g.Expect(cr.Status.AppliedVersion).To(Equal(version), "%s/%s", cr.Namespace, cr.Name)
				g.Expect(cr.Status.Source).To(Equal(want), "%s/%s", cr.Namespace, cr.Name)
				done++
			}
			g.Expect(done).To(Equal(sharedSourceAddons))
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}

	// expectOnePull checks that the bundle was pulled once and the tag resolved once per
	// fetch: nothing the registry served grows with the number of add-ons.
	expectOnePull := func(t *testing.T, b pushedBundle) {
		t.Helper()
		g := NewWithT(t)
		g.Expect(pulls.count(http.MethodGet, manifestPath(b.digest))).To(Equal(1), "manifest GETs of %s", b.digest)
		g.Expect(pulls.count(http.MethodGet, blobPath(b.config))).To(Equal(1), "config GETs of %s", b.digest)
		g.Expect(pulls.count(http.MethodGet, blobPath(b.layer))).To(Equal(1), "layer GETs of %s", b.digest)
		// Read the registry's count before the fetcher's: a fetch under way has been
		// counted by the fetcher before it reaches the registry.
		resolutions := pulls.count(http.MethodHead, manifestPath("stable")) + pulls.count(http.MethodGet, manifestPath("stable"))
		g.Expect(resolutions).To(BeNumerically(">=", 1))
		g.Expect(resolutions).To(BeNumerically("<=", fetches.calls.Load()), "tag resolutions against source fetches")
		t.Logf("%d add-ons: %d fetches of the source, %d tag resolutions, one pull of %s", sharedSourceAddons,
			fetches.calls.Load(), resolutions, b.digest)
	}

	t.Run("every add-on applies the bundle of one pull", func(t *testing.T) {
		waitAll(t, oldVersion, rev1.digest)
		expectOnePull(t, rev1)
	})

	t.Run("a new revision reaches every add-on with one more pull", func(t *testing.T) {
		rev2 := pushBundle(t, pushRef, newVersion, signer)
		NewWithT(t).Expect(rev2.digest).NotTo(Equal(rev1.digest))
		NewWithT(t).Expect(rev2.layer).NotTo(Equal(rev1.layer))
		// The source's interval finds the new revision; nothing else asks for it.
		waitAll(t, newVersion, rev2.digest)
		expectOnePull(t, rev2)
		expectOnePull(t, rev1)
	})
}

// waitSourceDigest waits until the AddonSource reports Fetched, for its generation, with
// digest, and returns it.
func waitSourceDigest(t *testing.T, src *addonsv1alpha1.AddonSource, digest string) *addonsv1alpha1.AddonSource {
	t.Helper()
	return waitSourceWith(t, src, addonsv1alpha1.ReasonFetched, digest)
}

// signingKeys returns a new ECDSA signer and the name of a Secret in the operator's
// namespace that holds its public key, as an AddonSource's verify.secretRef names it.
func signingKeys(t *testing.T) (signature.Signer, string) {
	t.Helper()
	g := NewWithT(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	signer, err := signature.LoadECDSASignerVerifier(key, crypto.SHA256)
	g.Expect(err).NotTo(HaveOccurred())
	pub, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyNamespace}}))).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: policyNamespace, GenerateName: "cosign-keys-"},
		Data: map[string][]byte{"cosign.pub": pub}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), secret) })
	return signer, secret.Name
}
