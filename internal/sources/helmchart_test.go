package sources_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/channels/helm/charttest"
	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// pushChart packages metrics-server's upstream chart (from its Go module's archive) as
// `helm package` does and pushes it to reg with Helm's own registry client, as `helm push`
// does, returning the digest reference.
func pushChart(t *testing.T, reg *testRegistry) name.Digest {
	t.Helper()
	_, dir := charttest.MetricsServer(t)
	chart, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := chartutil.Save(chart, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	client, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Push(data, reg.host()+"/charts/metrics-server:"+charttest.MetricsServerChartVersion)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(reg.host() + "/charts/metrics-server@" + res.Manifest.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestOCIHelmChart fetches a Helm chart that `helm push` put in a registry (metrics-server's
// upstream chart) through an OCI AddonSource: the source's artifact is a channels tree of
// one package, packages/metrics-server/3.12.2/ holding the chart and the channel stable
// listing it, which the catalog renders. The digest pin and the signature are checked as
// for a bundle, and a chart layer the registry alters is refused.
func TestOCIHelmChart(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	ref := pushChart(t, reg)
	signer, pub := newKey(t)
	g := NewWithT(t)
	g.Expect(publish.Sign(ctx, ref, signer, insecure)).To(Succeed())

	t.Run("fetched, signed, pinned by digest", func(t *testing.T) {
		g := NewWithT(t)
		f := newFetcher(t, sources.Limits{})
		req := ociRequest("oci://" + reg.host() + "/charts/metrics-server:" + charttest.MetricsServerChartVersion)
		req.Digest = ref.DigestStr()
		req.Verify = &sources.Verification{PublicKeys: [][]byte{pub}}
		a, err := f.Fetch(ctx, req)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a.Digest).To(Equal(ref.DigestStr()))
		g.Expect(a.Metadata.MediaType).To(Equal(sources.MediaTypeChannels))
		g.Expect(filepath.Join(a.Dir, "packages", "metrics-server", "3.12.2", "Chart.yaml")).To(BeARegularFile())
		g.Expect(filepath.Join(a.Dir, "packages", "metrics-server", "3.12.2", "templates", "deployment.yaml")).To(BeARegularFile())

		catalog := channels.NewCatalog(a.Dir, "")
		resolved, err := catalog.Resolve("metrics-server", addonv1alpha1.CommonSpec{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resolved.Version).To(Equal("3.12.2"))
		out, err := catalog.RenderPackage(ctx, channels.Request{Package: resolved, ReleaseName: "metrics-server", Namespace: "kube-system"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("image: registry.k8s.io/metrics-server/metrics-server:v0.7.2"))
	})
	t.Run("another digest pinned", func(t *testing.T) {
		f := newFetcher(t, sources.Limits{})
		req := ociRequest(ref.String())
		req.Digest = "sha256:" + strings.Repeat("0", 64)
		_, err := f.Fetch(ctx, req)
		NewWithT(t).Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonDigestMismatch), "%v", err)
	})
	t.Run("unsigned", func(t *testing.T) {
		f := newFetcher(t, sources.Limits{})
		_, other := newKey(t)
		req := ociRequest(ref.String())
		req.Verify = &sources.Verification{PublicKeys: [][]byte{other}}
		_, err := f.Fetch(ctx, req)
		NewWithT(t).Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonVerificationFailed), "%v", err)
	})
	t.Run("a chart layer the registry alters", func(t *testing.T) {
		g := NewWithT(t)
		f := newFetcher(t, sources.Limits{})
		img, err := remote.Image(ref)
		g.Expect(err).NotTo(HaveOccurred())
		manifest, err := img.Manifest()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(manifest.Layers).To(HaveLen(1))
		g.Expect(manifest.Layers[0].MediaType).To(Equal(sources.HelmChartContentMediaType))
		layer := manifest.Layers[0].Digest.String()
		reg.tamper = func(r *http.Request, body []byte) []byte {
			if strings.HasSuffix(r.URL.Path, "/blobs/"+layer) {
				body = append([]byte(nil), body...)
				body[len(body)/2] ^= 0xff
			}
			return body
		}
		defer func() { reg.tamper = nil }()
		_, err = f.Fetch(ctx, ociRequest(ref.String()))
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonDigestMismatch), "%v", err)
	})
}
