package ssa

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestParsePointer(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "/spec/replicas", want: []string{"spec", "replicas"}},
		{in: "/data", want: []string{"data"}},
		{in: "/metadata/annotations/example.com~1key", want: []string{"metadata", "annotations", "example.com/key"}},
		{in: "/a~0b", want: []string{"a~b"}},
		{in: "spec/replicas", wantErr: true},
		{in: "/", wantErr: true},
		{in: "/metadata/name", wantErr: true},
		{in: "/metadata/labels", wantErr: true},
		{in: "/kind", wantErr: true},
	} {
		got, err := ParsePointer(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParsePointer(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestWithoutAndOnly(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "d", "namespace": "a"},
		"spec":     map[string]any{"replicas": int64(5), "paused": false},
	}}
	paths := [][]string{{"spec", "replicas"}, {"spec", "absent"}}
	w := Without(u, paths)
	if _, found, _ := unstructured.NestedInt64(w.Object, "spec", "replicas"); found {
		t.Error("without kept spec.replicas")
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); !found {
		t.Error("without changed its input")
	}
	o := only(u, paths)
	if got, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); got != 5 {
		t.Errorf("only holds replicas %d, want the live 5", got)
	}
	if _, found, _ := unstructured.NestedBool(o.Object, "spec", "paused"); found {
		t.Error("only holds a field that is not excluded")
	}
	if o.GetName() != "d" || o.GetNamespace() != "a" || o.GetKind() != "Deployment" {
		t.Errorf("only lost the object's identity: %v", o.Object)
	}
}
