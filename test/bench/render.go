package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	benchv1alpha1 "github.com/kaddons/kaddons/test/bench/api/v1alpha1"
)

// renderResult is one render micro-benchmark.
type renderResult struct {
	name        string
	nsPerOp     int64
	allocsPerOp int64
	bytesPerOp  int64
	// requests is the API requests per render, where counted ("" where not).
	requests string
	// chart and cached mark the chart package's render-cache row, which the targets read.
	chart, cached bool
}

// renderBenchmarks measures what one reconcile spends producing the objects to apply,
// for kaddons (cold, for a new add-on, and cached) and for stock KDP, which renders
// afresh on every reconcile. The API server is only used for discovery.
func renderBenchmarks(ctx context.Context, c *cluster, repo, work string) ([]renderResult, error) {
	dir := filepath.Join(work, "render-channels")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repo, "channels"))); err != nil {
		return nil, fmt.Errorf("copying the channels: %w", err)
	}
	mgr, err := ctrl.NewManager(c.admin, ctrl.Options{
		Scheme:                 benchScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("creating a manager for rendering: %w", err)
	}
	kaddons, err := engine.New(mgr, controllers.CoreDNSDefinition(), engine.Options{Catalog: channels.NewCatalog(dir, "")})
	if err != nil {
		return nil, fmt.Errorf("creating the kaddons engine: %w", err)
	}
	stock := &declarative.Reconciler{}
	if err := initStockReconciler(stock, mgr, dir, "direct"); err != nil {
		return nil, err
	}
	// The cold case bumps the modification time of the package's kustomization, so that
	// the source sees a changed package and runs kustomize again.
	resolved, err := channels.NewCatalog(dir, "").Resolve(coreDNS, addonv1alpha1.CommonSpec{})
	if err != nil {
		return nil, fmt.Errorf("resolving the CoreDNS package: %w", err)
	}
	touched := filepath.Join(dir, "packages", resolved.Addon, resolved.Version, "kustomization.yaml")

	var benchErr error
	fail := func(b *testing.B, err error) {
		benchErr = err
		b.FailNow()
	}
	kaddonsCase := func(newUID, newPackage bool) func(b *testing.B) {
		return func(b *testing.B) {
			obj := newCoreDNS(types.UID("render-0"))
			if _, err := kaddons.Render(ctx, obj); err != nil {
				fail(b, err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if newPackage {
					stamp := time.Unix(int64(1_700_000_000+i), 0)
					if err := os.Chtimes(touched, stamp, stamp); err != nil {
						fail(b, err)
					}
				}
				if newUID {
					obj = newCoreDNS(types.UID(fmt.Sprintf("render-%d", i+1)))
				}
				if _, err := kaddons.Render(ctx, obj); err != nil {
					fail(b, err)
				}
			}
		}
	}
	stockCase := func(b *testing.B) {
		obj := &benchv1alpha1.StockCoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "bench-0000", Name: "dns-0000", UID: "stock", Generation: 1}}
		name := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := stock.BuildDeploymentObjectsWithFs(ctx, name, obj, filesys.MakeFsInMemory()); err != nil {
				fail(b, err)
			}
		}
	}

	cases := []struct {
		name string
		fn   func(b *testing.B)
	}{
		{"kaddons, cold: package changed on disk (read, kustomize, transforms)", kaddonsCase(true, true)},
		{"kaddons, new add-on: package output cached (transforms only)", kaddonsCase(true, false)},
		{"kaddons, cached: same add-on generation (render cache hit)", kaddonsCase(false, false)},
		{"stock KDP, every reconcile (channel, files, kustomize, transforms)", stockCase},
	}
	results := make([]renderResult, 0, len(cases))
	for _, tc := range cases {
		r := testing.Benchmark(tc.fn)
		if benchErr != nil {
			return nil, fmt.Errorf("render benchmark %q: %w", tc.name, benchErr)
		}
		results = append(results, renderResult{name: tc.name, nsPerOp: r.NsPerOp(), allocsPerOp: r.AllocsPerOp(), bytesPerOp: r.AllocedBytesPerOp()})
		fmt.Printf("  render: %-70s %12d ns/op %8d allocs/op\n", tc.name, r.NsPerOp(), r.AllocsPerOp())
	}
	charts, err := chartRenderBenchmarks(ctx, c, repo, work, fail, &benchErr)
	if err != nil {
		return nil, err
	}
	return append(results, charts...), nil
}

// newCoreDNS returns a CoreDNS as the API server would hand it to a reconcile.
func newCoreDNS(uid types.UID) *addonsv1alpha1.CoreDNS {
	obj := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "bench-0000", Name: "dns-0000", UID: uid, Generation: 1}}
	obj.SetGroupVersionKind(addonsv1alpha1.GroupVersion.WithKind("CoreDNS"))
	return obj
}
