// Package chart tests the Helm chart in dist/chart with the Helm SDK: rendered with its
// default values it holds the objects of dist/install.yaml, and the values it offers
// (image, replicas, resources, the configuration file, the CRD switches) land where they
// should. It is a module of its own so that the Helm SDK's dependencies stay out of the
// operator's go.mod; `make test` runs it.
package chart

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	release "helm.sh/helm/v4/pkg/release"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"helm.sh/helm/v4/pkg/strvals"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var (
	chartDir  = filepath.Join("..", "..", "dist", "chart")
	installer = filepath.Join("..", "..", "dist", "install.yaml")
)

// The operator's namespace in install.yaml, where the tests install the chart too.
const operatorNamespace = "kaddons-system"

// object is one decoded Kubernetes object.
type object = map[string]any

// render renders the chart as `helm template` does, into namespace, with vals over the
// chart's defaults, and returns its objects by key.
func render(t *testing.T, namespace string, vals map[string]any) map[string]object {
	t.Helper()
	manifest, err := renderE(namespace, vals)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, manifest)
}

// renderE renders the chart as render does, and returns the manifest or the error Helm
// gives, such as that of values.schema.json.
func renderE(namespace string, vals map[string]any) (string, error) {
	return renderDefaults(namespace, vals, nil)
}

// renderDefaults renders the chart as renderE does, with the chart's own values.yaml
// changed by edit first (when not nil): a release made before a value existed, and
// upgraded with --reuse-values, renders without it.
func renderDefaults(namespace string, vals map[string]any, edit func(defaults map[string]any)) (string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", chartDir, err)
	}
	if edit != nil {
		v2, ok := chrt.(*chartv2.Chart)
		if !ok {
			return "", fmt.Errorf("%s is a %T, not a chart of API v2", chartDir, chrt)
		}
		edit(v2.Values)
	}
	cfg := action.NewConfiguration()
	cfg.Releases = storage.Init(driver.NewMemory())
	cfg.KubeClient = &kubefake.PrintingKubeClient{Out: io.Discard}
	cfg.Capabilities = common.DefaultCapabilities
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "kaddons"
	install.Namespace = namespace
	install.Replace = true
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", fmt.Errorf("rendering the chart: %w", err)
	}
	acc, err := release.NewAccessor(rel)
	if err != nil {
		return "", err
	}
	return acc.Manifest(), nil
}

// decode splits a YAML stream into objects keyed by kind, namespace and name.
func decode(t *testing.T, stream string) map[string]object {
	t.Helper()
	out := map[string]object{}
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		o := object{}
		if err := d.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decoding: %v", err)
		}
		if len(o) == 0 {
			continue
		}
		k := key(o)
		if _, dup := out[k]; dup {
			t.Fatalf("%s appears twice", k)
		}
		out[k] = o
	}
}

func key(o object) string {
	meta, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%s %v/%v", o["kind"], meta["namespace"], meta["name"])
}

// get returns the value at path (map keys) under o, or nil.
func get(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

// installObjects reads dist/install.yaml.
func installObjects(t *testing.T) map[string]object {
	t.Helper()
	data, err := os.ReadFile(installer)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(data))
}

// standardLabels are the labels the chart puts on every object it renders, as release
// kaddons of the chart in dist/chart.
func standardLabels(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"helm.sh/chart":                "kaddons-" + meta.Version,
		"app.kubernetes.io/name":       "kaddons",
		"app.kubernetes.io/instance":   "kaddons",
		"app.kubernetes.io/version":    meta.AppVersion,
		"app.kubernetes.io/managed-by": "Helm",
	}
}

