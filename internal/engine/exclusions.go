package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch

// ReleasedFieldManager is the field manager that holds the fields kaddons released
// (drift exclusions): kaddons sets them on creation, then hands them to this manager, so
// that no longer applying them does not reset them, and any other manager can take them.
const ReleasedFieldManager = "kaddons-released"

// exclusions maps each rendered object to the JSON pointers of its fields that kaddons
// sets only on creation.
type exclusions map[addonsv1alpha1.ObjectReference][][]string

// driftExclusions gathers the exclusions of one add-on: spec.driftExclusions, the
// definition's own, and spec.replicas of every rendered Deployment or StatefulSet that a
// HorizontalPodAutoscaler targets (read from the cache). A malformed pointer, or a
// spec.driftExclusions target that matches no rendered object, is a spec error.
func (r *Reconciler) driftExclusions(ctx context.Context, st *reconcileState) (exclusions, error) {
	out := exclusions{}
	add := func(source string, list []addonsv1alpha1.DriftExclusion, strict bool) error {
		for i, ex := range list {
			matched := false
			for _, o := range st.rendered.objects.Items {
				ref := refOf(o.UnstructuredObject())
				if !ex.Target.Matches(ref) {
					continue
				}
				matched = true
				for _, p := range ex.Paths {
					path, err := parsePointer(p)
					if err != nil {
						return fmt.Errorf("%s[%d].paths: %w", source, i, err)
					}
					out[ref] = append(out[ref], path)
				}
			}
			if strict && !matched {
				return fmt.Errorf("%s[%d] targets %s %s, which the package does not contain", source, i, ex.Target.Kind, ex.Target.Name)
			}
		}
		return nil
	}
	if err := add("spec.driftExclusions", st.addon.GetAddonSpec().DriftExclusions, true); err != nil {
		return nil, err
	}
	if err := add("the definition's driftExclusions", r.def.DriftExclusions, false); err != nil {
		return nil, err
	}
	scaled, err := r.scaledWorkloads(ctx, st)
	if err != nil {
		return nil, err
	}
	for ref := range scaled {
		out[ref] = append(out[ref], []string{"spec", "replicas"})
	}
	return out, nil
}

// scaledWorkloads returns the rendered workloads a HorizontalPodAutoscaler targets.
func (r *Reconciler) scaledWorkloads(ctx context.Context, st *reconcileState) (map[addonsv1alpha1.ObjectReference]bool, error) {
	scaled := map[addonsv1alpha1.ObjectReference]bool{}
	namespaces := map[string]bool{}
	for _, o := range st.rendered.objects.Items {
		if o.Group == "apps" && (o.Kind == "Deployment" || o.Kind == "StatefulSet") {
			namespaces[o.GetNamespace()] = true
		}
	}
	for ns := range namespaces {
		hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
		if err := r.client.List(ctx, hpas, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing HorizontalPodAutoscalers in %s: %w", ns, err)
		}
		for _, h := range hpas.Items {
			target := h.Spec.ScaleTargetRef
			for _, o := range st.rendered.objects.Items {
				if o.Kind == target.Kind && o.GetName() == target.Name && o.GetNamespace() == h.Namespace &&
					strings.HasPrefix(target.APIVersion, "apps/") {
					scaled[refOf(o.UnstructuredObject())] = true
				}
			}
		}
	}
	return scaled, nil
}

// parsePointer parses an RFC 6901 JSON pointer. Fields of metadata other than labels and
// annotations cannot be excluded: kaddons' identity and ownership live there.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return nil, fmt.Errorf("%q is not a JSON pointer to a field", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
	}
	if parts[0] == "apiVersion" || parts[0] == "kind" ||
		(parts[0] == "metadata" && (len(parts) < 3 || (parts[1] != "labels" && parts[1] != "annotations"))) {
		return nil, fmt.Errorf("%q cannot be excluded: only fields of labels and annotations may be under /metadata", p)
	}
	return parts, nil
}

// lookup returns the value at path in obj.
func lookup(obj any, path []string) (any, bool) {
	cur := obj
	for _, part := range path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[part]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// without returns a copy of u without the fields at paths (fields inside lists are
// left, as removing one would shift the others).
func without(u *unstructured.Unstructured, paths [][]string) *unstructured.Unstructured {
	c := u.DeepCopy()
	for _, path := range paths {
		parent, ok := lookup(c.Object, path[:len(path)-1])
		if m, isMap := parent.(map[string]any); ok && isMap {
			delete(m, path[len(path)-1])
		}
	}
	return c
}

// only returns an apply configuration of u's identity and the values live holds at paths:
// what the released field manager takes over.
func only(live *unstructured.Unstructured, paths [][]string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(live.GetAPIVersion())
	out.SetKind(live.GetKind())
	out.SetNamespace(live.GetNamespace())
	out.SetName(live.GetName())
	for _, path := range paths {
		v, ok := lookup(live.Object, path)
		if !ok {
			continue
		}
		// SetNestedField copies v; it fails only where a list sits on the path, which
		// leaves that field out.
		_ = unstructured.SetNestedField(out.Object, v, path...)
	}
	return out
}
