package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// crdGVK is the kind of a CustomResourceDefinition.
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// startEnv starts a kube-apiserver and etcd of the test's own, with the add-on CRDs, and
// returns their config, a scheme that knows the add-ons, and a client straight to the
// API server. The process's logs are discarded unless KADDONS_TEST_VERBOSE is set.
func startEnv(t *testing.T) (*rest.Config, *runtime.Scheme, client.Client) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`")
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	if os.Getenv("KADDONS_TEST_VERBOSE") == "" {
		// The refusals these tests cause are logged as reconcile errors, with stacks.
		ctrl.SetLogger(logr.Discard())
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// envtest's default /24 runs out after about 253 Services (one per CoreDNS).
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, scheme, c
}

// configMapOf returns a ConfigMap named name with one data key of dataBytes bytes and
// one annotation of annotationBytes bytes (none when 0).
func configMapOf(name string, dataBytes, annotationBytes int) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"blob": strings.Repeat("x", dataBytes)},
	}
	if annotationBytes > 0 {
		cm.Annotations = map[string]string{"example.com/blob": strings.Repeat("y", annotationBytes)}
	}
	return cm
}

// crdOf returns a CRD of the kind Big<suffix> (group sizes.example.com) whose schema
// holds string properties with long descriptions, at least size bytes of JSON in all.
func crdOf(suffix string, size int) *apiextensionsv1.CustomResourceDefinition {
	plural := "big" + strings.ToLower(suffix) + "s"
	props := map[string]apiextensionsv1.JSONSchemaProps{}
	description := strings.Repeat("A field that is only here to make the schema large. ", 4)
	for i := 0; i*(len(description)+40) < size; i++ {
		props[fmt.Sprintf("field%05d", i)] = apiextensionsv1.JSONSchemaProps{Type: "string", Description: description}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".sizes.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "sizes.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Big" + suffix,
				ListKind: "Big" + suffix + "List", Singular: "big" + strings.ToLower(suffix)},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: props},
					},
				}},
			}},
		},
	}
}

// writePackage writes a plain CoreDNS package of version holding objects into the
// channels tree at dir.
func writePackage(t *testing.T, dir, version string, objects ...runtime.Object) {
	t.Helper()
	pkg := filepath.Join(dir, "packages", "coredns", version)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
	for i, o := range objects {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("object-%d.yaml", i)
		if err := os.WriteFile(filepath.Join(pkg, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		kustomization += "- " + name + "\n"
	}
	if err := os.WriteFile(filepath.Join(pkg, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
}

// apiServerVerdict server-side applies obj as the operator would (field manager kaddons,
// forced; in namespace unless it is a CRD), straight to the API server, and returns what
// it says: the error the add-on's condition must quote.
func apiServerVerdict(ctx context.Context, c client.Client, obj runtime.Object, namespace string) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: content}
	if u.GroupVersionKind() != crdGVK {
		u.SetNamespace(namespace)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(ssa.FieldManager),
		client.ForceOwnership)
}

// TestObjectsAtTheAPIServersSizeLimits applies packages whose objects are at or over the
// limits the API server and etcd put on size: a ConfigMap over 1 MiB of data, one with
// 300 KiB of annotations (all of an object's annotations may take 256 KiB), a CRD over
// 256 KiB (which client-side apply's last-applied annotation could not hold; server-side
// apply has none), a CRD over etcd's 1.5 MiB request limit, one over the 2 MiB the API
// server sends etcd, and a ConfigMap just under 1 MiB. Each add-on ends either applied and Ready, or with the reason the engine gives
// the API server's refusal and a message quoting that refusal word for word, as the API
// server gives it for the same apply sent to it directly; every reconcile returns, none
// hangs.
func TestObjectsAtTheAPIServersSizeLimits(t *testing.T) {
	cfg, scheme, k8sClient := startEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	def := engine.Definition{
		Prototype: &addonsv1alpha1.CoreDNS{},
		Children:  []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("ConfigMap"), crdGVK},
	}
	dir := t.TempDir()
	r, err := engine.New(mgr, def, engine.Options{Catalog: channels.NewCatalog(dir, "")})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}

	for _, tc := range []struct {
		name    string
		version string
		object  runtime.Object
		// reason is the Ready reason the add-on ends with: Reconciled when the API server
		// takes the object, else the engine's reason for its refusal.
		reason string
		// stalled says whether the refusal is terminal (Stalled True).
		stalled bool
	}{
		{name: "a ConfigMap over 1 MiB", version: "configmap-1536k", object: configMapOf("big", 1536<<10, 0),
			reason: addonsv1alpha1.ReasonObjectTooLarge, stalled: true},
		{name: "annotations over 256 KiB", version: "annotations-300k", object: configMapOf("annotated", 10, 300<<10),
			reason: addonsv1alpha1.ReasonObjectTooLarge, stalled: true},
		{name: "a CRD over 256 KiB", version: "crd-300k", object: crdOf("Medium", 300<<10),
			reason: addonsv1alpha1.ReasonReconciled},
		{name: "a CRD over etcd's 1.5 MiB request limit", version: "crd-1536k", object: crdOf("Large", 1536<<10),
			reason: addonsv1alpha1.ReasonObjectTooLarge, stalled: true},
		// The API server refuses to send etcd more than 2 MiB (a gRPC limit of its client:
		// "trying to send message larger than max"), with a 500: a package error all the
		// same, which no retry mends.
		{name: "a CRD over the API server's 2 MiB limit on what it sends etcd", version: "crd-2m", object: crdOf("Huge", 2<<20),
			reason: addonsv1alpha1.ReasonObjectTooLarge, stalled: true},
		{name: "a ConfigMap just under 1 MiB", version: "configmap-1000000", object: configMapOf("almost", 1000000-4, 0),
			reason: addonsv1alpha1.ReasonReconciled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.version}}
			g.Expect(k8sClient.Create(ctx, ns)).To(Succeed())
			writePackage(t, dir, tc.version, tc.object)
			data, err := yaml.Marshal(tc.object)
			g.Expect(err).NotTo(HaveOccurred())
			t.Logf("the object takes %d KiB of YAML", len(data)>>10)

			cr := &addonsv1alpha1.CoreDNS{
				ObjectMeta: metav1.ObjectMeta{Name: "sizes", Namespace: ns.Name},
				Spec:       addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: tc.version}},
			}
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			var ready metav1.Condition
			g.Eventually(func(g Gomega) {
				// Reconcile returns the refusal as its error; the condition is what counts.
				start := time.Now()
				_, _ = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
				g.Expect(time.Since(start)).To(BeNumerically("<", 30*time.Second), "a reconcile hung")
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
				c := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
				g.Expect(c).NotTo(BeNil())
				ready = *c
				g.Expect(ready.ObservedGeneration).To(Equal(cr.Generation))
				g.Expect(ready.Reason).To(Equal(tc.reason), "Ready: %s", ready.Message)
			}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
			t.Logf("Ready: %s: %s", ready.Reason, ready.Message)

			stalled := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)
			if tc.reason == addonsv1alpha1.ReasonReconciled {
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(cr.Status.AppliedVersion).To(Equal(tc.version))
				g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(1))
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(tc.object.GetObjectKind().GroupVersionKind())
				ref := cr.Status.Inventory.Objects()[0]
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, live)).To(Succeed())
				g.Expect(live.GetAnnotations()).NotTo(HaveKey("kubectl.kubernetes.io/last-applied-configuration"))
				if live.GetKind() == "CustomResourceDefinition" {
					t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), live) })
				}
				return
			}
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cr.Status.AppliedVersion).To(BeEmpty())
			// The message quotes the API server's refusal word for word: the same apply,
			// sent straight to it (not as a dry run, which never reaches etcd's limit), is
			// refused again and writes nothing.
			verdict := apiServerVerdict(ctx, k8sClient, tc.object, ns.Name)
			t.Logf("the API server, asked directly: %v", verdict)
			g.Expect(verdict).To(HaveOccurred())
			g.Expect(ready.Message).To(ContainSubstring(apiMessage(verdict)))
			if tc.stalled {
				g.Expect(stalled).NotTo(BeNil())
				g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(stalled.Reason).To(Equal(tc.reason))
			} else {
				g.Expect(stalled).To(BeNil(), "a refusal that is retried does not stall")
			}
		})
	}
}

// apiMessage is the part of the API server's refusal that says what it refused and why,
// the same for the operator's apply and the test's: without the object's name as the
// client quotes it, nor the request's size, which the operator's labels change.
func apiMessage(err error) string {
	msg := err.Error()
	if _, after, found := strings.Cut(msg, " is invalid: "); found {
		msg = after
	}
	if before, _, found := strings.Cut(msg, "larger than max ("); found {
		msg = before + "larger than max"
	}
	return msg
}
