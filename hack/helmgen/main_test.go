package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const rendered = `apiVersion: v1
kind: Namespace
metadata:
  name: op-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: op-manager-config-%s
  namespace: op-system
data:
  config.yaml: |
    kind: OperatorConfiguration
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: op-controller-manager
  namespace: op-system
  labels:
    app.kubernetes.io/managed-by: kustomize
spec:
  replicas: 2
  selector:
    matchLabels: {app: op}
  template:
    metadata:
      labels: {app: op}
    spec:
      serviceAccountName: op-controller-manager
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]
      containers:
      - name: manager
        image: registry.example.com/op:v1
        resources: {limits: {memory: 1Gi}}
      volumes:
      - name: config
        configMap:
          name: op-manager-config-%s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: op-controller-manager
  namespace: op-system
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: op-controller-manager
  namespace: op-system
spec:
  maxUnavailable: 1
`

// suffix is kustomize's hash of the ConfigMap above.
func suffix(t *testing.T) string {
	t.Helper()
	base, err := configMapBase("x-0000000000", "config.yaml", "kind: OperatorConfiguration\n")
	if err == nil {
		t.Fatalf("a wrong suffix was accepted (base %s)", base)
	}
	// The message names the suffix the chart computes.
	msg := err.Error()
	return msg[strings.LastIndex(msg, "compute ")+len("compute ") : strings.LastIndex(msg, ";")]
}

func TestGenerate(t *testing.T) {
	h := suffix(t)
	o := options{chartVersion: "1.0.0", configKey: "config.yaml", container: "manager"}
	files, err := generate([]byte(strings.ReplaceAll(rendered, "%s", h)), o)
	if err != nil {
		t.Fatal(err)
	}
	deploy := files["templates/manager/controller-manager.yaml"]
	for _, want := range []string{
		"namespace: {{ .Release.Namespace }}",
		"  labels:\n{{- include \"kaddons.labels\" . | nindent 4 }}\n",
		"replicas: {{ .Values.manager.replicas }}",
		`image: {{ include "kaddons.image" . }}`,
		"resources:\n{{- toYaml .Values.manager.resources | nindent 10 }}",
		`name: {{ include "kaddons.configMapName" . }}`,
		"{{- with (.Values.manager).tolerations }}\n      tolerations:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n",
		"{{- with (.Values.manager).nodeSelector }}\n      nodeSelector:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n",
		"{{- with (.Values.manager).affinity }}\n      affinity:\n",
		"{{- with (.Values.manager).imagePullSecrets }}\n      imagePullSecrets:\n",
		"{{- with (.Values.manager).podAnnotations }}\n      annotations:\n{{- toYaml . | nindent 8 }}\n{{- end }}\n",
		"        app: op\n{{- with omit ((.Values.manager).podLabels | default dict) \"app\" }}\n{{- toYaml . | nindent 8 }}\n{{- end }}\n",
		"{{- with (.Values.manager).extraEnv }}\n{{- toYaml . | nindent 8 }}\n{{- end }}\n",
	} {
		if !strings.Contains(deploy, want) {
			t.Errorf("the Deployment template lacks %q:\n%s", want, deploy)
		}
	}
	if sa := files["templates/rbac/controller-manager.yaml"]; !strings.Contains(sa,
		"{{- with (.Values.serviceAccount).annotations }}\n  annotations:\n{{- toYaml . | nindent 4 }}\n{{- end }}\n") {
		t.Errorf("the ServiceAccount template takes no serviceAccount.annotations:\n%s", sa)
	}
	for name, text := range files {
		if strings.HasPrefix(name, "templates/") && strings.HasSuffix(name, ".yaml") &&
			!strings.Contains(text, "\n{{- include \"kaddons.labels\" . | nindent 4 }}\n") {
			t.Errorf("%s has no standard labels:\n%s", name, text)
		}
	}
	if strings.Contains(deploy, "app.kubernetes.io/managed-by") || strings.Contains(deploy, "selector:\n    matchLabels:\n{{") {
		t.Errorf("the Deployment keeps kustomize's managed-by, or its selector got the standard labels:\n%s", deploy)
	}
	pdb := files["templates/manager/controller-manager-poddisruptionbudget.yaml"]
	if !strings.HasPrefix(pdb, "{{- if gt (int .Values.manager.replicas) 1 }}\n") || !strings.HasSuffix(pdb, "{{- end }}\n") ||
		!strings.Contains(pdb, "maxUnavailable: 1") {
		t.Errorf("the PodDisruptionBudget template is not rendered only above one replica:\n%s", pdb)
	}
	if _, ok := files["templates/manager/manager-config.yaml"]; !ok {
		t.Errorf("no ConfigMap template; files: %v", keys(files))
	}
	values := files["values.yaml"]
	for _, want := range []string{"repository: registry.example.com/op", `tag: "v1"`, "replicas: 2", "memory: 1Gi",
		"  nodeSelector: {}\n", "  affinity: {}\n", "  imagePullSecrets: []\n", "  extraEnv: []\n",
		"  tolerations:\n    - key: node-role.kubernetes.io/control-plane\n      operator: Exists\n",
		"serviceAccount:\n  # annotations of the manager's ServiceAccount.\n  annotations: {}\n",
		"config: |\n    kind: OperatorConfiguration"} {
		if !strings.Contains(values, want) {
			t.Errorf("values.yaml lacks %q:\n%s", want, values)
		}
	}
	checkSchema(t, files["values.schema.json"])
	if !strings.Contains(files["templates/_helpers.tpl"], `printf "op-manager-config-%s" $hash`) {
		t.Errorf("the helper does not name the ConfigMap op-manager-config-<hash>:\n%s", files["templates/_helpers.tpl"])
	}
}

