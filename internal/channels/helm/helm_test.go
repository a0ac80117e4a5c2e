package helm_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels/helm"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// testdataRequest is a render of the chart testdata/<name>.
func testdataRequest(name string) helm.Request {
	return helm.Request{
		Chart: os.DirFS("testdata"), Dir: name, Key: name + "/0.1.0",
		ReleaseName: "demo", Namespace: "apps", KubeVersion: "v1.37.2",
	}
}

// mapRequest is a render of a chart made of files (path: content) under chart/.
func mapRequest(files map[string]string) helm.Request {
	fsys := fstest.MapFS{}
	for name, content := range files {
		fsys[path.Join("chart", name)] = &fstest.MapFile{Data: []byte(content), Mode: 0o644}
	}
	return helm.Request{Chart: fsys, Dir: "chart", Key: "test/0.1.0", ReleaseName: "demo", Namespace: "apps", KubeVersion: "v1.37.2"}
}

// chartYAML is a minimal Chart.yaml.
const chartYAML = "apiVersion: v2\nname: test\nversion: 0.1.0\n"

// withChart adds a minimal Chart.yaml to files.
func withChart(files map[string]string) map[string]string {
	if _, ok := files["Chart.yaml"]; !ok {
		files["Chart.yaml"] = chartYAML
	}
	return files
}

