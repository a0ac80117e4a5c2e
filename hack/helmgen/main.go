// Command helmgen writes the kaddons Helm chart (dist/chart) from the rendered
// config/default, so that the chart and dist/install.yaml cannot drift: `make helm` pipes
// `kubectl kustomize config/default` into it. It follows the layout of kubebuilder v4's
// Helm plugin (Chart.yaml, values.yaml, templates/<area>/<object>.yaml).
//
// Each object becomes one template, with these values put in:
//
//   - the operator's namespace becomes the release namespace, and the Namespace object is
//     left out (helm install --create-namespace makes it);
//   - every object's labels app.kubernetes.io/name and managed-by (kustomize's) become the
//     chart's standard labels (helm.sh/chart, app.kubernetes.io/name, instance, version,
//     managed-by: the helper kaddons.labels); selectors and pod labels stay as they are;
//   - the manager Deployment's replicas, image and resources come from manager.replicas,
//     manager.image and manager.resources;
//   - the manager pods' nodeSelector, affinity, tolerations and imagePullSecrets come from
//     manager.* (the Deployment's own are the defaults), manager.podAnnotations and
//     manager.podLabels are added to the pods' own (which win, so the selector stays),
//     manager.extraEnv is appended to the manager container's env, and
//     serviceAccount.annotations go on the manager's ServiceAccount;
//   - the configuration file (the manager-config ConfigMap) comes from manager.config,
//     and the ConfigMap's name carries a hash of it computed as kustomize does, so that a
//     change rolls the Deployment out and the default values give install.yaml's name;
//   - CustomResourceDefinitions get helm.sh/resource-policy: keep while crds.keep is true,
//     so that uninstalling the chart leaves the add-ons running;
//   - a PodDisruptionBudget is rendered only when manager.replicas is above one: a budget
//     for a single replica protects nothing;
//   - values.schema.json gives the type of every value, and allows no unknown value at
//     the top level or in manager, so that Helm refuses a mistyped one.
//
// The monitoring objects of -monitoring (config/prometheus, rendered with kustomize: the
// Prometheus Operator's ServiceMonitor and PrometheusRule, whose CRDs config/default does
// not assume) become templates too, rendered only when metrics.serviceMonitor.enabled or
// metrics.prometheusRule.enabled is true, with the labels of metrics.*.labels added. Text
// that looks like a template expression (the alerts' {{ $labels.name }}) is escaped so
// that Helm leaves it to Prometheus.
//
// With -installer it writes dist/install.yaml instead: the rendered objects as they are,
// less the PodDisruptionBudget when the manager Deployment has one replica, by the same
// rule as the chart.
//
// Anything else that names the operator's namespace is an error, so that nothing is left
// pointing at kaddons-system.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// options are the command line.
type options struct {
	out          string
	chartVersion string
	configKey    string
	container    string
	installer    bool
	monitoring   string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "dist/chart", "The chart folder to (re)write.")
	flag.StringVar(&o.chartVersion, "chart-version", "0.1.0", "The chart's version.")
	flag.StringVar(&o.configKey, "config-key", "controller_manager_config.yaml", "The key of the configuration file in the manager's ConfigMap.")
	flag.StringVar(&o.container, "container", "manager", "The manager's container name.")
	flag.BoolVar(&o.installer, "installer", false, "Write the installer (install.yaml) to stdout instead of the chart.")
	flag.StringVar(&o.monitoring, "monitoring", "config/prometheus",
		"The kustomization of the opt-in monitoring objects (ServiceMonitor, PrometheusRule) for the chart; empty leaves them out.")
	flag.Parse()
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	if o.installer {
		out, err := installer(in, o.container)
		if err != nil {
			fail(err)
		}
		if _, err := os.Stdout.Write(out); err != nil {
			fail(err)
		}
		return
	}
	chart, err := generate(in, o)
	if err != nil {
		fail(err)
	}
	if err := write(o.out, chart); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "helmgen: wrote %s (%d files)\n", o.out, len(chart))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "helmgen: %v\n", err)
	os.Exit(1)
}