// asHelmInstallsThem turns install.yaml's objects into what the chart is meant to render
// with its defaults: no Namespace (Helm installs into the release namespace), the
// standard labels on every object (Helm as app.kubernetes.io/managed-by where kustomize
// was), and the CRDs kept on uninstall.
func asHelmInstallsThem(objects map[string]object, standard map[string]any) map[string]object {
	out := map[string]object{}
	for k, o := range objects {
		if o["kind"] == "Namespace" {
			continue
		}
		meta := o["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		maps.Copy(labels, standard)
		meta["labels"] = labels
		if o["kind"] == "CustomResourceDefinition" {
			meta := o["metadata"].(map[string]any)
			annotations, _ := meta["annotations"].(map[string]any)
			if annotations == nil {
				annotations = map[string]any{}
			}
			annotations["helm.sh/resource-policy"] = "keep"
			meta["annotations"] = annotations
		}
		out[k] = o
	}
	return out
}

func TestDefaultsRenderTheInstaller(t *testing.T) {
	want := asHelmInstallsThem(installObjects(t), standardLabels(t))
	got := render(t, operatorNamespace, nil)
	if len(want) < 10 {
		t.Fatalf("install.yaml holds only %d objects", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the chart with its default values differs from dist/install.yaml (-install.yaml +chart):\n%s", diff)
	}
}

// TestStandardLabels checks that every object carries the standard labels of its release,
// and that no selector changes with them: selectors are immutable, so the chart's version
// (which changes with every upgrade) must never be in one.
func TestStandardLabels(t *testing.T) {
	const releaseName = "kaddons" // render's
	objects := render(t, "platform", map[string]any{"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}})
	standard := standardLabels(t)
	if standard["app.kubernetes.io/instance"] != releaseName {
		t.Fatalf("render's release is not %s", releaseName)
	}
	for k, o := range objects {
		labels, _ := get(o, "metadata", "labels").(map[string]any)
		for name, value := range standard {
			if labels[name] != value {
				t.Errorf("%s: label %s is %v, want %v", k, name, labels[name], value)
			}
		}
	}
	selector := map[string]any{"app.kubernetes.io/name": "kaddons", "control-plane": "controller-manager"}
	for k, path := range map[string][]string{
		"Deployment platform/kaddons-controller-manager":                     {"spec", "selector", "matchLabels"},
		"Service platform/kaddons-controller-manager-metrics-service":        {"spec", "selector"},
		"ServiceMonitor platform/kaddons-controller-manager-metrics-monitor": {"spec", "selector", "matchLabels"},
	} {
		if objects[k] == nil {
			t.Errorf("no %s", k)
			continue
		}
		if diff := cmp.Diff(selector, get(objects[k], path...)); diff != "" {
			t.Errorf("%s: selector (-want +got):\n%s", k, diff)
		}
	}
	if diff := cmp.Diff(selector, get(objects["Deployment platform/kaddons-controller-manager"], "spec", "template", "metadata", "labels")); diff != "" {
		t.Errorf("the manager's pod labels (-want +got):\n%s", diff)
	}
}

// TestSchemaRefusesBadValues checks that values.schema.json makes Helm refuse a
// misspelt or mistyped value, as `helm install --set` gives it, and lets good ones through.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set     string
		refused bool
	}{
		{set: "manager.replicas=abc", refused: true},
		{set: "manager.replicas=-1", refused: true},
		{set: "manager.replica=2", refused: true},
		{set: "managers.replicas=2", refused: true},
		{set: "crds.install=yes", refused: true},
		{set: "manager.tolerations[0].operator=Always", refused: true},
		{set: "manager.extraEnv[0].value=x", refused: true},
		{set: "manager.imagePullSecrets[0].nam=x", refused: true},
		{set: "manager.image.digest=latest", refused: true},
		{set: "serviceAccount.name=other", refused: true},
		{set: "metrics.serviceMonitor.enable=true", refused: true},
		{set: "manager.replicas=2"},
		{set: "manager.image.tag=1.2"},
		{set: "manager.podLabels.team=platform"},
		{set: "manager.extraEnv[0].name=A,manager.extraEnv[0].value=b"},
		{set: "manager.tolerations[0].operator=Exists"},
		{set: "manager.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{set: "metrics.serviceMonitor.enabled=true"},
		{set: "global.imageRegistry=example.com"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			vals := map[string]any{}
			if err := strvals.ParseInto(tc.set, vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderE(operatorNamespace, vals)
			switch {
			case tc.refused && err == nil:
				t.Errorf("--set %s was accepted", tc.set)
			case tc.refused && !strings.Contains(err.Error(), "schema"):
				t.Errorf("--set %s: refused, but not by the schema: %v", tc.set, err)
			case !tc.refused && err != nil:
				t.Errorf("--set %s: %v", tc.set, err)
			}
		})
	}
}

// TestSchemaValidatesTheDefaults checks values.yaml against values.schema.json directly.
func TestSchemaValidatesTheDefaults(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := chart.NewAccessor(chrt)
	if err != nil {
		t.Fatal(err)
	}
	if len(acc.Schema()) == 0 {
		t.Fatal("the chart has no values.schema.json")
	}
	if err := chartutil.ValidateAgainstSchema(chrt, acc.Values()); err != nil {
		t.Errorf("the default values do not validate: %v", err)
	}
}

// TestValuesAddedLaterMayBeMissing renders the chart with the values of a release made
// before the scheduling values, the pod labels and annotations, extraEnv and the
// ServiceAccount's annotations existed, as `helm upgrade --reuse-values` does: the
// templates read them nil-safe, and the manager renders without them.
func TestValuesAddedLaterMayBeMissing(t *testing.T) {
	manifest, err := renderDefaults("kaddons-system", nil, func(defaults map[string]any) {
		delete(defaults, "serviceAccount")
		m := defaults["manager"].(map[string]any)
		for _, key := range []string{"nodeSelector", "affinity", "tolerations", "imagePullSecrets", "podAnnotations", "podLabels", "extraEnv"} {
			delete(m, key)
		}
	})
	if err != nil {
		t.Fatalf("a release without the newer values does not render: %v", err)
	}
	objects := decode(t, manifest)
	deploy, _, _ := manager(t, objects, "kaddons-system")
	if got := get(deploy, "spec", "template", "metadata", "labels", "control-plane"); got == nil {
		t.Errorf("the manager's pod labels lost control-plane: %v", get(deploy, "spec", "template", "metadata", "labels"))
	}
}

func TestLint(t *testing.T) {
	lint := action.NewLint()
	lint.Namespace = operatorNamespace
	res := lint.Run([]string{chartDir}, nil)
	for _, err := range res.Errors {
		t.Errorf("helm lint: %v", err)
	}
	for _, m := range res.Messages {
		t.Logf("helm lint: %s", m)
	}
}

// manager returns the manager Deployment, its manager container and the ConfigMap it mounts.
func manager(t *testing.T, objects map[string]object, namespace string) (deploy object, container map[string]any, configMap object) {
	t.Helper()
	deploy = objects["Deployment "+namespace+"/kaddons-controller-manager"]
	if deploy == nil {
		t.Fatalf("no Deployment %s/kaddons-controller-manager among %d objects", namespace, len(objects))
	}
	for _, c := range get(deploy, "spec", "template", "spec", "containers").([]any) {
		if c.(map[string]any)["name"] == "manager" {
			container = c.(map[string]any)
		}
	}
	for _, v := range get(deploy, "spec", "template", "spec", "volumes").([]any) {
		if name, ok := get(v, "configMap", "name").(string); ok {
			configMap = objects["ConfigMap "+namespace+"/"+name]
			if configMap == nil {
				t.Fatalf("the Deployment mounts the ConfigMap %s, which the chart does not render", name)
			}
		}
	}
	if container == nil || configMap == nil {
		t.Fatal("no manager container or configuration ConfigMap")
	}
	return deploy, container, configMap
}

func TestValuesLand(t *testing.T) {
	defaults := render(t, operatorNamespace, nil)
	_, _, defaultConfigMap := manager(t, defaults, operatorNamespace)
	defaultName := get(defaultConfigMap, "metadata", "name")
	configText := get(defaultConfigMap, "data", "controller_manager_config.yaml").(string)
	debugConfig := strings.Replace(configText, "logLevel: info", "logLevel: debug", 1)
	if debugConfig == configText {
		t.Fatal("the default configuration has no logLevel: info to change")
	}
	resources := map[string]any{
		"limits":   map[string]any{"cpu": "1", "memory": "512Mi"},
		"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
	}

	for _, tc := range []struct {
		name      string
		namespace string
		vals      string
		check     func(t *testing.T, r rendered)
	}{{
		name: "image, replicas and resources", namespace: operatorNamespace,
		vals: `
manager:
  image: {repository: registry.example.com/kaddons, tag: v9.9.9}
  replicas: 3
  resources: {limits: {cpu: "1", memory: 512Mi}, requests: {cpu: 100m, memory: 128Mi}}
`,
		check: checkImageReplicasResources,
	}, {
		name: "an image digest wins over the tag", namespace: operatorNamespace,
		vals: `
manager:
  image: {repository: registry.example.com/kaddons, tag: v1, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
`,
		check: checkDigest,
	}, {
		name: "the configuration file as text", namespace: operatorNamespace,
		vals:  "manager:\n  config: |\n" + indent(debugConfig, "    "),
		check: checkConfigText,
	}, {
		name: "the configuration file as a map", namespace: operatorNamespace,
		vals: `
manager:
  config:
    apiVersion: config.kaddons.dev/v1beta1
    kind: OperatorConfiguration
    runtime: {logLevel: debug, defaultChannel: rapid}
`,
		check: checkConfigMap,
	}, {
		name: "another namespace", namespace: "platform",
		check: checkNamespace,
	}, {
		name: "CRDs neither kept nor installed", namespace: operatorNamespace,
		vals:  "crds: {install: false}\n",
		check: checkNoCRDs,
	}, {
		name: "one replica has no PodDisruptionBudget", namespace: operatorNamespace,
		vals:  "manager: {replicas: 1}\n",
		check: checkPDB(false),
	}, {
		name: "two replicas have a PodDisruptionBudget", namespace: operatorNamespace,
		vals:  "manager: {replicas: 2}\n",
		check: checkPDB(true),
	}, {
		name: "scheduling, pull secrets, pod metadata, ServiceAccount annotations and extra environment", namespace: operatorNamespace,
		vals: `
manager:
  nodeSelector: {kubernetes.io/os: linux, pool: system}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]
  tolerations: [{key: dedicated, operator: Equal, value: addons, effect: NoSchedule}]
  imagePullSecrets: [{name: registry-credentials}]
  podAnnotations: {example.com/owner: platform, kubectl.kubernetes.io/default-container: other}
  podLabels: {team: platform, control-plane: other}
  extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: 10.0.0.1}
  - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
serviceAccount:
  annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/kaddons"}
`,
		check: checkPodValues,
	}, {
		name: "no tolerations", namespace: operatorNamespace,
		vals:  "manager: {tolerations: []}\n",
		check: checkNoTolerations,
	}, {
		name: "CRDs not kept", namespace: operatorNamespace,
		vals:  "crds: {keep: false}\n",
		check: checkCRDsNotKept,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			r := rendered{objects: render(t, tc.namespace, vals), defaultConfigMapName: defaultName,
				debugConfig: debugConfig, resources: resources}
			r.deploy, r.container, r.configMap = manager(t, r.objects, tc.namespace)
			tc.check(t, r)
		})
	}
}

// rendered is what a values case renders, and what the checks compare it with.
type rendered struct {
	objects   map[string]object
	deploy    object
	container map[string]any
	configMap object
	// What the cases set or the defaults give.
	defaultConfigMapName any
	debugConfig          string
	resources            map[string]any
}

// checkImageReplicasResources checks manager.image, manager.replicas and manager.resources, and that the PodDisruptionBudget selects the pods.
func checkImageReplicasResources(t *testing.T, r rendered) {
	if got := r.container["image"]; got != "registry.example.com/kaddons:v9.9.9" {
		t.Errorf("image %v", got)
	}
	if got := get(r.deploy, "spec", "replicas"); got != int64(3) && got != float64(3) {
		t.Errorf("replicas %v (%T)", got, got)
	}
	if diff := cmp.Diff(r.resources, r.container["resources"]); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	pdb := r.objects["PodDisruptionBudget "+operatorNamespace+"/kaddons-controller-manager"]
	if diff := cmp.Diff(get(r.deploy, "spec", "selector", "matchLabels"), get(pdb, "spec", "selector", "matchLabels")); diff != "" || pdb == nil {
		t.Errorf("the PodDisruptionBudget does not select the manager's pods: %s", diff)
	}
}

// checkPodValues checks that the pod values land on the Deployment's pods and the
// ServiceAccount, that the pods' own labels and annotations win over podLabels and
// podAnnotations (the selector stays), and that extraEnv comes after the chart's variables.
func checkPodValues(t *testing.T, r rendered) {
	pod := get(r.deploy, "spec", "template")
	for _, tc := range []struct {
		path []string
		want any
	}{
		{path: []string{"spec", "nodeSelector"}, want: map[string]any{"kubernetes.io/os": "linux", "pool": "system"}},
		{path: []string{"spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"}, want: map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{
				map[string]any{"key": "pool", "operator": "In", "values": []any{"system"}}}}}}},
		{path: []string{"spec", "tolerations"}, want: []any{
			map[string]any{"key": "dedicated", "operator": "Equal", "value": "addons", "effect": "NoSchedule"}}},
		{path: []string{"spec", "imagePullSecrets"}, want: []any{map[string]any{"name": "registry-credentials"}}},
		{path: []string{"metadata", "annotations"}, want: map[string]any{
			"example.com/owner": "platform", "kubectl.kubernetes.io/default-container": "manager"}},
		{path: []string{"metadata", "labels"}, want: map[string]any{
			"team": "platform", "app.kubernetes.io/name": "kaddons", "control-plane": "controller-manager"}},
	} {
		if diff := cmp.Diff(tc.want, get(pod, tc.path...)); diff != "" {
			t.Errorf("pod %s (-want +got):\n%s", strings.Join(tc.path, "."), diff)
		}
	}
	if diff := cmp.Diff(map[string]any{"app.kubernetes.io/name": "kaddons", "control-plane": "controller-manager"},
		get(r.deploy, "spec", "selector", "matchLabels")); diff != "" {
		t.Errorf("the selector changed (-want +got):\n%s", diff)
	}
	env := r.container["env"].([]any)
	names := make([]string, 0, len(env))
	for _, e := range env {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	if diff := cmp.Diff([]string{"POD_NAMESPACE", "POD_SERVICE_ACCOUNT", "GOMEMLIMIT",
		"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}, names); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	sa := r.objects["ServiceAccount "+operatorNamespace+"/"+get(r.deploy, "spec", "template", "spec", "serviceAccountName").(string)]
	if diff := cmp.Diff(map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/kaddons"},
		get(sa, "metadata", "annotations")); diff != "" {
		t.Errorf("ServiceAccount annotations (-want +got):\n%s", diff)
	}
}

// checkNoTolerations checks that empty tolerations leave the field out.
func checkNoTolerations(t *testing.T, r rendered) {
	if tolerations, ok := get(r.deploy, "spec", "template", "spec").(map[string]any)["tolerations"]; ok {
		t.Errorf("tolerations %v, want no field", tolerations)
	}
}

// checkPDB checks that the PodDisruptionBudget is rendered when want says (above one
// replica), and then selects the manager's pods and lets one be evicted at a time.
func checkPDB(want bool) func(t *testing.T, r rendered) {
	return func(t *testing.T, r rendered) {
		var pdbs []object
		for _, o := range r.objects {
			if o["kind"] == "PodDisruptionBudget" {
				pdbs = append(pdbs, o)
			}
		}
		replicas := get(r.deploy, "spec", "replicas")
		if !want {
			if len(pdbs) != 0 {
				t.Errorf("%d PodDisruptionBudget(s) rendered at %v replica(s), want none", len(pdbs), replicas)
			}
			return
		}
		if len(pdbs) != 1 {
			t.Fatalf("%d PodDisruptionBudget(s) rendered at %v replicas, want one", len(pdbs), replicas)
		}
		pdb := pdbs[0]
		if diff := cmp.Diff(get(r.deploy, "spec", "selector", "matchLabels"), get(pdb, "spec", "selector", "matchLabels")); diff != "" {
			t.Errorf("the PodDisruptionBudget does not select the manager's pods (-deployment +budget):\n%s", diff)
		}
		if got := get(pdb, "spec", "maxUnavailable"); got != int64(1) && got != float64(1) {
			t.Errorf("maxUnavailable %v (%T), want 1", got, got)
		}
	}
}

// checkDigest checks that manager.image.digest wins over the tag.
func checkDigest(t *testing.T, r rendered) {
	want := "registry.example.com/kaddons@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if got := r.container["image"]; got != want {
		t.Errorf("image %v, want %s", got, want)
	}
}

// checkConfigText checks that manager.config as text lands verbatim and renames the ConfigMap.
func checkConfigText(t *testing.T, r rendered) {
	if got := get(r.configMap, "data", "controller_manager_config.yaml"); got != r.debugConfig {
		t.Errorf("the ConfigMap holds\n%v\nwant\n%s", got, r.debugConfig)
	}
	if get(r.configMap, "metadata", "name") == r.defaultConfigMapName {
		t.Errorf("the ConfigMap kept its name %v: a changed file would not roll the manager out", r.defaultConfigMapName)
	}
}

// checkConfigMap checks that manager.config as a map lands as its YAML.
func checkConfigMap(t *testing.T, r rendered) {
	text, _ := get(r.configMap, "data", "controller_manager_config.yaml").(string)
	got := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("the ConfigMap's file is not YAML: %v\n%s", err, text)
	}
	want := map[string]any{"apiVersion": "config.kaddons.dev/v1beta1", "kind": "OperatorConfiguration",
		"runtime": map[string]any{"logLevel": "debug", "defaultChannel": "rapid"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}
}

// checkNamespace checks that every namespaced object and binding subject is in the release namespace.
func checkNamespace(t *testing.T, r rendered) {
	for k, o := range r.objects {
		if ns := get(o, "metadata", "namespace"); ns != nil && ns != "platform" {
			t.Errorf("%s is in namespace %v", k, ns)
		}
		if subjects, ok := o["subjects"].([]any); ok {
			for _, s := range subjects {
				if ns := get(s, "namespace"); ns != "platform" {
					t.Errorf("%s binds a subject in namespace %v", k, ns)
				}
			}
		}
	}
}

// checkNoCRDs checks that crds.install false renders no CRD.
func checkNoCRDs(t *testing.T, r rendered) {
	for k, o := range r.objects {
		if o["kind"] == "CustomResourceDefinition" {
			t.Errorf("%s is rendered with crds.install false", k)
		}
	}
}

// checkCRDsNotKept checks that crds.keep false drops the keep annotation.
func checkCRDsNotKept(t *testing.T, r rendered) {
	crds := 0
	for k, o := range r.objects {
		if o["kind"] == "CustomResourceDefinition" {
			crds++
			if get(o, "metadata", "annotations", "helm.sh/resource-policy") != nil {
				t.Errorf("%s keeps helm.sh/resource-policy with crds.keep false", k)
			}
		}
	}
	if crds == 0 {
		t.Error("no CRD rendered")
	}
}

// indent prefixes each non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
