package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// managerManifest is the kaddons Deployment, relative to the repository.
var managerManifest = filepath.Join("config", "manager", "manager.yaml")

// managerContainer is the name of the kaddons container in managerManifest.
const managerContainer = "manager"

// goMemLimitEnv is the variable through which the Go runtime reads its soft memory limit.
const goMemLimitEnv = "GOMEMLIMIT"

// noMemoryLimit is the -memory-limit value that runs the manager without GOMEMLIMIT.
const noMemoryLimit = "none"

// memoryLimit is the memory limit the kaddons manager runs under, and where it came from.
type memoryLimit struct {
	// bytes is the limit; 0 runs the manager without GOMEMLIMIT.
	bytes int64
	// quantity is the limit as written (256Mi), origin where (the Deployment or -memory-limit).
	quantity, origin string
}

// env returns the manager's GOMEMLIMIT as the downward API gives it: limits.memory in
// bytes (divisor 1), without a unit suffix. Nil when there is no limit.
func (m memoryLimit) env() []string {
	if m.bytes == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s=%d", goMemLimitEnv, m.bytes)}
}

// String describes the limit for the report.
func (m memoryLimit) String() string {
	if m.bytes == 0 {
		return fmt.Sprintf("no memory limit and no %s (%s)", goMemLimitEnv, m.origin)
	}
	return fmt.Sprintf("%s=%d (%s, %s)", goMemLimitEnv, m.bytes, m.quantity, m.origin)
}

// resolveMemoryLimit returns the limit of -memory-limit: a quantity (256Mi), "none", or
// empty for the limit of the Deployment in repo.
func resolveMemoryLimit(flagValue, repo string) (memoryLimit, error) {
	switch flagValue {
	case noMemoryLimit, "0":
		return memoryLimit{origin: "-memory-limit " + flagValue}, nil
	case "":
		return deploymentMemoryLimit(filepath.Join(repo, managerManifest))
	}
	q, err := resource.ParseQuantity(flagValue)
	if err != nil || q.Sign() <= 0 {
		return memoryLimit{}, fmt.Errorf("-memory-limit: %q is not a positive quantity such as 256Mi (or none)", flagValue)
	}
	return memoryLimit{bytes: q.Value(), quantity: q.String(), origin: "-memory-limit"}, nil
}

// deploymentMemoryLimit reads the GOMEMLIMIT that the Deployment in path gives the
// manager container: its limits.memory through the downward API.
func deploymentMemoryLimit(path string) (memoryLimit, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return memoryLimit{}, fmt.Errorf("reading the manager's Deployment: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return memoryLimit{}, fmt.Errorf("%s: %w", path, err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == managerContainer {
				return containerMemoryLimit(path, c)
			}
		}
	}
	return memoryLimit{}, fmt.Errorf("%s has no Deployment with a %q container", path, managerContainer)
}

// containerMemoryLimit returns the GOMEMLIMIT the downward API gives c: its limits.memory,
// or none when c does not set GOMEMLIMIT.
func containerMemoryLimit(path string, c corev1.Container) (memoryLimit, error) {
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return memoryLimit{}, fmt.Errorf("%s: the %s container has no limits.memory", path, c.Name)
	}
	for _, e := range c.Env {
		if e.Name != goMemLimitEnv {
			continue
		}
		ref := e.ValueFrom
		if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" {
			return memoryLimit{}, fmt.Errorf("%s: %s of the %s container is not limits.memory from the downward API", path, goMemLimitEnv, c.Name)
		}
		// The downward API divides by the divisor (1 when unset) and rounds up.
		value := q.Value()
		if d := ref.ResourceFieldRef.Divisor; !d.IsZero() && d.Value() > 1 {
			value = (value + d.Value() - 1) / d.Value()
		}
		return memoryLimit{bytes: value, quantity: q.String(), origin: "limits.memory of the Deployment in " + managerManifest}, nil
	}
	return memoryLimit{origin: "the Deployment in " + managerManifest + " sets none"}, nil
}