// checkSchema checks that values.schema.json (without monitoring) closes the top level and
// manager, and types manager.replicas.
func checkSchema(t *testing.T, text string) {
	t.Helper()
	var schema struct {
		Schema               string `json:"$schema"`
		AdditionalProperties bool   `json:"additionalProperties"`
		Properties           map[string]struct {
			AdditionalProperties bool           `json:"additionalProperties"`
			Properties           map[string]any `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(text), &schema); err != nil {
		t.Fatalf("values.schema.json: %v\n%s", err, text)
	}
	if schema.Schema != schemaURI || schema.AdditionalProperties || schema.Properties["manager"].AdditionalProperties ||
		schema.Properties["manager"].Properties["replicas"] == nil || schema.Properties["metrics"].Properties != nil {
		t.Errorf("values.schema.json does not close the top level and manager, types no replicas, or has metrics without monitoring:\n%s",
			text)
	}
}

func TestGenerateRefuses(t *testing.T) {
	h := suffix(t)
	o := options{configKey: "config.yaml", container: "manager"}
	for name, tc := range map[string]struct{ in, err string }{
		"a stale hash": {in: strings.ReplaceAll(rendered, "%s", "0000000000"), err: "kustomize's hash suffix is 0000000000"},
		"another reference to the namespace": {
			in:  strings.ReplaceAll(rendered, "%s", h) + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: x}\nstringData: {ns: op-system}\n",
			err: "stringData.ns still names the namespace op-system",
		},
		"no Namespace": {in: strings.ReplaceAll(rendered, "kind: Namespace", "kind: Other"), err: "no Namespace object"},
		"another app.kubernetes.io/name": {
			in:  strings.ReplaceAll(rendered, "%s", h) + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, labels: {app.kubernetes.io/name: other}}\n",
			err: `the label app.kubernetes.io/name is "other"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := generate([]byte(tc.in), o)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("generate: error %v, want %q", err, tc.err)
			}
		})
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestInstallerHasABudgetOnlyAboveOneReplica(t *testing.T) {
	h := suffix(t)
	for _, tc := range []struct {
		name     string
		replicas string
		wantPDB  bool
	}{
		{name: "one replica", replicas: "replicas: 1", wantPDB: false},
		{name: "replicas left to the default of one", replicas: "", wantPDB: false},
		{name: "two replicas", replicas: "replicas: 2", wantPDB: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Replace(strings.ReplaceAll(rendered, "%s", h), "replicas: 2", tc.replicas, 1)
			out, err := installer([]byte(in), "manager")
			if err != nil {
				t.Fatal(err)
			}
			got := string(out)
			if strings.Contains(got, "kind: PodDisruptionBudget") != tc.wantPDB {
				t.Errorf("PodDisruptionBudget in the installer: %v, want %v:\n%s", !tc.wantPDB, tc.wantPDB, got)
			}
			// Everything else is kept as rendered, in order.
			want := in
			if !tc.wantPDB {
				want = in[:strings.LastIndex(in, "---\n")]
			}
			if got != want {
				t.Errorf("installer output differs from the input beyond the budget:\n got: %q\nwant: %q", got, want)
			}
		})
	}
	if _, err := installer([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"), "manager"); err == nil ||
		!strings.Contains(err.Error(), `no Deployment with a container "manager"`) {
		t.Errorf("installer without the manager: error %v, want one naming the missing Deployment", err)
	}
}

func TestGenerateMonitoring(t *testing.T) {
	h := suffix(t)
	dir := t.TempDir()
	for name, text := range map[string]string{
		"kustomization.yaml": "namespace: op-system\nnamePrefix: op-\nresources: [monitor.yaml, rule.yaml]\n",
		"monitor.yaml": `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: metrics
  namespace: system
  labels:
    app.kubernetes.io/managed-by: kustomize
spec:
  endpoints: [{port: https, honorLabels: true}]
`,
		"rule.yaml": `apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: alerts
  namespace: system
spec:
  groups:
  - name: op
    rules:
    - alert: Down
      expr: up == 0
      annotations:
        description: '{{ $labels.namespace }}/{{ $labels.name }} is down'
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := options{chartVersion: "1.0.0", configKey: "config.yaml", container: "manager", monitoring: dir}
	files, err := generate([]byte(strings.ReplaceAll(rendered, "%s", h)), o)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"templates/prometheus/metrics.yaml": {
			"{{- if .Values.metrics.serviceMonitor.enabled }}\n",
			"  namespace: {{ .Release.Namespace }}\n",
			"{{- include \"kaddons.labels\" . | nindent 4 }}\n" +
				"{{- with .Values.metrics.serviceMonitor.labels }}\n{{- toYaml . | nindent 4 }}\n{{- end }}\n",
			"honorLabels: true",
		},
		"templates/prometheus/alerts.yaml": {
			"{{- if .Values.metrics.prometheusRule.enabled }}\n",
			"  labels:\n{{- include \"kaddons.labels\" . | nindent 4 }}\n{{- with .Values.metrics.prometheusRule.labels }}\n{{- toYaml . | nindent 4 }}\n{{- end }}\n",
			"description: '{{`{{`}} $labels.namespace {{`}}`}}/{{`{{`}} $labels.name {{`}}`}} is down'",
		},
	} {
		text, ok := files[file]
		if !ok {
			t.Fatalf("no %s; files: %v", file, keys(files))
		}
		if !strings.HasSuffix(text, "{{- end }}\n") {
			t.Errorf("%s does not end its condition:\n%s", file, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q:\n%s", file, w, text)
			}
		}
	}
	if !strings.Contains(files["values.schema.json"], `"serviceMonitor"`) {
		t.Errorf("values.schema.json has no metrics values:\n%s", files["values.schema.json"])
	}
	if values := files["values.yaml"]; !strings.Contains(values, "metrics:\n  # serviceMonitor") ||
		!strings.Contains(values, "    enabled: false\n") {
		t.Errorf("values.yaml has no metrics options, off:\n%s", values)
	}

	o.monitoring = ""
	files, err = generate([]byte(strings.ReplaceAll(rendered, "%s", h)), o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(files["values.yaml"], "serviceMonitor") {
		t.Errorf("values.yaml offers monitoring options without monitoring objects:\n%s", files["values.yaml"])
	}
}

// TestRepositoryMonitoring renders the repository's config/prometheus as `make helm` does.
func TestRepositoryMonitoring(t *testing.T) {
	objects, err := renderKustomization(filepath.Join("..", "..", "config", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	if err := addMonitoring(files, objects, "kaddons-system"); err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["templates/prometheus/controller-manager-metrics-monitor.yaml"] == "" ||
		files["templates/prometheus/alerts.yaml"] == "" {
		t.Errorf("templates of config/prometheus: %v, want the ServiceMonitor and the PrometheusRule", keys(files))
	}
}

func TestEscapeTemplates(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                     "plain",
		"{{ $labels.name }}":        "{{`{{`}} $labels.name {{`}}`}}",
		"a {{x}} and {{ y }} again": "a {{`{{`}}x{{`}}`}} and {{`{{`}} y {{`}}`}} again",
	} {
		if got := escapeTemplates(in); got != want {
			t.Errorf("escapeTemplates(%q) = %q, want %q", in, got, want)
		}
	}
}
