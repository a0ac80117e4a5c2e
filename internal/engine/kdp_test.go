package engine

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestSortObjectsPutsDependenciesFirst(t *testing.T) {
	objects, err := parseObjects(context.Background(), `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns}
`)
	if err != nil {
		t.Fatal(err)
	}
	sortObjects(context.Background(), objects)
	got := make([]string, 0, len(objects.Items))
	for _, o := range objects.Items {
		got = append(got, o.Kind)
	}
	want := []string{"Namespace", "ServiceAccount", "Deployment"}
	if len(got) != len(want) {
		t.Fatalf("sorted kinds = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sorted kinds = %v, want %v", got, want)
		}
	}
}

func TestPatchesOf(t *testing.T) {
	c := &addonsv1alpha1.CoreDNS{}
	c.Spec.Patches = []*runtime.RawExtension{{Raw: []byte(`{}`)}}
	if got := patchesOf(c); len(got) != 1 {
		t.Errorf("patchesOf(CoreDNS with one patch) = %d patches, want 1", len(got))
	}
	if got := patchesOf(struct{}{}); got != nil {
		t.Errorf("patchesOf(a kind without patches) = %v, want nil", got)
	}
}
