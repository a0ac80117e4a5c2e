package engine

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kaddons/kaddons/internal/engine/patches"
)

// ApplyPatches applies the add-on's spec.patches to the rendered objects (see
// patches.Apply): unlike KDP's ApplyPatches it refuses a patch that is malformed or that
// matches no object, so a typo in a patch is reported instead of silently ignored.
func ApplyPatches(_ context.Context, in RenderInput, objects *Objects) error {
	return patches.Apply(patchesOf(in.Addon), objects)
}

// setNamespace returns a transform that places the rendered objects:
//   - namespaced objects without a namespace go to the add-on's target namespace, and
//     ServiceAccount subjects of (Cluster)RoleBindings follow them;
//   - a Namespace object of the package becomes the target namespace, and is dropped when
//     that is the add-on resource's own namespace, which kaddons must never manage;
//   - a namespaced object the package pins to a namespace (metadata.namespace set, like
//     metrics-server's RoleBinding in kube-system) stays there.
//
// Outside the add-on's home namespace (for CoreDNS, kube-system) it suffixes with the
// target namespace the names of the objects instances would otherwise share: cluster-scoped
// RBAC and pinned objects. Instances in different namespaces then do not fight over one
// ClusterRole.
func setNamespace(mapper meta.RESTMapper, def Definition) ObjectTransform {
	return func(_ context.Context, in RenderInput, objects *Objects) error {
		p := placement{
			namespace:       in.TargetNamespace,
			own:             in.Addon.GetNamespace(),
			serviceAccounts: map[string]bool{},
			services:        map[string]bool{},
			renamedRoles:    map[string]string{},
		}
		p.shared = p.namespace != def.HomeNamespace
		for _, o := range objects.Items {
			switch {
			case o.Group == "" && o.Kind == kindServiceAccount:
				p.serviceAccounts[o.GetName()] = true
			case o.Group == "" && o.Kind == "Service":
				p.services[o.GetName()] = true
			}
		}
		packaged := packagedScopes(objects)
		kept := objects.Items[:0]
		for _, o := range objects.Items {
			scope, err := scopeOf(mapper, packaged, o.GroupVersionKind())
			if err != nil {
				return err
			}
			keep, err := p.place(o, scope)
			if err != nil {
				return err
			}
			if keep {
				kept = append(kept, o)
			}
		}
		objects.Items = kept
		for _, o := range objects.Items {
			if err := p.relink(o); err != nil {
				return err
			}
		}
		return nil
	}
}

// placement is what setNamespace knows of one add-on's rendered objects.
type placement struct {
	// namespace is the target namespace; own is the add-on resource's namespace.
	namespace, own string
	// shared is true outside the home namespace, where names instances share get a suffix.
	shared bool
	// serviceAccounts and services are the names the package defines.
	serviceAccounts, services map[string]bool
	// renamedRoles maps the package's ClusterRole names to their suffixed names.
	renamedRoles map[string]string
}

// place sets the namespace or name of one object of the given scope, and reports whether
// the object stays in the rendered set.
func (p *placement) place(o *Object, scope meta.RESTScopeName) (bool, error) {
	gvk := o.GroupVersionKind()
	switch {
	case gvk.Group == "" && gvk.Kind == kindNamespace:
		if p.namespace == p.own {
			return false, nil
		}
		return true, o.SetName(p.namespace)
	case scope == meta.RESTScopeNameNamespace && o.GetNamespace() == "":
		return true, o.SetNamespace(p.namespace)
	case p.shared && (scope == meta.RESTScopeNameNamespace || isClusterRBAC(gvk)):
		name := o.GetName() + "-" + p.namespace
		if o.Kind == kindClusterRole {
			p.renamedRoles[o.GetName()] = name
		}
		return true, o.SetName(name)
	}
	return true, nil
}

// relink points references between the package's objects at where place put them.
func (p *placement) relink(o *Object) error {
	gvk := o.GroupVersionKind()
	switch {
	case gvk.Group == rbacGroup && (gvk.Kind == kindRoleBinding || gvk.Kind == kindClusterRoleBinding):
		return rebind(o, p.serviceAccounts, p.renamedRoles, p.namespace)
	case gvk.Group == apiRegistrationGroup && gvk.Kind == "APIService":
		return retargetService(o, p.services, p.namespace, "spec", "service")
	}
	return nil
}

// retargetService points the Service reference at fields (an APIService's spec.service)
// at namespace ns when it names one of the package's services, which moved there.
func retargetService(o *Object, services map[string]bool, ns string, fields ...string) error {
	u := o.UnstructuredObject()
	name, _, _ := unstructured.NestedString(u.Object, append(fields, "name")...)
	if !services[name] {
		return nil
	}
	return o.SetNestedField(ns, append(fields, "namespace")...)
}

// packagedScopes returns the scope of every kind that a CustomResourceDefinition of the
// package defines: those kinds are unknown to the API server until the CRD is applied.
func packagedScopes(objects *Objects) map[schema.GroupKind]meta.RESTScopeName {
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
	kindNamespace          = "Namespace"
	apiRegistrationGroup   = "apiregistration.k8s.io"
)

// isClusterRBAC reports whether gvk is a ClusterRole or ClusterRoleBinding.
func isClusterRBAC(gvk schema.GroupVersionKind) bool {
	return gvk.Group == rbacGroup && (gvk.Kind == kindClusterRole || gvk.Kind == kindClusterRoleBinding)
}

// rebind points the ServiceAccount subjects that name an account of the package at
// namespace ns, and a roleRef to a renamed ClusterRole at its new name.
func rebind(o *Object, serviceAccounts map[string]bool, renamed map[string]string, ns string) error {
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