// tgz packs files (path: content, or a tar header when the content starts with
// "symlink:") as a chart archive.
func tgz(t *testing.T, files map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		hd := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(content, "symlink:"); ok {
			hd = &tar.Header{Name: name, Linkname: target, Typeflag: tar.TypeSymlink, Mode: 0o777}
			content = ""
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// configMap is a template of one ConfigMap.
const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"

// hookJob is a Job template with the hook annotation value %s.
const hookJob = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-hook
  annotations:
    helm.sh/hook: %s
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: hook, image: registry.example.com/hook:1.0}]
`

// aliasBomb is a ConfigMap whose nine levels of nine YAML aliases would expand to 387
// million strings.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n")
	b.WriteString("  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 9), ", "))
	}
	return b.String()
}

func TestRenderRefusesBadInput(t *testing.T) {
	manyFiles := withChart(map[string]string{})
	for i := range helm.MaxChartFiles {
		manyFiles[fmt.Sprintf("files/f%03d.txt", i)] = "x"
	}
	symlinked := fstest.MapFS{
		"chart/Chart.yaml":               {Data: []byte(chartYAML)},
		"chart/templates/configmap.yaml": {Data: []byte("/etc/passwd"), Mode: fs.ModeSymlink},
	}
	symlinkedChart := fstest.MapFS{
		"real/Chart.yaml": {Data: []byte(chartYAML)},
		"chart":           {Data: []byte("real"), Mode: fs.ModeSymlink},
	}

	for _, tc := range []struct {
		name    string
		req     helm.Request
		values  map[string]any
		timeout time.Duration
		reason  string
		message []string
	}{{
		name: "a template that fails", req: testdataRequest("template-error"),
		reason:  addonsv1alpha1.ReasonRenderFailed,
		message: []string{"template-error/templates/configmap.yaml:7", "nil pointer evaluating interface {}.level"},
	}, {
		name: "values that break the schema", req: testdataRequest("values-schema"), values: map[string]any{"replicas": "three"},
		reason:  addonsv1alpha1.ReasonValuesInvalid,
		message: []string{"schema of chart values-schema", "'/replicas'", "want integer"},
	}, {
		name: "values under the schema's minimum", req: testdataRequest("values-schema"), values: map[string]any{"replicas": 0},
		reason:  addonsv1alpha1.ReasonValuesInvalid,
		message: []string{"'/replicas'", "minimum"},
	}, {
		name: "a subchart's values that break its schema", req: testdataRequest("hooks"),
		values: map[string]any{"cache": map[string]any{"size": "lots"}},
		reason: addonsv1alpha1.ReasonValuesInvalid, message: []string{"schema of chart hooks/charts/cache", "'/size'"},
	}, {
		name: "a remote dependency", req: testdataRequest("remote-dependency"),
		reason:  addonsv1alpha1.ReasonChartRefused,
		message: []string{`dependency "redis"`, "https://charts.example.com/bitnami", "not vendored under charts/", "never downloads"},
	}, {
		name: "an OCI dependency", req: mapRequest(withChart(map[string]string{
			"Chart.yaml": chartYAML + "dependencies:\n- name: cache\n  version: 1.0.0\n  repository: oci://registry.example.com/charts\n",
		})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{`dependency "cache"`, "oci://registry.example.com/charts"},
	}, {
		name: "a chart that reads a file outside itself", req: testdataRequest("files-outside"),
		reason:  addonsv1alpha1.ReasonPackageRefused,
		message: []string{"files-outside/templates/configmap.yaml:6", `"../../etc/passwd"`, "outside the chart"},
	}, {
		name: "an absolute path piped to .Files.Get", req: mapRequest(withChart(map[string]string{
			"templates/cm.yaml": configMap + "data:\n  x: {{ \"/etc/hostname\" | $.Files.Get | quote }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{`"/etc/hostname"`},
	}, {
		name: "a chart that renders 20,000 objects", req: testdataRequest("many-objects"),
		reason:  addonsv1alpha1.ReasonPackageTooLarge,
		message: []string{"renders 20000 YAML documents, more than 10000"},
	}, {
		name: "a List of 10,001 objects", req: mapRequest(withChart(map[string]string{
			"templates/list.yaml": "apiVersion: v1\nkind: List\nitems:\n" +
				"{{- range until 10001 }}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-{{ . }}}}\n{{- end }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"renders 10001 objects, more than 10000"},
	}, {
		name: "a pre-delete hook", req: testdataRequest("pre-delete-hook"),
		reason:  addonsv1alpha1.ReasonHookNotSupported,
		message: []string{"pre-delete-hook/templates/cleanup.yaml", `Job "demo-cleanup"`, "pre-delete hook"},
	}, {
		name: "a test hook", req: mapRequest(withChart(map[string]string{"templates/test.yaml": fmt.Sprintf(hookJob, "test")})),
		reason: addonsv1alpha1.ReasonHookNotSupported, message: []string{`Job "demo-hook"`, "test hook"},
	}, {
		name: "a hook Helm does not know", req: mapRequest(withChart(map[string]string{"templates/job.yaml": fmt.Sprintf(hookJob, "pre-instal")})),
		reason: addonsv1alpha1.ReasonHookNotSupported, message: []string{`Job "demo-hook"`, `"pre-instal"`},
	}, {
		name: "a hook both before and after", req: mapRequest(withChart(map[string]string{
			"templates/job.yaml": fmt.Sprintf(hookJob, "pre-install,post-upgrade"),
		})),
		reason: addonsv1alpha1.ReasonHookNotSupported, message: []string{`Job "demo-hook"`, "pre-install,post-upgrade"},
	}, {
		name: "a symbolic link", req: helm.Request{Chart: symlinked, Dir: "chart", Key: "test/0.1.0"},
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{"chart/templates/configmap.yaml is a symbolic link"},
	}, {
		name: "a chart folder that is a symbolic link", req: helm.Request{Chart: symlinkedChart, Dir: "chart", Key: "test/0.1.0"},
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{"chart is a symbolic link"},
	}, {
		name: "a folder outside the package", req: helm.Request{Chart: os.DirFS("testdata"), Dir: "../testdata/hooks", Key: "test/0.1.0"},
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{"not a folder inside the package"},
	}, {
		name: "too many files", req: mapRequest(manyFiles),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"more than 512 files"},
	}, {
		name: "too many bytes", req: mapRequest(withChart(map[string]string{"files/big.bin": strings.Repeat("x", helm.MaxChartBytes)})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"more than 8388608 bytes", "chart/files/big.bin"},
	}, {
		name: "a subchart archive with a path through ..", req: mapRequest(withChart(map[string]string{
			"charts/evil-1.0.0.tgz": tgz(t, map[string]string{"evil/Chart.yaml": chartYAML, "evil/../../escape.yaml": "x"}),
		})),
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{"charts/evil-1.0.0.tgz", "contains '..'"},
	}, {
		name: "a subchart archive with a link", req: mapRequest(withChart(map[string]string{
			"charts/evil-1.0.0.tgz": tgz(t, map[string]string{"evil/Chart.yaml": chartYAML, "evil/templates/x.yaml": "symlink:/etc/passwd"}),
		})),
		reason: addonsv1alpha1.ReasonPackageRefused, message: []string{"evil/templates/x.yaml is not a regular file"},
	}, {
		name: "a subchart archive over the size cap once expanded", req: mapRequest(withChart(map[string]string{
			"charts/big-1.0.0.tgz": tgz(t, map[string]string{"big/Chart.yaml": chartYAML, "big/files/zeros": strings.Repeat("\x00", helm.MaxChartBytes)}),
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"subchart archives expanded", "big/files/zeros"},
	}, {
		name: "a schema that refers to the network", req: mapRequest(withChart(map[string]string{
			"values.schema.json": `{"$ref": "https://schemas.example.com/values.json"}`,
		})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{"values.schema.json", "https://schemas.example.com/values.json"},
	}, {
		name: "a schema that refers to the operator's disk", req: mapRequest(withChart(map[string]string{
			"values.schema.json": `{"properties": {"x": {"$ref": "file:///etc/kaddons/schema.json"}}}`,
		})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{"file:///etc/kaddons/schema.json"},
	}, {
		name: "a library chart", req: mapRequest(withChart(map[string]string{"Chart.yaml": chartYAML + "type: library\n"})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{"library chart"},
	}, {
		name: "a chart of API v3", req: mapRequest(withChart(map[string]string{"Chart.yaml": "apiVersion: v3\nname: test\nversion: 0.1.0\n"})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{`apiVersion "v3"`},
	}, {
		name: "a Kubernetes version outside the chart's range", req: mapRequest(withChart(map[string]string{
			"Chart.yaml": chartYAML + "kubeVersion: \"< 1.30.0-0\"\n",
		})),
		reason: addonsv1alpha1.ReasonKubernetesVersionUnsupported, message: []string{"< 1.30.0-0", "v1.37.2"},
	}, {
		name: "crds/ that holds a ConfigMap", req: mapRequest(withChart(map[string]string{
			"crds/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sneaky\n",
		})),
		reason: addonsv1alpha1.ReasonChartRefused, message: []string{"crds/cm.yaml", `ConfigMap "sneaky"`},
	}, {
		name: "a range over a literal number", req: mapRequest(withChart(map[string]string{
			"templates/loop.yaml": "{{ range 100000000000 }}x{{ end }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"templates/loop.yaml:1", "range over 100000000000"},
	}, {
		name: "until a billion", req: mapRequest(withChart(map[string]string{
			"templates/loop.yaml": "{{ range until 1000000000 }}x{{ end }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"until would make a list of 1000000000 items"},
	}, {
		name: "repeat a gigabyte", req: mapRequest(withChart(map[string]string{
			"templates/big.yaml": "{{ repeat 1000000000 \"x\" }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"repeat would make 1000000000 bytes"},
	}, {
		name: "indent by a gigabyte", req: mapRequest(withChart(map[string]string{
			"templates/big.yaml": "{{ \"a\\nb\" | nindent 1000000000 }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"nindent would make 2000000003 bytes"},
	}, {
		name: "printf with a gigabyte of padding", req: mapRequest(withChart(map[string]string{
			"templates/big.yaml": "{{ printf \"%*d\" 1000000000 1 }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"printf would pad to 1000000000 bytes"},
	}, {
		name: "templates that render more than the cap", req: mapRequest(withChart(map[string]string{
			"templates/big.yaml": "{{ range until 40 }}{{ repeat 1000000 \"x\" }}{{ end }}\n",
		})),
		reason: addonsv1alpha1.ReasonPackageTooLarge, message: []string{"render 40000001 bytes, more than 33554432"},
	}, {
		name: "templates that do not finish", req: mapRequest(withChart(map[string]string{
			"templates/slow.yaml": "{{ range until 100000 }}{{ range until 100000 }}{{ add 1 1 }}{{ end }}{{ end }}\n",
		})),
		timeout: 300 * time.Millisecond,
		reason:  addonsv1alpha1.ReasonRenderFailed, message: []string{"did not finish rendering", "context deadline exceeded"},
	}, {
		name: "an object twice", req: mapRequest(withChart(map[string]string{"templates/a.yaml": configMap, "templates/b.yaml": configMap})),
		reason: addonsv1alpha1.ReasonRenderFailed, message: []string{"renders ConfigMap demo twice"},
	}, {
		name: "an object with only a generateName", req: mapRequest(withChart(map[string]string{
			"templates/pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: demo-\n",
		})),
		reason: addonsv1alpha1.ReasonRenderFailed, message: []string{"templates/pod.yaml", "has no metadata.name"},
	}, {
		name: "an alias bomb in a template", req: mapRequest(withChart(map[string]string{"templates/bomb.yaml": aliasBomb()})),
		reason: addonsv1alpha1.ReasonRenderFailed, message: []string{"test/templates/bomb.yaml", "excessive aliasing"},
	}, {
		name: "an alias bomb in values.yaml", req: mapRequest(withChart(map[string]string{"values.yaml": aliasBomb()})),
		reason: addonsv1alpha1.ReasonRenderFailed, message: []string{"values.yaml", "excessive aliasing"},
	}, {
		name: "a document that is not an object", req: mapRequest(withChart(map[string]string{"templates/list.yaml": "- a\n- b\n"})),
		reason: addonsv1alpha1.ReasonRenderFailed, message: []string{"YAML parse error on test/templates/list.yaml"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			req := tc.req
			req.Values = tc.values
			start := time.Now()
			res, err := helm.Render(ctx, req)
			if err == nil {
				t.Fatalf("rendered %d objects, want %s", len(res.Objects), tc.reason)
			}
			if res != nil {
				t.Errorf("a Result with the error %v", err)
			}
			var he *helm.Error
			if !errors.As(err, &he) {
				t.Fatalf("error %T %v, want a *helm.Error", err, err)
			}
			if he.Reason != tc.reason || helm.ReasonOf(err) != tc.reason {
				t.Errorf("reason %s, want %s: %v", he.Reason, tc.reason, err)
			}
			for _, m := range tc.message {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not contain %q", err, m)
				}
			}
			if tc.timeout > 0 && time.Since(start) > tc.timeout+2*time.Second {
				t.Errorf("Render returned %s after the deadline", time.Since(start)-tc.timeout)
			}
		})
	}
}

// TestRenderTimeoutStopsTheEngine checks that a render stopped by its deadline does not
// leave the engine running: its goroutine ends at the next template function.
func TestRenderTimeoutStopsTheEngine(t *testing.T) {
	before := runtime.NumGoroutine()
	req := mapRequest(withChart(map[string]string{
		"templates/slow.yaml": "{{ range until 100000 }}{{ range until 100000 }}{{ add 1 1 }}{{ end }}{{ end }}\n",
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := helm.Render(ctx, req); helm.ReasonOf(err) != addonsv1alpha1.ReasonRenderFailed {
		t.Fatalf("error %v, want RenderFailed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the render, %d before: the engine still runs", n, before)
	}
}

// objectKey names an object in the tests.
func objectKey(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s", u.GetKind(), u.GetName())
}

func keys(objects []*unstructured.Unstructured) []string {
	out := make([]string, len(objects))
	for i, u := range objects {
		out[i] = objectKey(u)
	}
	return out
}

// find returns the object of kind and name.
func find(t *testing.T, objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objects {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no %s %s among %v", kind, name, keys(objects))
	return nil
}

func TestRenderHooksChart(t *testing.T) {
	res, err := helm.Render(t.Context(), testdataRequest("hooks"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"CustomResourceDefinition widgets.example.com"}, keys(res.CRDs)); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
	// Helm's install order (kind, then file, then document), the hooks last, in their
	// own kind order; NOTES.txt renders nothing.
	want := []string{
		"ConfigMap demo-cache", "ConfigMap demo-hooks-config", "Service demo-hooks", "Deployment demo-hooks",
		"ServiceAccount demo-hooks-migrations", "ConfigMap demo-hooks-migrations", "Job demo-hooks-migrations", "Job demo-hooks-smoke",
	}
	if diff := cmp.Diff(want, keys(res.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	// The hooks' waves: the weight -5 helpers, then the migrations Job, then the
	// chart's objects, then the post-install Job.
	wantAnnotations := map[string]map[string]string{
		"CustomResourceDefinition widgets.example.com": nil,
		"ConfigMap demo-cache":                         {addonsv1alpha1.AnnotationWaveAfter: "helm-pre-2"},
		"ConfigMap demo-hooks-config":                  {addonsv1alpha1.AnnotationWaveAfter: "helm-pre-2"},
		"Service demo-hooks":                           {addonsv1alpha1.AnnotationWaveAfter: "helm-pre-2"},
		"Deployment demo-hooks":                        {addonsv1alpha1.AnnotationWaveAfter: "helm-pre-2"},
		"ServiceAccount demo-hooks-migrations":         {addonsv1alpha1.AnnotationWave: "helm-pre-1", addonsv1alpha1.AnnotationRecreate: addonsv1alpha1.RecreateOnImmutable},
		"ConfigMap demo-hooks-migrations":              {addonsv1alpha1.AnnotationWave: "helm-pre-1", addonsv1alpha1.AnnotationRecreate: addonsv1alpha1.RecreateOnImmutable},
		"Job demo-hooks-migrations": {
			addonsv1alpha1.AnnotationWave: "helm-pre-2", addonsv1alpha1.AnnotationWaveAfter: "helm-pre-1", addonsv1alpha1.AnnotationRecreate: addonsv1alpha1.RecreateOnImmutable,
		},
		"Job demo-hooks-smoke": {
			addonsv1alpha1.AnnotationWave: "helm-post", addonsv1alpha1.AnnotationWaveAfter: "default", addonsv1alpha1.AnnotationRecreate: addonsv1alpha1.RecreateOnImmutable,
			"team.example.com/owner": "platform",
		},
	}
	got := map[string]map[string]string{}
	for _, u := range append(res.CRDs, res.Objects...) {
		got[objectKey(u)] = u.GetAnnotations()
	}
	if diff := cmp.Diff(wantAnnotations, got); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	waves, err := ssa.PlanWaves(res.Objects)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]string, 0, len(waves))
	for _, w := range waves {
		order = append(order, w.Name)
	}
	if diff := cmp.Diff([]string{"helm-pre-1", "helm-pre-2", "default", "helm-post"}, order); diff != "" {
		t.Errorf("wave order (-want +got):\n%s", diff)
	}

	// What the templates saw: their own files only (.helmignore honoured), no cluster,
	// no DNS, the request's capabilities, a first install. Labels stay as the chart
	// writes them.
	config := find(t, res.Objects, "ConfigMap", "demo-hooks-config")
	wantData := map[string]any{
		"app.conf": "greeting = hello\n", "ignored": "", "files": "files/app.conf;", "lookup": "0", "host": "",
		"kubeVersion": "v1.37.2", "hasMonitoring": "false", "isInstall": "true",
	}
	if diff := cmp.Diff(wantData, config.Object["data"]); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}
	if got := config.GetLabels()["helm.sh/chart"]; got != "hooks-0.1.0" {
		t.Errorf("label helm.sh/chart %q, want it kept", got)
	}
	if res.Nondeterministic != nil {
		t.Errorf("nondeterministic functions %v, want none", res.Nondeterministic)
	}

	// The manifest is the CRDs and the objects, in order, and renders the same again.
	var fromManifest []string
	for doc := range strings.SplitSeq(strings.TrimPrefix(res.Manifest, "---\n"), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		fromManifest = append(fromManifest, objectKey(u))
	}
	if diff := cmp.Diff(append([]string{"CustomResourceDefinition widgets.example.com"}, want...), fromManifest); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	again, err := helm.Render(t.Context(), testdataRequest("hooks"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest != res.Manifest {
		t.Error("a second render differs from the first")
	}
}

func TestRenderValuesAndCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name        string
		values      map[string]any
		apiVersions []string
		check       func(t *testing.T, res *helm.Result)
	}{{
		name:   "subchart disabled by its condition, no hooks",
		values: map[string]any{"cache": map[string]any{"enabled": false}, "migrations": map[string]any{"enabled": false}},
		check: func(t *testing.T, res *helm.Result) {
			want := []string{"ConfigMap demo-hooks-config", "Service demo-hooks", "Deployment demo-hooks"}
			if diff := cmp.Diff(want, keys(res.Objects)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			for _, u := range res.Objects {
				if a := u.GetAnnotations(); a != nil {
					t.Errorf("%s has annotations %v, want none without hooks", objectKey(u), a)
				}
			}
		},
	}, {
		name:   "values over the defaults",
		values: map[string]any{"replicas": 3, "image": map[string]any{"tag": "2.0"}, "cache": map[string]any{"size": "1Gi"}},
		check: func(t *testing.T, res *helm.Result) {
			deploy := find(t, res.Objects, "Deployment", "demo-hooks")
			if got, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas"); got != 3 {
				t.Errorf("replicas %d, want 3", got)
			}
			containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
			if got := containers[0].(map[string]any)["image"]; got != "registry.example.com/app:2.0" {
				t.Errorf("image %v", got)
			}
			if got, _, _ := unstructured.NestedString(find(t, res.Objects, "ConfigMap", "demo-cache").Object, "data", "size"); got != "1Gi" {
				t.Errorf("cache size %q, want 1Gi", got)
			}
		},
	}, {
		name:        "the live cluster's API versions",
		apiVersions: []string{"v1", "apps/v1", "batch/v1", "monitoring.coreos.com/v1"},
		check: func(t *testing.T, res *helm.Result) {
			if got, _, _ := unstructured.NestedString(find(t, res.Objects, "ConfigMap", "demo-hooks-config").Object, "data", "hasMonitoring"); got != "true" {
				t.Errorf("hasMonitoring %q, want true", got)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			req := testdataRequest("hooks")
			req.Values = tc.values
			req.APIVersions = tc.apiVersions
			before := fmt.Sprint(tc.values)
			res, err := helm.Render(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if after := fmt.Sprint(tc.values); after != before {
				t.Errorf("Render changed the request's values: %s, was %s", after, before)
			}
			tc.check(t, res)
		})
	}
}

// chartFiles reads the chart testdata/<name> into a map (path: content).
func chartFiles(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := path.Join("testdata", name)
	err := fs.WalkDir(os.DirFS(root), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path.Join(root, p))
		out[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRenderVendoredArchive checks that a subchart vendored as charts/<name>.tgz, as
// `helm dependency build` leaves it, renders as its folder does.
func TestRenderVendoredArchive(t *testing.T) {
	folder, err := helm.Render(t.Context(), mapRequest(chartFiles(t, "hooks")))
	if err != nil {
		t.Fatal(err)
	}
	files := chartFiles(t, "hooks")
	sub := map[string]string{}
	for name, content := range files {
		if rest, ok := strings.CutPrefix(name, "charts/cache/"); ok {
			sub["cache/"+rest] = content
			delete(files, name)
		}
	}
	files["charts/cache-0.2.0.tgz"] = tgz(t, sub)
	archived, err := helm.Render(t.Context(), mapRequest(files))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(folder.Manifest, archived.Manifest); diff != "" {
		t.Errorf("the chart with its subchart archived differs (-folder +archive):\n%s", diff)
	}
	if !strings.Contains(archived.Manifest, "name: demo-cache") {
		t.Error("the archived subchart rendered nothing")
	}
}

// TestRenderFilesStayInside checks that a template that computes a path outside the
// chart gets nothing: .Files only holds the chart's own files.
func TestRenderFilesStayInside(t *testing.T) {
	res, err := helm.Render(t.Context(), mapRequest(withChart(map[string]string{
		"templates/cm.yaml": configMap + `data:
  passwd: {{ .Files.Get (printf "%s/%s" ".." "../etc/passwd") | quote }}
  glob: {{ len (.Files.Glob (printf "%s/**" "..")) | quote }}
  lines: {{ len (.Files.Lines (list ".." "etc" "hostname" | join "/")) | quote }}
`,
	})))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"passwd": "", "glob": "0", "lines": "0"}
	if diff := cmp.Diff(want, res.Objects[0].Object["data"]); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
}

func TestRenderReportsNondeterministicFunctions(t *testing.T) {
	res, err := helm.Render(t.Context(), mapRequest(withChart(map[string]string{
		"templates/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: demo\nstringData:\n" +
			"  password: {{ .Values.password | default (randAlphaNum 16) }}\n  at: {{ now | date \"2006\" | quote }}\n",
	})))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"date", "now", "randAlphaNum"}, res.Nondeterministic); diff != "" {
		t.Errorf("nondeterministic functions (-want +got):\n%s", diff)
	}
}
