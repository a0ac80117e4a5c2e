package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers/channels"
)

// ObjectTransform is KDP's object transform: it edits the rendered objects of one add-on.
type ObjectTransform = declarative.ObjectTransform

// ApplyPatches applies the add-on's spec.patches to the rendered objects. Unlike KDP's
// ApplyPatches it refuses a patch that is malformed or that matches no object, so a typo
// in a patch is reported instead of silently ignored.
func ApplyPatches(_ context.Context, obj declarative.DeclarativeObject, objects *manifest.Objects) error {
	patchable, ok := obj.(addonv1alpha1.Patchable)
	if !ok {
		return nil
	}
	for i, raw := range patchable.PatchSpec().Patches {
		patch, err := parsePatch(i, raw)
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

// parsePatch decodes patch i and checks that it names its target.
func parsePatch(i int, raw *runtime.RawExtension) (*unstructured.Unstructured, error) {
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

// setNamespace returns a transform that moves every namespaced object into the add-on's
// namespace and points ServiceAccount subjects of (Cluster)RoleBindings at it.
//
// Outside the add-on's home namespace (for CoreDNS, kube-system) it also suffixes the
// names of cluster-scoped RBAC objects with the namespace, so that instances in different
// namespaces do not fight over one ClusterRole.
func setNamespace(mapper meta.RESTMapper, home string) ObjectTransform {
	return func(_ context.Context, obj declarative.DeclarativeObject, objects *manifest.Objects) error {
		ns := obj.GetNamespace()
		serviceAccounts := map[string]bool{}
		renamed := map[string]string{}
		for _, o := range objects.Items {
			if o.Kind == kindServiceAccount && o.Group == "" {
				serviceAccounts[o.GetName()] = true
			}
		}
		packaged := packagedScopes(objects)
		for _, o := range objects.Items {
			gvk := o.GroupVersionKind()
			scope, err := scopeOf(mapper, packaged, gvk)
			if err != nil {
				return err
			}
			switch {
			case scope == meta.RESTScopeNameNamespace:
				if err := o.SetNamespace(ns); err != nil {
					return err
				}
			case ns != home && isClusterRBAC(gvk):
				name := o.GetName() + "-" + ns
				if o.Kind == kindClusterRole {
					renamed[o.GetName()] = name
				}
				if err := o.SetName(name); err != nil {
					return err
				}
			}
		}
		for _, o := range objects.Items {
			gvk := o.GroupVersionKind()
			if gvk.Group == rbacGroup && (gvk.Kind == kindRoleBinding || gvk.Kind == kindClusterRoleBinding) {
				if err := rebind(o, serviceAccounts, renamed, ns); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// packagedScopes returns the scope of every kind that a CustomResourceDefinition of the
// package defines: those kinds are unknown to the API server until the CRD is applied.
func packagedScopes(objects *manifest.Objects) map[schema.GroupKind]meta.RESTScopeName {
	scopes := map[schema.GroupKind]meta.RESTScopeName{}
	for _, o := range objects.Items {
		if o.Kind != "CustomResourceDefinition" || o.Group != "apiextensions.k8s.io" {
			continue
		}
		u := o.UnstructuredObject()
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
		if scope == "Namespaced" {
			scopes[schema.GroupKind{Group: group, Kind: kind}] = meta.RESTScopeNameNamespace
		} else {
			scopes[schema.GroupKind{Group: group, Kind: kind}] = meta.RESTScopeNameRoot
		}
	}
	return scopes
}

// scopeOf returns whether gvk is namespaced, asking the API server's discovery first and
// the package's own CRDs for kinds it does not serve yet.
func scopeOf(mapper meta.RESTMapper, packaged map[schema.GroupKind]meta.RESTScopeName,
	gvk schema.GroupVersionKind) (meta.RESTScopeName, error) {
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return mapping.Scope.Name(), nil
	}
	if scope, ok := packaged[gvk.GroupKind()]; ok && meta.IsNoMatchError(err) {
		return scope, nil
	}
	return "", fmt.Errorf("looking up %s: %w", gvk, err)
}

const (
	rbacGroup              = "rbac.authorization.k8s.io"
	kindClusterRole        = "ClusterRole"
	kindClusterRoleBinding = "ClusterRoleBinding"
	kindRoleBinding        = "RoleBinding"
	kindServiceAccount     = "ServiceAccount"
)

// isClusterRBAC reports whether gvk is a ClusterRole or ClusterRoleBinding.
func isClusterRBAC(gvk schema.GroupVersionKind) bool {
	return gvk.Group == rbacGroup && (gvk.Kind == kindClusterRole || gvk.Kind == kindClusterRoleBinding)
}

// rebind points the ServiceAccount subjects that name an account of the package at
// namespace ns, and a roleRef to a renamed ClusterRole at its new name.
func rebind(o *manifest.Object, serviceAccounts map[string]bool, renamed map[string]string, ns string) error {
	u := o.UnstructuredObject()
	if kind, _, _ := unstructured.NestedString(u.Object, "roleRef", "kind"); kind == kindClusterRole {
		name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
		if newName, ok := renamed[name]; ok {
			if err := o.SetNestedField(newName, "roleRef", "name"); err != nil {
				return err
			}
		}
	}
	subjects, found, err := unstructured.NestedSlice(u.Object, "subjects")
	if err != nil || !found {
		return err
	}
	for i, s := range subjects {
		subject, ok := s.(map[string]any)
		if !ok || subject["kind"] != kindServiceAccount {
			continue
		}
		if name, _ := subject["name"].(string); serviceAccounts[name] {
			subject["namespace"] = ns
			subjects[i] = subject
		}
	}
	return o.SetNestedSlice(subjects, "subjects")
}
