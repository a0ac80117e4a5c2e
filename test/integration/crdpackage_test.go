// Package integration holds envtest tests of the shared engine with add-on definitions
// that no shipped add-on has, each against its own kube-apiserver and etcd.
package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// widgetGVK is the kind the test package's CRD defines.
var widgetGVK = schema.GroupVersionKind{Group: "example.kaddons.dev", Version: "v1", Kind: "Widget"}

// TestPackageWithCRDAndCustomResourceConverges applies a package that defines a CRD and
// holds a custom resource of it: the API server does not know the kind when the package
// is rendered, so the engine must take its scope from the package, apply the CRD first,
// wait until it is Established, and then apply the custom resource.
func TestPackageWithCRDAndCustomResourceConverges(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	def := engine.Definition{
		Prototype: &addonsv1alpha1.CoreDNS{},
		Children: []schema.GroupVersionKind{
			{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
			widgetGVK,
		},
	}
	source := channels.NewCatalog(filepath.Join("testdata", "channels"), "")
	// Reconcile is driven by hand: a watch on Widget could not start before its CRD exists.
	r, err := engine.New(mgr, def, engine.Options{Catalog: source})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = mgr.Start(ctx) }()
	g.Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

	k8sClient, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	cr := &addonsv1alpha1.CoreDNS{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: "default"},
		Spec:       addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: "crd-test"}},
	}
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())

	g.Eventually(func(g Gomega) {
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
		g.Expect(cr.Status.AppliedVersion).To(Equal("crd-test"))
		g.Expect(cr.Status.Conditions).To(ContainElement(And(
			HaveField("Type", addonsv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))
	}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetGVK)
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: "default", Name: "demo"}, widget)).To(Succeed())
	size, _, _ := unstructured.NestedInt64(widget.Object, "spec", "size")
	g.Expect(size).To(BeEquivalentTo(3))
	g.Expect(widget.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, "widgets"))
	g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(2))
	g.Expect(cr.Status.Inventory.Objects()[0].Kind).To(Equal("CustomResourceDefinition"), "the CRD is applied first")
}
