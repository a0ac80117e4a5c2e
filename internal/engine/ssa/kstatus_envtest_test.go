package ssa_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// Kstatus of new objects: kaddons' own objects, before any controller wrote a status.

// newObjectSpecs are the specs a new object of kind needs to pass validation; the other
// kinds are created with an empty spec.
func newObjectSpecs(t *testing.T) map[string]map[string]any {
	return map[string]map[string]any{
		"AddonSource": {"directory": map[string]any{"path": t.TempDir()}},
		"AddonPolicy": {"rules": []any{map[string]any{"namespaceSelector": map[string]any{}}}},
		"AddonExtension": {"clientConfig": map[string]any{"url": "https://127.0.0.1:1", "caBundle": "eA=="},
			"hooks": []any{"Render"}},
		"Package": {"package": "coredns"},
	}
}

// TestNewObjectsAreNotCurrentForKstatus creates an object of every kind kaddons defines
// (every CRD of config/crd/bases: the add-on kinds, AddonSource, AddonExtension,
// AddonPolicy, OperatorConfig) and reads what the API server answers, before any controller could
// have written a status: it must carry status.observedGeneration 0 (the CRD default), so
// kstatus (Flux's health checks, kpt, Argo CD's kstatus-style checks) reads InProgress
// rather than Current and a GitOps wait does not pass before kaddons looked at the object.
func TestNewObjectsAreNotCurrentForKstatus(t *testing.T) {
	ns := enginetest.NewNamespace(t, k8sClient)
	files, err := filepath.Glob(filepath.Join(enginetest.CRDDirectory(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("only %d kinds to check", len(files))
	}
	specs := newObjectSpecs(t)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		kind := crd.Spec.Names.Kind
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			spec := specs[kind]
			if spec == nil {
				spec = map[string]any{}
			}
			u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
			u.SetAPIVersion(crd.Spec.Group + "/" + storedVersion(crd))
			u.SetKind(kind)
			u.SetGenerateName("kstatus-")
			if kind == "OperatorConfig" {
				u.SetName("default") // the only name it accepts
			}
			if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
				u.SetNamespace(ns)
			}
			if err := k8sClient.Create(ctx, u); err != nil {
				t.Fatalf("creating a %s: %v", kind, err)
			}
			t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })

			// u is now what the API server answered to the create.
			observed, found, err := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			if err != nil || !found || observed != 0 {
				t.Fatalf("a new %s has status %v, want observedGeneration 0 (found %v, %v)",
					kind, u.Object["status"], found, err)
			}
			res, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != status.InProgressStatus {
				t.Errorf("kstatus reads a new %s as %s (%s), want %s", kind, res.Status, res.Message,
					status.InProgressStatus)
			}
		})
	}
}

// storedVersion is the version crd stores.
func storedVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return crd.Spec.Versions[0].Name
}
