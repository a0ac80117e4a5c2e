package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// TestNewObjectsAreNotCurrentForKstatus creates every kind kaddons reports on and reads
// what the API server answers, before any controller could have written a status: it must
// carry status.observedGeneration 0 (the CRD default), so kstatus (Flux's health checks,
// kpt, Argo CD's kstatus-style checks) reads InProgress rather than Current and a GitOps
// wait does not pass before kaddons looked at the object.
func TestNewObjectsAreNotCurrentForKstatus(t *testing.T) {
	ns := newNamespace(t)
	type object struct {
		gvk  schema.GroupVersionKind
		spec map[string]any
	}
	defs := Definitions()
	objects := make([]object, 0, len(defs)+2)
	for _, def := range defs {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, object{gvk: gvk, spec: map[string]any{}})
	}
	objects = append(objects,
		object{gvk: addonsv1alpha1.GroupVersion.WithKind("AddonSource"),
			spec: map[string]any{"directory": map[string]any{"path": t.TempDir()}}},
		object{gvk: configv1alpha1.GroupVersion.WithKind("AddonPolicy"),
			spec: map[string]any{"rules": []any{map[string]any{"namespaceSelector": map[string]any{}}}}},
	)
	if len(objects) < 6 {
		t.Fatalf("only %d kinds to check", len(objects))
	}
	for _, o := range objects {
		t.Run(o.gvk.Kind, func(t *testing.T) {
			ctx := context.Background()
			u := &unstructured.Unstructured{Object: map[string]any{"spec": o.spec}}
			u.SetGroupVersionKind(o.gvk)
			u.SetGenerateName("kstatus-")
			mapping, err := testMgr.GetRESTMapper().RESTMapping(o.gvk.GroupKind(), o.gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			if mapping.Scope.Name() == "namespace" {
				u.SetNamespace(ns)
			}
			if err := k8sClient.Create(ctx, u); err != nil {
				t.Fatalf("creating a %s: %v", o.gvk.Kind, err)
			}
			t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })

			// u is now what the API server answered to the create.
			observed, found, err := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			if err != nil || !found || observed != 0 {
				t.Fatalf("a new %s has status %v, want observedGeneration 0 (found %v, %v)",
					o.gvk.Kind, u.Object["status"], found, err)
			}
			res, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != status.InProgressStatus {
				t.Errorf("kstatus reads a new %s as %s (%s), want %s", o.gvk.Kind, res.Status, res.Message,
					status.InProgressStatus)
			}
		})
	}
}
