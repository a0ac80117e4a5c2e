package ssa

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// ReleasedFieldManager is the field manager that holds the fields kaddons released
// (drift Exclusions): kaddons sets them on creation, then hands them to this manager, so
// that no longer applying them does not reset them, and any other manager can take them.
const ReleasedFieldManager = "kaddons-released"

// Exclusions maps each rendered object to the JSON pointers of its fields that kaddons
// sets only on creation.
type Exclusions map[addonsv1alpha1.ObjectReference][][]string

// ParsePointer parses an RFC 6901 JSON pointer. Fields of metadata other than labels and
// annotations cannot be excluded: kaddons' identity and ownership live there.
func ParsePointer(p string) ([]string, error) {
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

// Without returns a copy of u without the fields at paths (fields inside lists are
// left, as removing one would shift the others).
func Without(u *unstructured.Unstructured, paths [][]string) *unstructured.Unstructured {
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

// release hands the excluded fields of the live object u names to ReleasedFieldManager,
// at their live values, so that kaddons leaving them out of its apply keeps them as they
// are and any other manager (an HPA, the add-on itself) can change them.
func (w *stageWriter) release(ctx context.Context, u *unstructured.Unstructured, paths [][]string) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	if err := w.Cache.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	held := only(live, paths)
	if len(held.Object) <= 3 {
		// Only apiVersion, kind and metadata: nothing to hold.
		return nil
	}
	return w.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(held),
		client.FieldOwner(ReleasedFieldManager), client.ForceOwnership)
}
