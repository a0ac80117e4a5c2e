// Package patches applies an add-on's spec.patches to its rendered objects: a strategic
// merge patch for kinds with a Go schema (decoded into the Go type, so a wrong type is
// caught before the API server sees it), an RFC 7386 JSON merge patch for the rest. It
// needs only the rendered objects, so the engine calls it as a transform and its fuzz
// target builds without the engine's clients.
package patches

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// Apply applies patches, an add-on's spec.patches, to the rendered objects in order. A
// patch targets the objects of its apiVersion, kind and name (and namespace, when it has
// one). Apply refuses a patch that is malformed, that cannot be merged or that matches no
// object, with a *channels.Error carrying the condition reason (InvalidPatch or
// PatchTargetNotFound), so a typo in a patch is reported instead of silently ignored. A
// patch never renames or moves its target.
func Apply(patches []*runtime.RawExtension, objects *manifest.Objects) error {
	for i, raw := range patches {
		patch, err := Parse(i, raw)
		if err != nil {
			return err
		}
		matched := false
		for j, o := range objects.Items {
			if !patchMatches(patch, o) {
				continue
			}
			patched, err := applyPatch(o.UnstructuredObject(), patch)
			if err != nil {
				return &channels.Error{Reason: addonsv1alpha1.ReasonInvalidPatch,
					Message: fmt.Sprintf("patches[%d] (%s %s) cannot be applied", i, patch.GetKind(), patch.GetName()), Err: err}
			}
			newObj, err := manifest.NewObject(patched)
			if err != nil {
				return err
			}
			objects.Items[j] = newObj
			matched = true
		}
		if !matched {
			return &channels.Error{Reason: addonsv1alpha1.ReasonPatchTargetNotFound,
				Message: fmt.Sprintf("patches[%d] targets %s %s (%s), which the package does not contain",
					i, patch.GetKind(), patch.GetName(), patch.GetAPIVersion())}
		}
	}
	return nil
}

// Parse decodes patch i and checks that it names its target.
func Parse(i int, raw *runtime.RawExtension) (*unstructured.Unstructured, error) {
	invalid := func(format string, args ...any) error {
		return &channels.Error{Reason: addonsv1alpha1.ReasonInvalidPatch,
			Message: fmt.Sprintf("patches[%d] ", i) + fmt.Sprintf(format, args...)}
	}
	if raw == nil || len(bytes.TrimSpace(raw.Raw)) == 0 {
		return nil, invalid("is empty")
	}
	var content map[string]any
	if err := json.Unmarshal(raw.Raw, &content); err != nil {
		return nil, invalid("is not an object: %v", err)
	}
	patch := &unstructured.Unstructured{Object: content}
	switch {
	case patch.GetAPIVersion() == "":
		return nil, invalid("has no apiVersion")
	case patch.GetKind() == "":
		return nil, invalid("has no kind")
	case patch.GetName() == "":
		return nil, invalid("has no metadata.name")
	}
	return patch, nil
}

// patchMatches reports whether patch targets o. A patch without a namespace matches the
// object of that name in whatever namespace the add-on renders to.
func patchMatches(patch *unstructured.Unstructured, o *manifest.Object) bool {
	if patch.GroupVersionKind() != o.GroupVersionKind() || patch.GetName() != o.GetName() {
		return false
	}
	return patch.GetNamespace() == "" || patch.GetNamespace() == o.GetNamespace()
}

// applyPatch merges patch into base: strategic merge for kinds with a Go schema, JSON
// merge patch for the rest.
func applyPatch(base, patch *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	baseJSON, err := base.MarshalJSON()
	if err != nil {
		return nil, err
	}
	patchJSON, err := patch.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var merged []byte
	typed, err := scheme.Scheme.New(base.GroupVersionKind())
	if err == nil {
		merged, err = strategicpatch.StrategicMergePatch(baseJSON, patchJSON, typed)
		if err != nil {
			return nil, err
		}
		// A strategic merge does not check types; decoding into the Go type does, so a
		// patch like replicas: "three" is caught here rather than by the API server.
		if err := json.Unmarshal(merged, typed); err != nil {
			return nil, err
		}
	} else {
		merged, err = jsonMergePatch(baseJSON, patchJSON)
		if err != nil {
			return nil, err
		}
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(merged); err != nil {
		return nil, err
	}
	// A patch must not rename or move its target.
	out.SetName(base.GetName())
	out.SetNamespace(base.GetNamespace())
	return out, nil
}

// jsonMergePatch applies an RFC 7386 merge patch.
func jsonMergePatch(base, patch []byte) ([]byte, error) {
	var b, p any
	if err := json.Unmarshal(base, &b); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	return json.Marshal(mergeValue(b, p))
}

func mergeValue(base, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	bm, ok := base.(map[string]any)
	if !ok {
		bm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(bm, k)
			continue
		}
		bm[k] = mergeValue(bm[k], v)
	}
	return bm
}
