package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Settings are what the placement extension puts on the pod template of every workload.
type Settings struct {
	// NodeSelector is merged into each pod template's nodeSelector; on a key both have,
	// the settings win.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are appended to each pod template's tolerations, each unless one equal
	// to it is there.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ParseSettings reads settings from YAML or JSON, refusing unknown fields and what the
// API server would refuse in a pod template.
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return Settings{}, err
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, k := range slices.Sorted(maps.Keys(s.NodeSelector)) {
		for _, msg := range validation.IsQualifiedName(k) {
			add("nodeSelector key %q: %s", k, msg)
		}
		for _, msg := range validation.IsValidLabelValue(s.NodeSelector[k]) {
			add("nodeSelector[%q] value %q: %s", k, s.NodeSelector[k], msg)
		}
	}
	for i, t := range s.Tolerations {
		for _, msg := range validateToleration(t) {
			add("tolerations[%d]: %s", i, msg)
		}
	}
	if len(problems) > 0 {
		return Settings{}, errors.New(strings.Join(problems, "; "))
	}
	return s, nil
}

// validateToleration checks a toleration as the API server does.
func validateToleration(t corev1.Toleration) []string {
	var problems []string
	if t.Key != "" {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			problems = append(problems, fmt.Sprintf("key %q: %s", t.Key, msg))
		}
	}
	switch t.Operator {
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			problems = append(problems, "operator Equal needs a key (an empty key tolerates everything only with Exists)")
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			problems = append(problems, fmt.Sprintf("value %q: %s", t.Value, msg))
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			problems = append(problems, "operator Exists takes no value")
		}
	default:
		problems = append(problems, fmt.Sprintf("operator %q is neither Equal nor Exists", t.Operator))
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		problems = append(problems, fmt.Sprintf("effect %q is none of NoSchedule, PreferNoSchedule and NoExecute", t.Effect))
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		problems = append(problems, "tolerationSeconds needs effect NoExecute")
	}
	return problems
}

// spec is the field of an object, a workload's pod template and a CronJob's job
// template that holds its spec.
const spec = "spec"

// podTemplateSpec is the path of the pod template's spec in a Deployment, DaemonSet,
// StatefulSet or Job.
var podTemplateSpec = []string{spec, "template", spec}

// podSpecPaths are the paths of the pod template's spec in the workload kinds.
var podSpecPaths = map[schema.GroupKind][]string{
	appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind():  podTemplateSpec,
	appsv1.SchemeGroupVersion.WithKind("DaemonSet").GroupKind():   podTemplateSpec,
	appsv1.SchemeGroupVersion.WithKind("StatefulSet").GroupKind(): podTemplateSpec,
	batchv1.SchemeGroupVersion.WithKind("Job").GroupKind():        podTemplateSpec,
	batchv1.SchemeGroupVersion.WithKind("CronJob").GroupKind():    append([]string{spec, "jobTemplate"}, podTemplateSpec...),
}

// Place puts the settings on the pod template of every workload among objects. It
// returns every object in the same order: the ones it did not change as they came,
// byte for byte, and the names (Kind namespace/name) of the ones it changed.
func (s Settings) Place(objects []runtime.RawExtension) ([]runtime.RawExtension, []string, error) {
	out := make([]runtime.RawExtension, 0, len(objects))
	var changed []string
	for i, raw := range objects {
		placed, name, err := s.placeOne(raw.Raw)
		if err != nil {
			return nil, nil, fmt.Errorf("objects[%d]: %w", i, err)
		}
		if placed == nil {
			out = append(out, raw)
			continue
		}
		out = append(out, runtime.RawExtension{Raw: placed})
		changed = append(changed, name)
	}
	return out, changed, nil
}

