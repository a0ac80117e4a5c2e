package helm_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels/helm"
)

// The upstream chart the tests render unmodified: metrics-server's own chart, in the
// archive of its Go module (charts/metrics-server, chart 3.12.2), located in the module
// cache. The sum pins the archive as go.sum would; the module is no dependency of
// kaddons, so that its go.mod stays as it is.
const (
	metricsServerModule  = "sigs.k8s.io/metrics-server"
	metricsServerVersion = "v0.8.0"
	metricsServerSum     = "h1:Zlsi3sBWEtFKCD3+xSysThvXyLQ363rUAlqpnsY5JwI="
	metricsServerChart   = "charts/metrics-server"
)

// moduleDir returns the folder of module@version in the module cache, downloading it
// from the module proxy when the cache does not hold it yet (with a warm cache, no
// network). It runs outside any module, so that it neither reads nor touches kaddons'
// go.mod, and checks the archive's hash against sum.
func moduleDir(t *testing.T, module, version, sum string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	if jsonErr := json.Unmarshal(out, &info); jsonErr != nil || err != nil || info.Error != "" {
		t.Fatalf("go mod download %s@%s: %v %s %s", module, version, err, info.Error, stderr.String())
	}
	if info.Sum != sum {
		t.Fatalf("%s@%s has the hash %s, want %s", module, version, info.Sum, sum)
	}
	return info.Dir
}

// metricsServerRequest is a render of metrics-server's chart, as Helm would install it
// into kube-system, and the chart's folder on disk.
func metricsServerRequest(t *testing.T) (helm.Request, string) {
	dir := moduleDir(t, metricsServerModule, metricsServerVersion, metricsServerSum)
	return helm.Request{
		Chart: os.DirFS(dir), Dir: metricsServerChart, Key: "metrics-server/3.12.2",
		ReleaseName: "metrics-server", Namespace: "kube-system", KubeVersion: "v1.37.2",
	}, filepath.Join(dir, metricsServerChart)
}

// metricsServerOverride are values that reach most of the chart's templates: two
// replicas with a PodDisruptionBudget, cert-manager's Issuer and Certificate, the addon
// resizer (nanny) and its RBAC, a ServiceMonitor.
const metricsServerOverride = `
replicas: 2
podDisruptionBudget:
  enabled: true
  minAvailable: 1
args:
  - --kubelet-insecure-tls
apiService:
  insecureSkipTLSVerify: false
tls:
  type: cert-manager
addonResizer:
  enabled: true
metrics:
  enabled: true
serviceMonitor:
  enabled: true
resources:
  requests:
    cpu: 50m
    memory: 64Mi
`

// hooksOverride are values for testdata/hooks.
const hooksOverride = `
replicas: 3
image:
  tag: "2.0"
cache:
  size: 1Gi
`