const (
	kindCRD       = "CustomResourceDefinition"
	kindConfigMap = "ConfigMap"
	kindPDB       = "PodDisruptionBudget"
	kindDeploy    = "Deployment"

	fieldMetadata = "metadata"

	chartName      = "kaddons"
	labelName      = "app.kubernetes.io/name"
	labelManagedBy = "app.kubernetes.io/managed-by"
)

// pdbGuard renders a PodDisruptionBudget only above one replica. installer applies the
// same rule to install.yaml.
const pdbGuard = "{{- if gt (int .Values.manager.replicas) 1 }}\n"

// documentSeparator splits a YAML stream into its documents.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*\n`)

// installer returns the rendered stream as install.yaml: every document as it is, in
// order, except a PodDisruptionBudget when the manager Deployment (the one with a
// container called container) runs one replica, as the chart's default values do.
func installer(in []byte, container string) ([]byte, error) {
	docs := documentSeparator.Split(string(in), -1)
	replicas := -1
	for _, doc := range docs {
		n, err := yaml.Parse(doc)
		if err != nil || n.IsNilOrEmpty() || n.GetKind() != kindDeploy || !hasContainer(n, container) {
			continue
		}
		replicas = 1
		if v, err := n.Pipe(yaml.Lookup("spec", "replicas")); err == nil && v != nil {
			if replicas, err = strconv.Atoi(yaml.GetValue(v)); err != nil {
				return nil, fmt.Errorf("the manager Deployment's replicas: %w", err)
			}
		}
	}
	if replicas < 0 {
		return nil, fmt.Errorf("no Deployment with a container %q", container)
	}
	kept := make([]string, 0, len(docs))
	for _, doc := range docs {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		n, err := yaml.Parse(doc)
		if err != nil {
			return nil, fmt.Errorf("reading the rendered manifests: %w", err)
		}
		if n.GetKind() == kindPDB && replicas <= 1 {
			continue
		}
		kept = append(kept, doc)
	}
	return []byte(strings.Join(kept, "---\n")), nil
}

// Placeholders stand in for template expressions while the objects are YAML.
const (
	phNamespace = "KADDONS_HELM_RELEASE_NAMESPACE"
	// phStandardLabels is a label that the chart's standard labels (kaddons.labels) take
	// the place of.
	phStandardLabels = "KADDONS_HELM_STANDARD_LABELS"
	phReplicas       = "KADDONS_HELM_REPLICAS"
	phImage          = "KADDONS_HELM_IMAGE"
	phResources      = "KADDONS_HELM_RESOURCES"
	phConfig         = "KADDONS_HELM_CONFIG"
	phConfigMap      = "KADDONS_HELM_CONFIGMAP_NAME"
	phKeep           = "KADDONS_HELM_KEEP"
	// phWith is a field's value, followed by a values path: the field is rendered, with
	// that value, only when the value is not empty.
	phWith = "KADDONS_HELM_WITH"
	// phMerge is a key whose value is a values path (a map) followed by the keys already
	// in the mapping: the map's other entries are added to the mapping.
	phMerge = "KADDONS_HELM_MERGE"
	// phAppend is a list element, followed by a values path (a list) whose elements take
	// its place.
	phAppend = "KADDONS_HELM_APPEND"
	// phLabels is a label whose value names the values of metrics (serviceMonitor,
	// prometheusRule) whose labels take its place.
	phLabels = "KADDONS_HELM_LABELS"
)

// monitoringValues names the values of metrics that enable each monitoring kind.
var monitoringValues = map[string]string{
	"ServiceMonitor": "serviceMonitor",
	"PrometheusRule": "prometheusRule",
}

