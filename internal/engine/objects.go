package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Helpers for the typed-field transforms of add-on controllers.

// FindObject returns the rendered object of kind and name, or nil.
func FindObject(objects *Objects, kind, name string) *Object {
	for _, o := range objects.Items {
		if o.Kind == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// MustFindObject returns the rendered object of kind and name, or an error naming it: a
// typed field whose target is missing from the package is a packaging bug to report.
func MustFindObject(objects *Objects, kind, name string) (*Object, error) {
	if o := FindObject(objects, kind, name); o != nil {
		return o, nil
	}
	return nil, fmt.Errorf("the package has no %s %q to apply the add-on's fields to", kind, name)
}

// ToUnstructuredValue converts a typed API value (a struct, slice or map) into the
// generic form that unstructured objects hold, dropping empty fields.
func ToUnstructuredValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// MutateContainer calls fn with the container of the given name in o's pod template.
func MutateContainer(o *Object, container string, fn func(c map[string]any) error) error {
	found := false
	err := o.MutateContainers(func(c map[string]any) error {
		if c["name"] != container {
			return nil
		}
		found = true
		return fn(c)
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%s %s has no container %q", o.Kind, o.GetName(), container)
	}
	return nil
}

// PodFields are the workload settings most add-ons expose as typed fields. Nil or empty
// fields leave the package's values alone.
type PodFields struct {
	// Replicas replaces spec.replicas.
	Replicas *int32
	// Resources replaces the container's resources.
	Resources *corev1.ResourceRequirements
	// NodeSelector replaces the pod template's node selector.
	NodeSelector map[string]string
	// Tolerations are added to the pod template's tolerations.
	Tolerations []corev1.Toleration
}

// ApplyPodFields applies f to the workload o, whose main container is container.
func ApplyPodFields(o *Object, container string, f PodFields) error {
	if f.Replicas != nil {
		if err := o.SetNestedField(int64(*f.Replicas), "spec", "replicas"); err != nil {
			return err
		}
	}
	if f.Resources != nil {
		resources, err := ToUnstructuredValue(f.Resources)
		if err != nil {
			return err
		}
		if err := MutateContainer(o, container, func(c map[string]any) error {
			c["resources"] = resources
			return nil
		}); err != nil {
			return err
		}
	}
	if len(f.NodeSelector) == 0 && len(f.Tolerations) == 0 {
		return nil
	}
	return o.MutatePodSpec(func(spec map[string]any) error {
		if len(f.NodeSelector) > 0 {
			selector := map[string]any{}
			for k, v := range f.NodeSelector {
				selector[k] = v
			}
			spec["nodeSelector"] = selector
		}
		if len(f.Tolerations) > 0 {
			extra, err := ToUnstructuredValue(f.Tolerations)
			if err != nil {
				return err
			}
			existing, _ := spec["tolerations"].([]any)
			spec["tolerations"] = append(existing, extra.([]any)...)
		}
		return nil
	})
}

// SetFlag sets the command-line flag name (such as "--metric-resolution") in the args of
// o's container: every "name" or "name=..." entry is replaced by one "name=value" entry,
// or a bare "name" when value is empty, at the place of the first; a flag the args do not
// have yet is appended.
func SetFlag(o *Object, container, name, value string) error {
	entry := name
	if value != "" {
		entry = name + "=" + value
	}
	return MutateContainer(o, container, func(c map[string]any) error {
		args, _ := c["args"].([]any)
		out := make([]any, 0, len(args)+1)
		placed := false
		for _, a := range args {
			s, _ := a.(string)
			if s != name && !strings.HasPrefix(s, name+"=") {
				out = append(out, a)
				continue
			}
			if !placed {
				out = append(out, entry)
				placed = true
			}
		}
		if !placed {
			out = append(out, entry)
		}
		c["args"] = out
		return nil
	})
}

// SetEnv sets the environment variable name of o's container to value: the entry of
// that name is replaced (a valueFrom included), or one is appended.
func SetEnv(o *Object, container, name, value string) error {
	return MutateContainer(o, container, func(c map[string]any) error {
		env, _ := c["env"].([]any)
		entry := map[string]any{"name": name, "value": value}
		for i, e := range env {
			if m, ok := e.(map[string]any); ok && m["name"] == name {
				env[i] = entry
				return nil
			}
		}
		c["env"] = append(env, entry)
		return nil
	})
}

// SetHostPath points the hostPath volume named volume in o's pod template at path on the
// node: per-node agents such as a CNI name the host folders they write (the runtime's CNI
// configuration and plugins) this way.
func SetHostPath(o *Object, volume, path string) error {
	found := false
	err := o.MutatePodSpec(func(spec map[string]any) error {
		volumes, _ := spec["volumes"].([]any)
		for _, v := range volumes {
			m, ok := v.(map[string]any)
			if !ok || m["name"] != volume {
				continue
			}
			hostPath, ok := m["hostPath"].(map[string]any)
			if !ok {
				return fmt.Errorf("%s %s: volume %q is not a hostPath volume", o.Kind, o.GetName(), volume)
			}
			hostPath["path"] = path
			found = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%s %s has no volume %q", o.Kind, o.GetName(), volume)
	}
	return nil
}

// RemoveObject drops the rendered object of kind and name, and reports whether it was there.
func RemoveObject(objects *Objects, kind, name string) bool {
	n := len(objects.Items)
	objects.Items = slices.DeleteFunc(objects.Items, func(o *Object) bool {
		return o.Kind == kind && o.GetName() == name
	})
	return len(objects.Items) != n
}

// ReplaceInContainer rewrites, with replace, the values of the packaged defaults that
// o's container carries in its args, command, env values and the hosts of its probes:
// per-node agents (such as node-local-dns) spell their listen and upstream addresses
// there.
func ReplaceInContainer(o *Object, container string, replace *strings.Replacer) error {
	return MutateContainer(o, container, func(c map[string]any) error {
		for _, field := range []string{"args", "command"} {
			values, _ := c[field].([]any)
			for i, v := range values {
				if s, ok := v.(string); ok {
					values[i] = replace.Replace(s)
				}
			}
		}
		env, _ := c["env"].([]any)
		for _, e := range env {
			if m, ok := e.(map[string]any); ok {
				if v, ok := m["value"].(string); ok {
					m["value"] = replace.Replace(v)
				}
			}
		}
		for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
			p, _ := c[probe].(map[string]any)
			if get, ok := p["httpGet"].(map[string]any); ok {
				if host, ok := get["host"].(string); ok {
					get["host"] = replace.Replace(host)
				}
			}
		}
		return nil
	})
}

// ReplaceInData rewrites, with replace, the data entry key of the ConfigMap o, such as a
// Corefile that spells packaged default addresses.
func ReplaceInData(o *Object, key string, replace *strings.Replacer) error {
	data, _, err := o.NestedStringMap("data")
	if err != nil {
		return err
	}
	value, ok := data[key]
	if !ok {
		return fmt.Errorf("%s %s has no data entry %q", o.Kind, o.GetName(), key)
	}
	return o.SetNestedField(replace.Replace(value), "data", key)
}

// RemoveData drops the data entry key of the ConfigMap o, such as a configuration file
// that a typed field left unset makes unneeded. A missing entry is left missing.
func RemoveData(o *Object, key string) error {
	data, _, err := o.NestedStringMap("data")
	if err != nil {
		return err
	}
	if _, ok := data[key]; !ok {
		return nil
	}
	delete(data, key)
	return o.SetNestedStringMap(data, "data")
}

// SetClusterIP gives the rendered Service name the fixed cluster IP ip (spec.clusterIP
// and spec.clusterIPs), as the address kubelets hand to pods must not change. An empty ip
// leaves the Service alone.
func SetClusterIP(objects *Objects, name, ip string) error {
	if ip == "" {
		return nil
	}
	svc, err := MustFindObject(objects, "Service", name)
	if err != nil {
		return err
	}
	if err := svc.SetNestedField(ip, "spec", "clusterIP"); err != nil {
		return err
	}
	return svc.SetNestedSlice([]any{ip}, "spec", "clusterIPs")
}
