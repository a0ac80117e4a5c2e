package engine

import (
	"reflect"
	"testing"

	"github.com/kaddons/kaddons/internal/engine/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTypedPrototype(t *testing.T) {
	scheme := testScheme(t)
	for _, tc := range []struct {
		gvk  schema.GroupVersionKind
		want string
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "*v1.Deployment"},
		{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, "*v1.Service"},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "*v1.ClusterRole"},
		// Kinds without a Go type (a package's custom resources) stay unstructured.
		{schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, "*unstructured.Unstructured"},
		{schema.GroupVersionKind{Version: "v1", Kind: "NoSuchKind"}, "*unstructured.Unstructured"},
	} {
		t.Run(tc.gvk.String(), func(t *testing.T) {
			obj := ssa.TypedPrototype(scheme, tc.gvk)
			if got := reflect.TypeOf(obj).String(); got != tc.want {
				t.Fatalf("ssa.TypedPrototype(%s) = %s, want %s", tc.gvk, got, tc.want)
			}
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() != tc.gvk {
				t.Fatalf("unstructured prototype has kind %s, want %s", u.GroupVersionKind(), tc.gvk)
			}
		})
	}
}