// placeOne returns the object of data with the settings on its pod template, and its
// name; nil when it is not a workload or already has them.
func (s Settings) placeOne(data []byte) ([]byte, string, error) {
	var typeMeta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &typeMeta); err != nil {
		return nil, "", fmt.Errorf("not a JSON object: %w", err)
	}
	gv, err := schema.ParseGroupVersion(typeMeta.APIVersion)
	if err != nil {
		return nil, "", err
	}
	path, ok := podSpecPaths[gv.WithKind(typeMeta.Kind).GroupKind()]
	if !ok {
		return nil, "", nil
	}
	// Numbers stay json.Number, so that every field but the two changed comes back as it
	// came, large integers included.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, "", err
	}
	podSpec, err := nestedMap(obj, path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", typeMeta.Kind, err)
	}
	selectorChanged, err := s.mergeNodeSelector(podSpec)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", typeMeta.Kind, err)
	}
	tolerationsChanged, err := s.appendTolerations(podSpec)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", typeMeta.Kind, err)
	}
	if !selectorChanged && !tolerationsChanged {
		return nil, "", nil
	}
	placed, err := json.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	return placed, typeMeta.Kind + " " + objectName(obj), nil
}

// mergeNodeSelector merges the settings' nodeSelector into podSpec's.
func (s Settings) mergeNodeSelector(podSpec map[string]any) (bool, error) {
	if len(s.NodeSelector) == 0 {
		return false, nil
	}
	selector, ok := podSpec["nodeSelector"].(map[string]any)
	if !ok {
		if podSpec["nodeSelector"] != nil {
			return false, fmt.Errorf("nodeSelector is a %T, not an object", podSpec["nodeSelector"])
		}
		selector = map[string]any{}
		podSpec["nodeSelector"] = selector
	}
	changed := false
	for k, v := range s.NodeSelector {
		if selector[k] != v {
			selector[k] = v
			changed = true
		}
	}
	return changed, nil
}

// appendTolerations appends to podSpec's tolerations each of the settings' that is not
// there, compared by value.
func (s Settings) appendTolerations(podSpec map[string]any) (bool, error) {
	if len(s.Tolerations) == 0 {
		return false, nil
	}
	list, ok := podSpec["tolerations"].([]any)
	if !ok && podSpec["tolerations"] != nil {
		return false, fmt.Errorf("tolerations is a %T, not a list", podSpec["tolerations"])
	}
	existing := make([]corev1.Toleration, 0, len(list))
	for i, item := range list {
		data, err := json.Marshal(item)
		if err != nil {
			return false, err
		}
		var t corev1.Toleration
		if err := json.Unmarshal(data, &t); err != nil {
			return false, fmt.Errorf("tolerations[%d]: %w", i, err)
		}
		existing = append(existing, t)
	}
	changed := false
	for _, want := range s.Tolerations {
		if slices.ContainsFunc(existing, func(t corev1.Toleration) bool { return sameToleration(t, want) }) {
			continue
		}
		item, err := toJSONValue(want)
		if err != nil {
			return false, err
		}
		list = append(list, item)
		existing = append(existing, want)
		changed = true
	}
	podSpec["tolerations"] = list
	return changed, nil
}

// sameToleration compares two tolerations by value; an empty operator is Equal.
func sameToleration(a, b corev1.Toleration) bool {
	op := func(t corev1.Toleration) corev1.TolerationOperator {
		if t.Operator == "" {
			return corev1.TolerationOpEqual
		}
		return t.Operator
	}
	seconds := func(t corev1.Toleration) string {
		if t.TolerationSeconds == nil {
			return ""
		}
		return fmt.Sprint(*t.TolerationSeconds)
	}
	return a.Key == b.Key && op(a) == op(b) && a.Value == b.Value && a.Effect == b.Effect && seconds(a) == seconds(b)
}

// toJSONValue is v as the JSON decoder of an object would make it.
func toJSONValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out any
	err = dec.Decode(&out)
	return out, err
}

// nestedMap returns the object at path in obj, creating the objects missing on the way.
func nestedMap(obj map[string]any, path []string) (map[string]any, error) {
	m := obj
	for i, field := range path {
		next, ok := m[field].(map[string]any)
		if !ok {
			if m[field] != nil {
				return nil, fmt.Errorf("%s is a %T, not an object", strings.Join(path[:i+1], "."), m[field])
			}
			next = map[string]any{}
			m[field] = next
		}
		m = next
	}
	return m, nil
}

// objectName is namespace/name of obj, or its name.
func objectName(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}
