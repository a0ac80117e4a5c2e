package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/channels/helm/charttest"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// valuesAnnotation carries the test add-on's free-form values (the Package kind's
// spec.values), as JSON.
const valuesAnnotation = "test.kaddons.dev/values"

// chartEngine starts a manager on cfg and returns an engine for def over the channels at
// dir, with the live cluster's capabilities. Reconcile is driven by hand: a watch on a
// kind the chart defines could not start before its CRD exists.
func chartEngine(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, def engine.Definition, dir string) *engine.Reconciler {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := engine.NewClusterCapabilities(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(mgr, def, engine.Options{Catalog: channels.NewCatalog(dir, ""), Capabilities: caps})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
	return r
}

// reconcileUntil reconciles addon by hand until check passes on its status.
func reconcileUntil(t *testing.T, r *engine.Reconciler, c client.Client, addon addonsv1alpha1.Addon, check func(g Gomega)) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		_, _ = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(addon)})
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(addon), addon)).To(Succeed())
		check(g)
	}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// widgetV2GVK is the version of Widget that chart-test-v2 serves.
var widgetV2GVK = schema.GroupVersionKind{Group: "example.kaddons.dev", Version: "v2", Kind: "Widget"}

// setAnnotation sets the annotation key of addon.
func setAnnotation(t *testing.T, c client.Client, addon addonsv1alpha1.Addon, key, value string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(addon), addon)).To(Succeed())
	annotations := addon.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[key] = value
	addon.SetAnnotations(annotations)
	g.Expect(c.Update(context.Background(), addon)).To(Succeed())
}

// condition returns the add-on's condition of type t.
func condition(g Gomega, addon addonsv1alpha1.Addon, t string) *metav1.Condition {
	c := meta.FindStatusCondition(addon.GetAddonStatus().Conditions, t)
	g.Expect(c).NotTo(BeNil(), "no %s condition", t)
	return c
}

// TestChartPackage applies a Helm chart package (testdata/channels/packages/coredns/
// chart-test): its CRD from crds/ first, then a custom resource whose size comes from a
// typed field through the chart's values, and a ConfigMap that shows the live cluster's
// .Capabilities. Values that break the chart's schema, and an upgrade whose CRD drops a
// version the API server still stores, are refused with nothing applied.
func TestChartPackage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cfg, scheme, c := startEnv(t)
	def := engine.Definition{
		Prototype: &addonsv1alpha1.CoreDNS{},
		Children:  []schema.GroupVersionKind{crdGVK, widgetGVK, widgetV2GVK, {Version: "v1", Kind: "ConfigMap"}},
		Values: func(in engine.RenderInput) (map[string]any, error) {
			if r := in.Addon.(*addonsv1alpha1.CoreDNS).Spec.Replicas; r != nil {
				return map[string]any{"size": *r}, nil
			}
			return nil, nil
		},
		UserValues: func(addon addonsv1alpha1.Addon) (map[string]any, error) {
			raw := addon.GetAnnotations()[valuesAnnotation]
			if raw == "" {
				return nil, nil
			}
			var values map[string]any
			return values, json.Unmarshal([]byte(raw), &values)
		},
	}
	r := chartEngine(t, cfg, scheme, def, filepath.Join("testdata", "channels"))

	cr := &addonsv1alpha1.CoreDNS{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: "default"},
		Spec: addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: "chart-test"},
			Replicas: ptr.To[int32](3)},
	}
	g.Expect(c.Create(ctx, cr)).To(Succeed())
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(cr.Status.AppliedVersion).To(Equal("chart-test"))
		g.Expect(condition(g, cr, addonsv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(cr.Status.Inventory.Objects()[0].Kind).To(Equal("CustomResourceDefinition"), "the chart's crds/ are applied first")
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetGVK)
	g.Expect(c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "coredns"}, widget)).To(Succeed())
	size, _, _ := unstructured.NestedInt64(widget.Object, "spec", "size")
	g.Expect(size).To(BeEquivalentTo(3), "spec.replicas reaches the chart as the value size")
	// .Capabilities are the live cluster's: its version, and the add-on API that only it
	// serves (Helm's defaults know no addons.kaddons.dev).
	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "coredns-capabilities"}, cm)).To(Succeed())
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	version, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data).To(Equal(map[string]string{"kubeVersion": version.GitVersion, "color": "blue", "addons": "served"}))

	// Free-form values the schema allows reach the chart.
	setAnnotation(t, c, cr, valuesAnnotation, `{"color": "green"}`)
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKeyWithValue("color", "green"))
	})

	// Values that break the schema: Stalled, ValuesInvalid, naming the field; nothing applied.
	setAnnotation(t, c, cr, valuesAnnotation, `{"color": "purple"}`)
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		stalled := condition(g, cr, addonsv1alpha1.ConditionStalled)
		g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonValuesInvalid))
		g.Expect(stalled.Message).To(ContainSubstring("at '/color'"))
	})
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("color", "green"), "a refused render changed the ConfigMap")

	// chart-test-v2's CRD drops v1, at which the API server stores the Widget: refused
	// before anything is written.
	// One write for both changes: a reconcile that saw only the values go would rightly
	// apply chart-test without them.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
	delete(cr.Annotations, valuesAnnotation)
	cr.Spec.Version = "chart-test-v2"
	g.Expect(c.Update(ctx, cr)).To(Succeed())
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		stalled := condition(g, cr, addonsv1alpha1.ConditionStalled)
		g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonCRDVersionRemoved))
		g.Expect(stalled.Message).To(ContainSubstring("CustomResourceDefinition widgets.example.kaddons.dev drops the version v1"))
	})
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(c.Get(ctx, types.NamespacedName{Name: "widgets.example.kaddons.dev"}, crd)).To(Succeed())
	g.Expect(crd.Spec.Versions).To(HaveLen(1))
	g.Expect(crd.Spec.Versions[0].Name).To(Equal("v1"), "the refused CRD was written")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("color", "green"), "the refused upgrade wrote the ConfigMap")
	g.Expect(cr.Status.AppliedVersion).To(Equal("chart-test"))
}

