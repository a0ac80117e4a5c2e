package channels

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// chartTree is a channels tree whose demo add-on has a kustomize package (1.0.0) and Helm
// chart packages: 2.0.0 with a values.schema.json, 3.0.0 without one, 4.0.0 whose
// templates generate a password, 5.0.0 with both a Chart.yaml and a kustomization.yaml.
func chartTree(t *testing.T) string {
	const chart = "apiVersion: v2\nname: demo\nversion: %s\n"
	const configMapTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
data:
  replicas: {{ .Values.replicas | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  {{- if .Capabilities.APIVersions.Has "example.com/v1/Widget" }}
  widgets: "served"
  {{- end }}
`
	return writeTree(t, map[string]string{
		"stable":                                 "manifests:\n- name: demo\n  version: 2.0.0\n",
		"packages/demo/1.0.0/kustomization.yaml": "resources:\n- configmap.yaml\n",
		"packages/demo/1.0.0/configmap.yaml":     configMap,
		"packages/demo/2.0.0/Chart.yaml":         strings.Replace(chart, "%s", "2.0.0", 1),
		"packages/demo/2.0.0/values.yaml":        "replicas: 1\n",
		"packages/demo/2.0.0/values.schema.json": `{"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}}`,
		"packages/demo/2.0.0/templates/cm.yaml":  configMapTemplate,
		"packages/demo/3.0.0/Chart.yaml":         strings.Replace(chart, "%s", "3.0.0", 1),
		"packages/demo/3.0.0/values.yaml":        "replicas: 1\n",
		"packages/demo/3.0.0/templates/cm.yaml":  configMapTemplate,
		"packages/demo/4.0.0/Chart.yaml":         strings.Replace(chart, "%s", "4.0.0", 1),
		"packages/demo/4.0.0/templates/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: demo\n" +
			"stringData:\n  password: {{ randAlphaNum 16 | quote }}\n",
		"packages/demo/5.0.0/Chart.yaml":         strings.Replace(chart, "%s", "5.0.0", 1),
		"packages/demo/5.0.0/kustomization.yaml": "resources: []\n",
	})
}

func TestRenderChartPackage(t *testing.T) {
	s := NewCatalog(chartTree(t), "")
	ctx := context.Background()
	r, err := s.Resolve("demo", addonv1alpha1.CommonSpec{})
	if err != nil || r.Version != "2.0.0" {
		t.Fatalf("Resolve = %+v, %v; want the chart package 2.0.0 of the stable channel", r, err)
	}
	if !s.IsChart(r) || s.IsChart(Resolved{Addon: "demo", Version: "1.0.0"}) {
		t.Fatal("IsChart does not tell the chart (2.0.0) from the kustomize package (1.0.0)")
	}
	caps := Capabilities{KubeVersion: "v1.37.2", APIVersions: []string{"v1", "example.com/v1", "example.com/v1/Widget"}}
	req := Request{Package: r, ReleaseName: "demo", Namespace: "kube-system", Values: map[string]any{"replicas": 3},
		UserValues: map[string]any{"replicas": 2}, Capabilities: caps}
	out, err := s.RenderPackage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: demo", "namespace: kube-system", `replicas: "3"`, `kube: v1.37.2`, `widgets: served`} {
		if !strings.Contains(out, want) {
			t.Errorf("the render lacks %q:\n%s", want, out)
		}
	}
	// The capabilities are part of the render: without the Widget API, no widgets.
	req.Capabilities.APIVersions = []string{"v1"}
	if out, err = s.RenderPackage(ctx, req); err != nil || strings.Contains(out, "widgets") {
		t.Errorf("a render without example.com/v1/Widget = %v:\n%s", err, out)
	}
	// The user's values apply where no typed field sets the key.
	req.Values = nil
	if out, err = s.RenderPackage(ctx, req); err != nil || !strings.Contains(out, `replicas: "2"`) {
		t.Errorf("a render with spec.values only = %v:\n%s", err, out)
	}
	// A changed chart file is rendered again.
	path := filepath.Join(s.Dir(), "packages/demo/2.0.0/templates/cm.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "replicas:", "count:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err = s.RenderPackage(ctx, req); err != nil || !strings.Contains(out, `count: "2"`) {
		t.Errorf("a render after the template changed = %v:\n%s", err, out)
	}
}

func TestRenderChartPackageRefusals(t *testing.T) {
	s := NewCatalog(chartTree(t), "")
	for _, tc := range []struct {
		name       string
		version    string
		userValues map[string]any
		reason     string
		message    string
	}{
		{"values that break the schema", "2.0.0", map[string]any{"replicas": 0}, addonsv1alpha1.ReasonValuesInvalid,
			"at '/replicas': minimum: got 0, want 1"},
		{"values for a chart that declares none", "3.0.0", map[string]any{"replicas": 2}, addonsv1alpha1.ReasonValuesInvalid,
			"spec.values is set, but chart demo declares no values (it has no values.schema.json)"},
		{"values for a kustomize package", "1.0.0", map[string]any{"replicas": 2}, addonsv1alpha1.ReasonValuesInvalid,
			"package demo/1.0.0 is not a Helm chart and takes no values"},
		{"a chart that generates a password", "4.0.0", nil, addonsv1alpha1.ReasonChartRefused,
			"chart demo/4.0.0: its templates call randAlphaNum, which render differently every time"},
		{"a chart and a kustomization", "5.0.0", nil, addonsv1alpha1.ReasonPackageRefused,
			"package demo/5.0.0: holds both a kustomization.yaml and a Chart.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.RenderPackage(context.Background(), Request{Package: Resolved{Addon: "demo", Version: tc.version},
				ReleaseName: "demo", Namespace: "default", UserValues: tc.userValues})
			if err == nil {
				t.Fatalf("RenderPackage succeeded:\n%s", out)
			}
			if ReasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("RenderPackage error = %v (reason %s), want %s with %q", err, ReasonOf(err), tc.reason, tc.message)
			}
		})
	}
}
