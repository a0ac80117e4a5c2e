package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/channels/helm/charttest"
	"github.com/kaddons/kaddons/internal/engine"
)

// helmTemplateRuns is how many times the Helm CLI's `helm template` is timed: each run
// is a process of its own, so testing.Benchmark's ramp-up would take minutes.
const helmTemplateRuns = 10

// countingTransport counts the requests that pass through it.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}

// chartRenderBenchmarks measures a Helm chart package on the engine's render path:
// metrics-server's upstream chart (3.12.2, from its Go module's archive) as a
// MetricsServer package, cold (a chart file changed: the Helm SDK renders it, then the
// transforms run) and cached (the render cache hit of a reconcile that changes nothing),
// with the API requests each render makes (the cluster's capabilities are read once, then
// kept), beside the Helm CLI's `helm template` of the same chart and values when the CLI
// is built (hack/helm.sh).
func chartRenderBenchmarks(ctx context.Context, c *cluster, repo, work string, fail func(*testing.B, error), benchErr *error) ([]renderResult, error) {
	module, err := charttest.Download(charttest.MetricsServerModule, charttest.MetricsServerVersion, charttest.MetricsServerSum)
	if err != nil {
		return nil, err
	}
	chart := filepath.Join(module, charttest.MetricsServerChart)
	dir := filepath.Join(work, "chart-channels")
	pkg := filepath.Join(dir, "packages", "metrics-server", charttest.MetricsServerChartVersion)
	if err := os.CopyFS(pkg, os.DirFS(chart)); err != nil {
		return nil, fmt.Errorf("copying metrics-server's chart: %w", err)
	}
	var requests atomic.Int64
	cfg := rest.CopyConfig(c.admin)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: &requests} })
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: benchScheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("creating a manager for the chart render: %w", err)
	}
	caps, err := engine.NewClusterCapabilities(cfg, nil)
	if err != nil {
		return nil, err
	}
	r, err := engine.New(mgr, controllers.MetricsServerDefinition(), engine.Options{Catalog: channels.NewCatalog(dir, ""), Capabilities: caps})
	if err != nil {
		return nil, fmt.Errorf("creating the kaddons engine: %w", err)
	}
	touched := filepath.Join(pkg, "Chart.yaml")
	newAddon := func(i int) *addonsv1alpha1.MetricsServer {
		obj := &addonsv1alpha1.MetricsServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "metrics-server", UID: types.UID(fmt.Sprintf("chart-%d", i)), Generation: 1},
			Spec: addonsv1alpha1.MetricsServerSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: charttest.MetricsServerChartVersion},
				Replicas: ptr.To[int32](2)},
		}
		obj.SetGroupVersionKind(addonsv1alpha1.GroupVersion.WithKind("MetricsServer"))
		return obj
	}
	chartCase := func(cold bool, ops *int) func(b *testing.B) {
		return func(b *testing.B) {
			obj := newAddon(0)
			if _, err := r.Render(ctx, obj); err != nil {
				fail(b, err)
			}
			requests.Store(0)
			*ops = 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if cold {
					stamp := time.Unix(int64(1_700_000_000+i), 0)
					if err := os.Chtimes(touched, stamp, stamp); err != nil {
						fail(b, err)
					}
					obj = newAddon(i + 1)
				}
				if _, err := r.Render(ctx, obj); err != nil {
					fail(b, err)
				}
				*ops++
			}
		}
	}
	var results []renderResult
	for _, tc := range []struct {
		name string
		cold bool
	}{
		{"kaddons, chart: metrics-server chart 3.12.2 changed on disk (Helm SDK render, transforms)", true},
		{"kaddons, chart: same add-on generation (render cache hit)", false},
	} {
		ops := 0
		res := testing.Benchmark(chartCase(tc.cold, &ops))
		if *benchErr != nil {
			return nil, fmt.Errorf("render benchmark %q: %w", tc.name, *benchErr)
		}
		perOp := float64(requests.Load()) / float64(max(ops, 1))
		results = append(results, renderResult{name: tc.name, nsPerOp: res.NsPerOp(), allocsPerOp: res.AllocsPerOp(),
			bytesPerOp: res.AllocedBytesPerOp(), requests: fmt.Sprintf("%.2f", perOp), chart: true, cached: !tc.cold})
		fmt.Printf("  render: %-70s %12d ns/op %8d allocs/op %.2f requests/op\n", tc.name, res.NsPerOp(), res.AllocsPerOp(), perOp)
	}
	results = append(results, helmTemplate(repo, chart))
	return results, nil
}

// helmTemplate times the Helm CLI's `helm template` of the chart, with the values the
// MetricsServer above maps to (replicas 2), when hack/helm.sh has built the CLI; the row
// says how to build it otherwise.
func helmTemplate(repo, chart string) renderResult {
	name := "Helm CLI v4.3.2 `helm template` of the same chart (a process per render)"
	out, err := exec.Command(filepath.Join(repo, "hack", "helm.sh"), "path").Output()
	bin := string(trimNewline(out))
	if err != nil || bin == "" {
		return renderResult{name: name + ": hack/helm.sh failed", requests: "0"}
	}
	if _, err := os.Stat(bin); err != nil {
		return renderResult{name: name + ": not built (run hack/helm.sh)", requests: "0"}
	}
	start := time.Now()
	for range helmTemplateRuns {
		cmd := exec.Command(bin, "template", "metrics-server", chart, "--namespace", "kube-system", "--set", "replicas=2")
		if err := cmd.Run(); err != nil {
			return renderResult{name: fmt.Sprintf("%s: %v", name, err), requests: "0"}
		}
	}
	ns := time.Since(start).Nanoseconds() / helmTemplateRuns
	fmt.Printf("  render: %-70s %12d ns/op\n", name, ns)
	return renderResult{name: name, nsPerOp: ns, requests: "0"}
}

// trimNewline drops a trailing newline.
func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
