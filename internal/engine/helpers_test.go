package engine

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// testScheme knows the core kinds and the add-on kinds.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := addonsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// testReconciler returns a CoreDNS-kind reconciler over a fake client holding objs, with
// the repository's channels.
func testReconciler(t *testing.T, opts Options, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := testScheme(t)
	def := Definition{
		Prototype: &addonsv1alpha1.CoreDNS{},
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ConfigMap"), appsv1.SchemeGroupVersion.WithKind("Deployment"),
		},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&addonsv1alpha1.CoreDNS{}).
		WithIndex(&addonsv1alpha1.CoreDNS{}, DependencyField, func(o client.Object) []string {
			return def.dependencyKeys(o.(addonsv1alpha1.Addon))
		}).Build()
	if opts.Catalog == nil {
		opts.Catalog = channels.NewCatalog(filepath.Join("..", "..", "channels"), "")
	}
	r, err := NewWithClients(def, opts, Clients{Client: c, Reader: c, Scheme: s, Mapper: testMapper(s)})
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

// testMapper maps every kind of s, with the scopes the API server gives them.
func testMapper(s *runtime.Scheme) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	cluster := map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "Node": true,
		"APIService": true, "CustomResourceDefinition": true, "PriorityClass": true}
	for gvk := range s.AllKnownTypes() {
		scope := meta.RESTScopeNamespace
		if cluster[gvk.Kind] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	return m
}

func ptrTo[T any](v T) *T { return &v }