// valuesOf decodes YAML values as `helm template -f` reads them.
func valuesOf(t *testing.T, text string) map[string]any {
	t.Helper()
	if text == "" {
		return nil
	}
	v, err := common.ReadValues([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

func TestRenderMetricsServerChart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   []string
	}{{
		name: "defaults",
		want: []string{
			"ServiceAccount metrics-server", "ClusterRole system:metrics-server-aggregated-reader",
			"ClusterRole system:metrics-server", "ClusterRoleBinding metrics-server:system:auth-delegator",
			"ClusterRoleBinding system:metrics-server", "RoleBinding metrics-server-auth-reader", "Service metrics-server",
			"Deployment metrics-server", "APIService v1beta1.metrics.k8s.io",
		},
	}, {
		name: "values over the defaults", values: metricsServerOverride,
		want: []string{
			"PodDisruptionBudget metrics-server", "ServiceAccount metrics-server", "ConfigMap metrics-server-nanny-config",
			"ClusterRole system:metrics-server-aggregated-reader", "ClusterRole system:metrics-server-nanny",
			"ClusterRole system:metrics-server", "ClusterRoleBinding metrics-server:system:auth-delegator",
			"ClusterRoleBinding system:metrics-server-nanny", "ClusterRoleBinding system:metrics-server",
			"Role system:metrics-server-nanny", "RoleBinding metrics-server-nanny", "RoleBinding metrics-server-auth-reader",
			"Service metrics-server", "Deployment metrics-server", "APIService v1beta1.metrics.k8s.io",
			"Certificate metrics-server", "Issuer metrics-server-issuer", "ServiceMonitor metrics-server",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := metricsServerRequest(t)
			req.Values = valuesOf(t, tc.values)
			res, err := helm.Render(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.CRDs) != 0 {
				t.Errorf("CRDs %v, want none", keys(res.CRDs))
			}
			if diff := cmp.Diff(tc.want, keys(res.Objects)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if res.Nondeterministic != nil {
				t.Errorf("nondeterministic functions %v", res.Nondeterministic)
			}
			for _, u := range res.Objects {
				for k := range u.GetAnnotations() {
					if strings.Contains(k, "helm.sh/") || strings.HasPrefix(k, "addons.kaddons.dev/") {
						t.Errorf("%s has the annotation %s", objectKey(u), k)
					}
				}
			}
		})
	}
}

// helmTemplateCase is a chart and values that TestHelmTemplate renders both ways.
type helmTemplateCase struct {
	name        string
	req         helm.Request
	dir         string // the chart's folder on disk
	values      string
	apiVersions []string
}

// TestHelmTemplate renders charts with Render and with the Helm CLI's `helm template`
// (the same SDK version, built by hack/helm.sh: make test-chart-helm) and compares each
// object: the same objects, in the same order, with the same content once Helm's
// annotations (which Render removes) and kaddons' wave annotations (which it adds) are
// left out of both.
func TestHelmTemplate(t *testing.T) {
	cli := os.Getenv("KADDONS_HELM")
	if cli == "" {
		t.Skip("KADDONS_HELM is not set: make test-chart-helm builds the Helm CLI and runs this test")
	}
	metricsServer, metricsServerDir := metricsServerRequest(t)
	hooks, hooksDir := testdataRequest("hooks"), filepath.Join("testdata", "hooks")
	for _, tc := range []helmTemplateCase{
		{name: "metrics-server, defaults", req: metricsServer, dir: metricsServerDir},
		{name: "metrics-server, values", req: metricsServer, dir: metricsServerDir, values: metricsServerOverride},
		{name: "metrics-server, API versions", req: metricsServer, dir: metricsServerDir, values: metricsServerOverride,
			apiVersions: []string{"monitoring.coreos.com/v1", "cert-manager.io/v1"}},
		{name: "hooks, defaults", req: hooks, dir: hooksDir},
		{name: "hooks, values and API versions", req: hooks, dir: hooksDir, values: hooksOverride,
			apiVersions: []string{"monitoring.coreos.com/v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareWithHelm(t, cli, tc)
		})
	}
}

// compareWithHelm renders tc with Render and with `helm template`, and compares.
func compareWithHelm(t *testing.T, cli string, tc helmTemplateCase) {
	req := tc.req
	req.Values = valuesOf(t, tc.values)
	if tc.apiVersions != nil {
		// `helm template --api-versions` adds to Helm's defaults; Render takes the
		// cluster's list as it is.
		req.APIVersions = append(slices.Clone(common.DefaultCapabilities.APIVersions), tc.apiVersions...)
	}
	start := time.Now()
	res, err := helm.Render(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	rendered := time.Since(start)

	args := []string{"template", req.ReleaseName, tc.dir, "--namespace", req.Namespace,
		"--kube-version", req.KubeVersion, "--include-crds"}
	if tc.values != "" {
		// Not in t.TempDir(): the test's name has commas, which --values splits on.
		tmp, err := os.MkdirTemp("", "values")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(tmp) })
		file := filepath.Join(tmp, "values.yaml")
		if err := os.WriteFile(file, []byte(tc.values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", file)
	}
	for _, v := range tc.apiVersions {
		args = append(args, "--api-versions", v)
	}
	cmd := exec.Command(cli, args...)
	// No repository, registry or plugin configuration of the machine is read.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start = time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("Render %s, helm template %s (process and all)", rendered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	want := decodeHelmOutput(t, string(out))
	got := slices.Concat(res.CRDs, res.Objects)
	if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
		t.Fatalf("objects and their order (-helm template +Render):\n%s", diff)
	}
	for i := range want {
		w, g := comparable(want[i]), comparable(got[i])
		if diff := cmp.Diff(w.Object, g.Object); diff != "" {
			t.Errorf("%s (-helm template +Render):\n%s", objectKey(want[i]), diff)
		}
	}
	t.Logf("%d objects alike", len(want))
}

// decodeHelmOutput decodes what `helm template` prints, in order.
func decodeHelmOutput(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	docs := releaseutil.SplitManifests(stream)
	names := slices.Collect(maps.Keys(docs))
	sort.Sort(releaseutil.BySplitManifestsOrder(names))
	var out []*unstructured.Unstructured
	for _, name := range names {
		data, err := yaml.YAMLToJSON([]byte(docs[name]))
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(data)); s == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("%v\n%s", err, docs[name])
		}
		out = append(out, u)
	}
	return out
}

// comparable returns a copy of u without Helm's annotations and kaddons' wave
// annotations, and without annotations when none is left.
func comparable(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	annotations := c.GetAnnotations()
	maps.DeleteFunc(annotations, func(k, _ string) bool {
		return strings.HasPrefix(k, "helm.sh/") || strings.HasPrefix(k, "meta.helm.sh/") ||
			k == addonsv1alpha1.AnnotationWave || k == addonsv1alpha1.AnnotationWaveAfter
	})
	if len(annotations) == 0 {
		annotations = nil
	}
	c.SetAnnotations(annotations)
	return c
}
