package engine

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// deploymentWithArgs returns a Deployment whose container "main" has args.
func deploymentWithArgs(t *testing.T, args ...any) *Object {
	t.Helper()
	o, err := newObject(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "app"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "args": args}},
		}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestSetFlag(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []any
		flag, value string
		want        []any
	}{
		{name: "replaces a value", args: []any{"--a=1", "--b=2"}, flag: "--a", value: "3", want: []any{"--a=3", "--b=2"}},
		{name: "appends a missing flag", args: []any{"--a=1"}, flag: "--b", value: "2", want: []any{"--a=1", "--b=2"}},
		{name: "bare flag", args: []any{"--a=1"}, flag: "--insecure", want: []any{"--a=1", "--insecure"}},
		{name: "bare flag already there", args: []any{"--insecure", "--a=1"}, flag: "--insecure", want: []any{"--insecure", "--a=1"}},
		{name: "duplicates collapse at the first", args: []any{"--a=1", "--b", "--a=2"}, flag: "--a", value: "9", want: []any{"--a=9", "--b"}},
		{name: "a prefix is another flag", args: []any{"--ab=1"}, flag: "--a", value: "2", want: []any{"--ab=1", "--a=2"}},
		{name: "no args yet", flag: "--a", value: "1", want: []any{"--a=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := deploymentWithArgs(t, tc.args...)
			if err := SetFlag(o, "main", tc.flag, tc.value); err != nil {
				t.Fatal(err)
			}
			containers, _, _ := unstructured.NestedSlice(o.UnstructuredObject().Object, "spec", "template", "spec", "containers")
			got, _ := containers[0].(map[string]any)["args"].([]any)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("args = %v, want %v", got, tc.want)
			}
		})
	}
	if err := SetFlag(deploymentWithArgs(t), "other", "--a", "1"); err == nil {
		t.Error("SetFlag on a missing container succeeded")
	}
}

func TestRemoveObject(t *testing.T) {
	objects := &Objects{Items: []*Object{deploymentWithArgs(t)}}
	if RemoveObject(objects, "Service", "app") {
		t.Error("removed a Service that is not there")
	}
	if !RemoveObject(objects, "Deployment", "app") || len(objects.Items) != 0 {
		t.Errorf("the Deployment was not removed: %d objects left", len(objects.Items))
	}
}

func TestRemoveData(t *testing.T) {
	o, err := newObject(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "config"},
		"data": map[string]any{"a.conf": "a", "b.conf": "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a.conf", "a.conf", "missing"} {
		if err := RemoveData(o, key); err != nil {
			t.Fatalf("RemoveData(%q): %v", key, err)
		}
	}
	data, _, _ := o.NestedStringMap("data")
	if want := map[string]string{"b.conf": "b"}; !reflect.DeepEqual(data, want) {
		t.Errorf("data = %v, want %v", data, want)
	}
	json, err := o.JSON()
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if got := string(json); strings.Contains(got, "a.conf") {
		t.Errorf("the JSON still holds the removed entry: %s", got)
	}
}

func TestSetEnv(t *testing.T) {
	o := deploymentWithArgs(t)
	if err := MutateContainer(o, "main", func(c map[string]any) error {
		c["env"] = []any{map[string]any{"name": "A", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"B", "2"}, {"A", "1"}, {"B", "3"}} {
		if err := SetEnv(o, "main", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	containers, _, _ := unstructured.NestedSlice(o.UnstructuredObject().Object, "spec", "template", "spec", "containers")
	got := containers[0].(map[string]any)["env"]
	want := []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "B", "value": "3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env = %v, want %v", got, want)
	}
	if err := SetEnv(o, "other", "A", "1"); err == nil {
		t.Error("SetEnv on a missing container succeeded")
	}
}
