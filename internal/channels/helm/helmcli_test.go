//go:build helmcli

package helm_test

import (
	"bytes"
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

// hooksOverride are values for testdata/hooks.
const hooksOverride = `
replicas: 3
image:
  tag: "2.0"
cache:
  size: 1Gi
`

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
		t.Fatal("KADDONS_HELM is not set: run make test-chart-helm, which builds the Helm CLI and sets it")
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

// comparable returns a copy of u without Helm's annotations and kaddons' wave and
// recreate annotations, and without annotations when none is left.
func comparable(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	annotations := c.GetAnnotations()
	maps.DeleteFunc(annotations, func(k, _ string) bool {
		return strings.HasPrefix(k, "helm.sh/") || strings.HasPrefix(k, "meta.helm.sh/") ||
			k == addonsv1alpha1.AnnotationWave || k == addonsv1alpha1.AnnotationWaveAfter || k == addonsv1alpha1.AnnotationRecreate
	})
	if len(annotations) == 0 {
		annotations = nil
	}
	c.SetAnnotations(annotations)
	return c
}