// manager holds what the values file takes from the manager's objects.
type manager struct {
	image     string
	replicas  string
	resources string // YAML
	config    string
	// podFields are the scheduling fields of the pod spec (podFields), as YAML.
	podFields map[string]string
	// serviceAccount is the name of the manager's ServiceAccount.
	serviceAccount string
}

// podFields are the pod spec's fields that values of manager set, by value name. The
// Deployment's own become the defaults, so that the default values render it as it is.
var podFields = []struct{ field, empty string }{
	{field: fieldNodeSelector, empty: "{}"},
	{field: fieldAffinity, empty: "{}"},
	{field: fieldTolerations, empty: "[]"},
	{field: fieldImagePullSecrets, empty: "[]"},
}

// The pod spec's fields of podFields, and the names of their values in manager.
const (
	fieldNodeSelector     = "nodeSelector"
	fieldAffinity         = "affinity"
	fieldTolerations      = "tolerations"
	fieldImagePullSecrets = "imagePullSecrets"
)

// generate returns the chart's files by path relative to the chart folder.
func generate(in []byte, o options) (map[string]string, error) {
	nodes, err := (&kio.ByteReader{Reader: bytes.NewReader(in), OmitReaderAnnotations: true}).Read()
	if err != nil {
		return nil, fmt.Errorf("reading the rendered manifests: %w", err)
	}
	namespace, configMapName, err := operatorObjects(nodes, o.configKey)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	var m manager
	for _, n := range nodes {
		if n.GetKind() == kindDeploy && hasContainer(n, o.container) {
			sa, err := n.Pipe(yaml.Lookup("spec", "template", "spec", "serviceAccountName"))
			if err != nil {
				return nil, err
			}
			m.serviceAccount = yaml.GetValue(sa)
		}
	}
	for _, n := range nodes {
		if n.GetKind() == "Namespace" {
			continue
		}
		name, text, err := templateObject(n, namespace, configMapName, o, &m)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", n.GetKind(), n.GetName(), err)
		}
		if _, taken := files[name]; taken {
			name = strings.TrimSuffix(name, ".yaml") + "-" + strings.ToLower(n.GetKind()) + ".yaml"
		}
		files[name] = text
	}
	if m.image == "" {
		return nil, fmt.Errorf("no Deployment with a container %q", o.container)
	}
	monitoring := false
	if o.monitoring != "" {
		objects, err := renderKustomization(o.monitoring)
		if err != nil {
			return nil, err
		}
		if err := addMonitoring(files, objects, namespace); err != nil {
			return nil, err
		}
		monitoring = len(objects) > 0
	}
	repository, tag, digest := splitImage(m.image)
	files["Chart.yaml"] = chartYAML(o.chartVersion, tag)
	files["values.yaml"] = valuesYAML(repository, tag, digest, m, monitoring)
	if files["values.schema.json"], err = valuesSchema(monitoring); err != nil {
		return nil, err
	}
	base, err := configMapBase(configMapName, o.configKey, m.config)
	if err != nil {
		return nil, err
	}
	files["templates/_helpers.tpl"] = helpers(base, o.configKey)
	files[".helmignore"] = helmignore
	files["templates/NOTES.txt"] = notes
	return files, nil
}

