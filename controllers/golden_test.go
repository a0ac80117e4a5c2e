package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// expectGolden compares the rendered manifests of cr with testdata/golden/<name>.yaml.
// WRITE_GOLDEN_OUTPUT=1 rewrites the file instead.
func expectGolden(t *testing.T, def engine.Definition, cr addonsv1alpha1.Addon, name string) {
	t.Helper()
	r, err := engine.New(testMgr, def, engineOptions())
	if err != nil {
		t.Fatal(err)
	}
	objects, err := r.Render(context.Background(), cr)
	if err != nil {
		t.Fatalf("rendering %s: %v", name, err)
	}
	docs := make([]string, 0, len(objects.Items))
	for _, o := range objects.Items {
		data, err := yaml.Marshal(o.UnstructuredObject().Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	got := strings.Join(docs, "---\n")

	path := filepath.Join("testdata", "golden", name+".yaml")
	if os.Getenv("WRITE_GOLDEN_OUTPUT") != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (WRITE_GOLDEN_OUTPUT=1 writes it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs from %s (-want +got; WRITE_GOLDEN_OUTPUT=1 rewrites it):\n%s", name, path, diff)
	}
}
