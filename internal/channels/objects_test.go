package channels

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestRenderRefusesObjectsWithoutAPIVersion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		manifests string
		want      string // in the error; empty means the build succeeds
	}{
		{
			name:      "complete object",
			manifests: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n",
		},
		{
			name:      "object without apiVersion",
			manifests: "kind: ConfigMap\nmetadata:\n  name: demo\n",
			want:      `object 1 (ConfigMap "demo") has no apiVersion`,
		},
		{
			name: "List item without apiVersion",
			manifests: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: addons\n---\n" +
				"apiVersion: v1\nkind: List\nitems:\n- kind: ConfigMap\n  metadata:\n    name: demo\n",
			want: `object 2 (ConfigMap "demo") has no apiVersion`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pkg := filepath.Join(dir, "packages", "demo", "1.0.0")
			if err := os.MkdirAll(pkg, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range map[string]string{
				"kustomization.yaml": "resources:\n- manifests.yaml\n",
				"manifests.yaml":     tc.manifests,
			} {
				if err := os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			_, err := NewCatalog(dir, "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Reason != addonsv1alpha1.ReasonRenderFailed {
				t.Fatalf("got %v, want a channels Error with reason %s", err, addonsv1alpha1.ReasonRenderFailed)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