// findValue returns the path of a scalar equal to value under node, or nil.
func findValue(node *yaml.Node, value string, path []string) []string {
	switch node.Kind {
	case yaml.ScalarNode:
		if node.Value == value {
			return append(path, "")[:len(path)]
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			if p := findValue(node.Content[i+1], value, append(path, node.Content[i].Value)); p != nil {
				return p
			}
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for i, c := range node.Content {
			if p := findValue(c, value, append(path, fmt.Sprint(i))); p != nil {
				return p
			}
		}
	}
	return nil
}

// operatorObjects finds the operator's namespace (the one Namespace object) and the
// ConfigMap in it that holds the configuration file.
func operatorObjects(nodes []*yaml.RNode, configKey string) (namespace, configMap string, err error) {
	for _, n := range nodes {
		if n.GetKind() == "Namespace" {
			if namespace != "" {
				return "", "", errors.New("more than one Namespace: which one is the operator's?")
			}
			namespace = n.GetName()
		}
	}
	if namespace == "" {
		return "", "", errors.New("no Namespace object: which namespace is the operator's?")
	}
	for _, n := range nodes {
		if n.GetKind() == kindConfigMap && n.GetNamespace() == namespace && hasKey(n, configKey) {
			configMap = n.GetName()
		}
	}
	if configMap == "" {
		return "", "", fmt.Errorf("no ConfigMap in %s holds %s", namespace, configKey)
	}
	return namespace, configMap, nil
}

// templateObject turns one object into a template, and returns its file name and text.
func templateObject(n *yaml.RNode, namespace, configMapName string, o options, m *manager) (name, text string, err error) {
	objectName := n.GetName()
	if objectName == configMapName {
		objectName = objectName[:strings.LastIndex(objectName, "-")]
	}
	if err := templateCommon(n, namespace); err != nil {
		return "", "", err
	}
	switch {
	case n.GetKind() == kindConfigMap && n.GetName() == configMapName:
		if m.config, err = templateConfigMap(n, o.configKey); err != nil {
			return "", "", err
		}
	case n.GetKind() == kindDeploy && hasContainer(n, o.container):
		if err := templateDeployment(n, o.container, configMapName, m); err != nil {
			return "", "", err
		}
	case n.GetKind() == kindCRD:
		if err := n.PipeE(yaml.SetAnnotation("helm.sh/resource-policy", phKeep)); err != nil {
			return "", "", err
		}
	case n.GetKind() == "ServiceAccount" && n.GetName() == m.serviceAccount && m.serviceAccount != "":
		if err := mergeInto(n, []string{fieldMetadata}, "annotations", "serviceAccount.annotations", true); err != nil {
			return "", "", err
		}
	}
	if path := findValue(n.YNode(), namespace, nil); path != nil {
		return "", "", fmt.Errorf("%s still names the namespace %s after templating", strings.Join(path, "."), namespace)
	}
	if text, err = n.String(); err != nil {
		return "", "", err
	}
	if text, err = expand(escapeTemplates(text)); err != nil {
		return "", "", err
	}
	switch n.GetKind() {
	case kindCRD:
		text = "{{- if .Values.crds.install }}\n" + text + "{{- end }}\n"
	case kindPDB:
		text = pdbGuard + text + "{{- end }}\n"
	}
	name = filepath.Join("templates", area(n.GetKind()), strings.TrimPrefix(objectName, prefixOf(objectName))+".yaml")
	return name, text, nil
}

// renderKustomization renders the kustomization in dir, as `kubectl kustomize` does.
func renderKustomization(dir string) ([]*yaml.RNode, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	return m.ToRNodeSlice(), nil
}

// addMonitoring adds the template of each monitoring object to files, under
// templates/prometheus/, rendered only when its kind is enabled in the values.
func addMonitoring(files map[string]string, objects []*yaml.RNode, namespace string) error {
	for _, n := range objects {
		value, ok := monitoringValues[n.GetKind()]
		if !ok {
			return fmt.Errorf("%s %s: the monitoring objects may be %v only", n.GetKind(), n.GetName(), slices.Sorted(maps.Keys(monitoringValues)))
		}
		name := n.GetName()
		if err := templateCommon(n, namespace); err != nil {
			return err
		}
		if err := n.PipeE(yaml.SetLabel(phLabels, value)); err != nil {
			return err
		}
		if path := findValue(n.YNode(), namespace, nil); path != nil {
			return fmt.Errorf("%s %s: %s still names the namespace %s after templating", n.GetKind(), name, strings.Join(path, "."), namespace)
		}
		text, err := n.String()
		if err != nil {
			return err
		}
		if text, err = expand(escapeTemplates(text)); err != nil {
			return fmt.Errorf("%s %s: %w", n.GetKind(), name, err)
		}
		file := filepath.Join("templates", "prometheus", strings.TrimPrefix(name, prefixOf(name))+".yaml")
		if _, taken := files[file]; taken {
			return fmt.Errorf("%s %s: two monitoring objects would be %s", n.GetKind(), name, file)
		}
		files[file] = "{{- if .Values.metrics." + value + ".enabled }}\n" + text + "{{- end }}\n"
	}
	return nil
}

// escapeTemplates makes text that looks like a template expression literal: Helm prints
// {{`{{`}} as {{, so that a PrometheusRule's {{ $labels.name }} reaches Prometheus.
func escapeTemplates(text string) string {
	return strings.NewReplacer("{{", "{{`{{`}}", "}}", "{{`}}`}}").Replace(text)
}

// prefixOf returns the name prefix kustomize gave every object ("kaddons-").
func prefixOf(name string) string {
	if i := strings.Index(name, "-"); i > 0 && !strings.Contains(name[:i], ".") {
		return name[:i+1]
	}
	return ""
}

// area is the templates folder of a kind, after the config/ folder it comes from.
func area(kind string) string {
	switch kind {
	case kindCRD:
		return "crd"
	case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
		return "rbac"
	case "Service":
		return "metrics"
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		return "admission"
	default:
		return "manager"
	}
}

// standardLabels replaces the object's app.kubernetes.io/name and managed-by labels with
// the chart's standard labels (kaddons.labels), which hold them. Only metadata.labels
// changes: selectors and pod templates keep their labels, as selectors are immutable.
func standardLabels(n *yaml.RNode) error {
	labels := n.GetLabels()
	if name, ok := labels[labelName]; ok && name != chartName {
		return fmt.Errorf("the label %s is %q, the chart's standard labels give %q", labelName, name, chartName)
	}
	if by, ok := labels[labelManagedBy]; ok && by != "kustomize" {
		return fmt.Errorf("the label %s is %q, not kustomize", labelManagedBy, by)
	}
	meta, err := n.Pipe(yaml.Lookup(fieldMetadata, "labels"))
	if err != nil {
		return err
	}
	if meta != nil {
		for _, key := range []string{labelName, labelManagedBy} {
			if _, err := meta.Pipe(yaml.Clear(key)); err != nil {
				return err
			}
		}
		meta.YNode().Style = 0 // a placeholder must be on a line of its own
	}
	return n.PipeE(yaml.SetLabel(phStandardLabels, ""))
}

// templateCommon puts the release namespace and service in.
func templateCommon(n *yaml.RNode, namespace string) error {
	if n.GetNamespace() == namespace {
		if err := n.SetNamespace(phNamespace); err != nil {
			return err
		}
	}
	if err := standardLabels(n); err != nil {
		return err
	}
	if kind := n.GetKind(); kind == "RoleBinding" || kind == "ClusterRoleBinding" {
		subjects, err := n.Pipe(yaml.Lookup("subjects"))
		if err != nil || subjects == nil {
			return err
		}
		return subjects.VisitElements(func(s *yaml.RNode) error {
			ns, err := s.Pipe(yaml.Lookup("namespace"))
			if err != nil || ns == nil || yaml.GetValue(ns) != namespace {
				return err
			}
			return s.PipeE(yaml.SetField("namespace", yaml.NewStringRNode(phNamespace)))
		})
	}
	return nil
}

func hasKey(n *yaml.RNode, key string) bool {
	v, err := n.Pipe(yaml.Lookup("data", key))
	return err == nil && v != nil
}

// templateConfigMap replaces the configuration file and the ConfigMap's name, and
// returns the file.
func templateConfigMap(n *yaml.RNode, key string) (string, error) {
	v, err := n.Pipe(yaml.Lookup("data", key))
	if err != nil {
		return "", err
	}
	config := v.YNode().Value
	if err := n.SetName(phConfigMap); err != nil {
		return "", err
	}
	v.YNode().Value, v.YNode().Style = phConfig, 0
	return config, nil
}

// hasContainer tells whether the workload has a container called name.
func hasContainer(n *yaml.RNode, name string) bool {
	c, err := n.Pipe(yaml.Lookup("spec", "template", "spec", "containers", "[name="+name+"]"))
	return err == nil && c != nil
}

// templateDeployment replaces the manager's replicas, image, resources and ConfigMap name,
// and records their rendered values in m.
func templateDeployment(n *yaml.RNode, container, configMap string, m *manager) error {
	replicas, err := n.Pipe(yaml.Lookup("spec", "replicas"))
	if err != nil {
		return err
	}
	m.replicas = "1"
	if replicas != nil {
		m.replicas = replicas.YNode().Value
	}
	if err := n.PipeE(yaml.LookupCreate(yaml.MappingNode, "spec"), yaml.SetField("replicas", yaml.NewStringRNode(phReplicas))); err != nil {
		return err
	}
	c, err := n.Pipe(yaml.Lookup("spec", "template", "spec", "containers", "[name="+container+"]"))
	if err != nil {
		return err
	}
	image, err := c.Pipe(yaml.Lookup("image"))
	if err != nil || image == nil {
		return fmt.Errorf("container %s has no image: %w", container, err)
	}
	m.image = image.YNode().Value
	if err := c.PipeE(yaml.SetField("image", yaml.NewStringRNode(phImage))); err != nil {
		return err
	}
	resources, err := c.Pipe(yaml.Lookup("resources"))
	if err != nil {
		return err
	}
	m.resources = "{}\n"
	if resources != nil {
		if m.resources, err = resources.String(); err != nil {
			return err
		}
	}
	if err := c.PipeE(yaml.SetField("resources", yaml.NewStringRNode(phResources))); err != nil {
		return err
	}
	if err := templatePod(n, c, m); err != nil {
		return err
	}
	volumes, err := n.Pipe(yaml.Lookup("spec", "template", "spec", "volumes"))
	if err != nil {
		return err
	}
	found := false
	if volumes != nil {
		err = volumes.VisitElements(func(v *yaml.RNode) error {
			name, err := v.Pipe(yaml.Lookup("configMap", "name"))
			if err != nil || name == nil || yaml.GetValue(name) != configMap {
				return err
			}
			found = true
			return v.PipeE(yaml.Lookup("configMap"), yaml.SetField("name", yaml.NewStringRNode(phConfigMap)))
		})
		if err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("the Deployment mounts no volume of the ConfigMap %s", configMap)
	}
	return nil
}

// templatePod puts the values of the pod's scheduling fields, annotations and labels, and
// the container's extra environment in, and records the Deployment's scheduling fields as
// their defaults in m.
func templatePod(n, c *yaml.RNode, m *manager) error {
	spec, err := n.Pipe(yaml.Lookup("spec", "template", "spec"))
	if err != nil || spec == nil {
		return fmt.Errorf("no pod spec: %w", err)
	}
	m.podFields = map[string]string{}
	for _, f := range podFields {
		v, err := spec.Pipe(yaml.Lookup(f.field))
		if err != nil {
			return err
		}
		m.podFields[f.field] = f.empty + "\n"
		if v != nil {
			blockStyle(v.YNode())
			if m.podFields[f.field], err = v.String(); err != nil {
				return err
			}
		}
		if err := spec.PipeE(yaml.SetField(f.field, yaml.NewStringRNode(phWith+" manager."+f.field))); err != nil {
			return err
		}
	}
	if err := mergeInto(n, []string{"spec", "template", fieldMetadata}, "annotations", "manager.podAnnotations", true); err != nil {
		return err
	}
	if err := mergeInto(n, []string{"spec", "template", fieldMetadata}, "labels", "manager.podLabels", false); err != nil {
		return err
	}
	env, err := c.Pipe(yaml.LookupCreate(yaml.SequenceNode, "env"))
	if err != nil {
		return err
	}
	env.YNode().Style = 0 // a placeholder must be on a line of its own
	return env.PipeE(yaml.Append(yaml.NewStringRNode(phAppend + " manager.extraEnv").YNode()))
}

// blockStyle writes the mappings and sequences under node in block style, as the values
// file does.
func blockStyle(node *yaml.Node) {
	if node.Kind == yaml.MappingNode || node.Kind == yaml.SequenceNode {
		node.Style = 0
	}
	for _, c := range node.Content {
		blockStyle(c)
	}
}

// mergeInto adds the entries of the map at the values path value to the mapping field of
// the mapping at path, less the keys the mapping has already (they stay as they are). When
// the mapping does not exist and optional is true, the field is rendered only when the map
// is not empty.
func mergeInto(n *yaml.RNode, path []string, field, value string, optional bool) error {
	parent, err := n.Pipe(yaml.LookupCreate(yaml.MappingNode, path...))
	if err != nil {
		return err
	}
	mapping, err := parent.Pipe(yaml.Lookup(field))
	if err != nil {
		return err
	}
	if mapping == nil || len(mapping.Content()) == 0 {
		if !optional {
			return fmt.Errorf("%s.%s is empty", strings.Join(path, "."), field)
		}
		return parent.PipeE(yaml.SetField(field, yaml.NewStringRNode(phWith+" "+value)))
	}
	mapping.YNode().Style = 0 // a placeholder must be on a line of its own
	keys, err := mapping.Fields()
	if err != nil {
		return err
	}
	return mapping.PipeE(yaml.SetField(phMerge, yaml.NewStringRNode(strings.Join(append([]string{value}, keys...), " "))))
}

// expandLine returns the template text of a line that holds a phWith, phMerge or phAppend
// placeholder, and false for other lines.
func expandLine(line string) (string, bool) {
	indent := len(line) - len(strings.TrimLeft(line, " "))
	pad := strings.Repeat(" ", indent)
	trimmed := strings.TrimSpace(line)
	unquote := func(s string) []string { return strings.Fields(strings.Trim(s, `'"`)) }
	switch {
	case strings.HasPrefix(trimmed, phMerge+": "):
		args := unquote(strings.TrimPrefix(trimmed, phMerge+": "))
		with := values(args[0])
		if len(args) > 1 {
			with = "omit (" + with + ` | default dict) "` + strings.Join(args[1:], `" "`) + `"`
		}
		return fmt.Sprintf("{{- with %s }}\n{{- toYaml . | nindent %d }}\n{{- end }}\n", with, indent), true
	case strings.HasPrefix(trimmed, "- "):
		args := unquote(strings.TrimPrefix(trimmed, "- "))
		if len(args) != 2 || args[0] != phAppend {
			return "", false
		}
		return fmt.Sprintf("{{- with %s }}\n{{- toYaml . | nindent %d }}\n{{- end }}\n", values(args[1]), indent), true
	}
	key, value, ok := strings.Cut(trimmed, ": ")
	args := unquote(value)
	if !ok || len(args) != 2 || args[0] != phWith {
		return "", false
	}
	return fmt.Sprintf("{{- with %s }}\n%s%s:\n{{- toYaml . | nindent %d }}\n{{- end }}\n", values(args[1]), pad, key, indent+2), true
}

// values is the template expression of the value at the dotted path, nil-safe at every
// step: (.Values.manager).podLabels is empty, not an error, when the release's values
// have no manager or no podLabels, as after `helm upgrade --reuse-values` from a release
// made before the value existed.
func values(path string) string {
	parts := strings.Split(path, ".")
	expr := ".Values." + parts[0]
	for _, part := range parts[1:] {
		expr = "(" + expr + ")." + part
	}
	return expr
}

// expand replaces the placeholders with template expressions. Block values (resources,
// the configuration file) are indented to the key's column plus two.
func expand(text string) (string, error) {
	for _, ph := range []string{phNamespace, phReplicas, phImage, phResources, phConfig, phConfigMap, phKeep} {
		text = strings.NewReplacer("'"+ph+"'", ph, `"`+ph+`"`, ph).Replace(text)
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		trimmed := strings.TrimSpace(line)
		if text, ok := expandLine(line); ok {
			out.WriteString(text)
			continue
		}
		switch {
		case strings.HasSuffix(trimmed, ": "+phResources):
			key := strings.TrimSuffix(trimmed, " "+phResources)
			fmt.Fprintf(&out, "%s%s\n{{- toYaml .Values.manager.resources | nindent %d }}\n", strings.Repeat(" ", indent), key, indent+2)
			continue
		case strings.HasSuffix(trimmed, ": "+phKeep):
			key := strings.TrimSuffix(trimmed, " "+phKeep)
			fmt.Fprintf(&out, "{{- if .Values.crds.keep }}\n%s%s keep\n{{- end }}\n", strings.Repeat(" ", indent), key)
			continue
		case strings.HasPrefix(trimmed, phStandardLabels+":"):
			fmt.Fprintf(&out, "{{- include \"kaddons.labels\" . | nindent %d }}\n", indent)
			continue
		case strings.HasPrefix(trimmed, phLabels+": "):
			value := strings.Trim(strings.TrimPrefix(trimmed, phLabels+": "), `'"`)
			fmt.Fprintf(&out, "{{- with .Values.metrics.%s.labels }}\n{{- toYaml . | nindent %d }}\n{{- end }}\n", value, indent)
			continue
		case strings.HasSuffix(trimmed, ": "+phConfig):
			key := strings.TrimSuffix(trimmed, " "+phConfig)
			fmt.Fprintf(&out, "%s%s |\n{{- include \"kaddons.config\" . | nindent %d }}\n", strings.Repeat(" ", indent), key, indent+2)
			continue
		}
		out.WriteString(line)
	}
	s := strings.NewReplacer(
		phNamespace, "{{ .Release.Namespace }}",
		phReplicas, "{{ .Values.manager.replicas }}",
		phImage, `{{ include "kaddons.image" . }}`,
		phConfigMap, `{{ include "kaddons.configMapName" . }}`,
	).Replace(out.String())
	if strings.Contains(s, "KADDONS_HELM_") {
		return "", errors.New("a placeholder is left in a position helmgen cannot template")
	}
	return s, nil
}

// configMapBase returns the ConfigMap's name without the hash suffix, after checking
// that the suffix is the hash the chart's kaddons.configMapName computes: if kustomize
// ever hashes differently, the chart would silently name another ConfigMap.
func configMapBase(name, key, config string) (string, error) {
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return "", fmt.Errorf("the ConfigMap %s has no hash suffix (configMapGenerator adds one)", name)
	}
	doc, err := json.Marshal(map[string]any{"kind": "ConfigMap", "name": "", "data": map[string]string{key: config}})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(doc)
	want := strings.NewReplacer("0", "g", "1", "h", "3", "k", "a", "m", "e", "t").Replace(hex.EncodeToString(sum[:])[:10])
	if name[i+1:] != want {
		return "", fmt.Errorf("the ConfigMap %s: kustomize's hash suffix is %s, the chart would compute %s; update kaddons.configMapName",
			name, name[i+1:], want)
	}
	return name[:i], nil
}

// splitImage splits an image reference into repository, tag (latest if none) and
// digest (sha256:..., empty if none): a release pins repository:version@digest.
func splitImage(image string) (repository, tag, digest string) {
	image, digest, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:], digest
	}
	return image, "latest", digest
}

// write replaces the chart folder's generated files: Chart.yaml, values.yaml,
// values.schema.json, .helmignore and templates/.
func write(dir string, files map[string]string) error {
	if err := os.RemoveAll(filepath.Join(dir, "templates")); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(files[name]), 0o644); err != nil {
			return err
		}
	}
	return nil
}