// TestUpstreamMetricsServerChart installs metrics-server's own chart (chart 3.12.2,
// charts/metrics-server of its Go module, from the module cache, unmodified) as a
// package of the MetricsServer kind: the typed fields reach it as values and as
// transforms, and every object the chart renders is applied.
func TestUpstreamMetricsServerChart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cfg, scheme, c := startEnv(t)
	module, chart := charttest.MetricsServer(t)
	channelsDir := t.TempDir()
	pkg := filepath.Join(channelsDir, "packages", "metrics-server", charttest.MetricsServerChartVersion)
	g.Expect(os.CopyFS(pkg, os.DirFS(chart))).To(Succeed())
	g.Expect(module).NotTo(BeEmpty())
	r := chartEngine(t, cfg, scheme, controllers.MetricsServerDefinition(), channelsDir)

	cr := &addonsv1alpha1.MetricsServer{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system"},
		Spec: addonsv1alpha1.MetricsServerSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: charttest.MetricsServerChartVersion},
			Replicas: ptr.To[int32](2), KubeletInsecureTLS: true},
	}
	g.Expect(c.Create(ctx, cr)).To(Succeed())
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(cr.Status.AppliedVersion).To(Equal(charttest.MetricsServerChartVersion))
		g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(9))
	})
	deploy := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "metrics-server"}, deploy)).To(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(2))
	container := deploy.Spec.Template.Spec.Containers[0]
	g.Expect(container.Image).To(Equal("registry.k8s.io/metrics-server/metrics-server:v0.7.2"))
	g.Expect(container.Args).To(ContainElement("--kubelet-insecure-tls"))
	apiService := &unstructured.Unstructured{}
	apiService.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	g.Expect(c.Get(ctx, types.NamespacedName{Name: "v1beta1.metrics.k8s.io"}, apiService)).To(Succeed())
	// No kube-controller-manager runs: the Deployment never becomes available.
	g.Expect(condition(g, cr, addonsv1alpha1.ConditionReady).Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
}

// TestChartPackageBadInput installs each bad chart of internal/channels/helm/testdata
// with the generic Package kind and expects a specific Stalled reason, with nothing
// applied: no object in the inventory or the namespace.
func TestChartPackageBadInput(t *testing.T) {
	ctx := context.Background()
	cfg, scheme, c := startEnv(t)
	channelsDir := t.TempDir()
	cases := []struct {
		chart, reason, message string
		values                 string
	}{
		{"template-error", addonsv1alpha1.ReasonRenderFailed, "template-error/templates/configmap.yaml:7", ""},
		{"values-schema", addonsv1alpha1.ReasonValuesInvalid, "at '/replicas'", `{"replicas": "three"}`},
		{"remote-dependency", addonsv1alpha1.ReasonChartRefused, `dependency "redis" (version "20.1.0", repository https://charts.example.com/bitnami) is not vendored`, ""},
		{"files-outside", addonsv1alpha1.ReasonPackageRefused, `"../../etc/passwd"`, ""},
		{"many-objects", addonsv1alpha1.ReasonPackageTooLarge, "renders 20000 YAML documents, more than 10000", ""},
		{"pre-delete-hook", addonsv1alpha1.ReasonHookNotSupported, `Job "demo-cleanup"`, ""},
	}
	for _, tc := range cases {
		dst := filepath.Join(channelsDir, "packages", "bad-chart", tc.chart)
		if err := os.CopyFS(dst, os.DirFS(filepath.Join("..", "..", "internal", "channels", "helm", "testdata", tc.chart))); err != nil {
			t.Fatal(err)
		}
	}
	r := chartEngine(t, cfg, scheme, controllers.PackageDefinition(), channelsDir)
	for i, tc := range cases {
		t.Run(tc.chart, func(t *testing.T) {
			g := NewWithT(t)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-chart-%d", i)}}
			g.Expect(c.Create(ctx, ns)).To(Succeed())
			p := &addonsv1alpha1.Package{
				ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns.Name},
				Spec:       addonsv1alpha1.PackageSpec{Package: "bad-chart", CommonSpec: addonv1alpha1.CommonSpec{Version: tc.chart}},
			}
			if tc.values != "" {
				p.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(tc.values)}
			}
			g.Expect(c.Create(ctx, p)).To(Succeed())
			reconcileUntil(t, r, c, p, func(g Gomega) {
				stalled := condition(g, p, addonsv1alpha1.ConditionStalled)
				g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(stalled.Reason).To(Equal(tc.reason))
				g.Expect(stalled.Message).To(ContainSubstring(tc.message))
			})
			g.Expect(p.Status.Inventory.Objects()).To(BeEmpty())
			cms := &corev1.ConfigMapList{}
			g.Expect(c.List(ctx, cms, client.InNamespace(ns.Name), client.HasLabels{ssa.LabelManagedBy})).To(Succeed())
			g.Expect(cms.Items).To(BeEmpty(), "a refused chart applied objects")
			jobs := &batchv1.JobList{}
			g.Expect(c.List(ctx, jobs, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(jobs.Items).To(BeEmpty(), "a refused chart applied its hook")
		})
	}
}
