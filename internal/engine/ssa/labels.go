package ssa

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Labels and annotations kaddons puts on every object it applies. The instance labels
// map a child back to the add-on that owns it, since owner references cannot cross
// namespaces or point from cluster-scoped objects to namespaced ones.
const (
	// LabelManagedBy marks every object kaddons applies; the cache only holds objects with it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "kaddons"
	// LabelKind is the lower-case kind of the owning add-on, e.g. coredns.
	LabelKind = "addons.kaddons.dev/kind"
	// LabelNamespace is the namespace of the owning add-on.
	LabelNamespace = "addons.kaddons.dev/namespace"
	// LabelName is the name of the owning add-on.
	LabelName = "addons.kaddons.dev/name"

	// FieldManager is the server-side apply field manager of kaddons.
	FieldManager = "kaddons"
)

// InstanceLabels returns the labels that tie a child to the add-on kind/namespace/name.
func InstanceLabels(kind string, owner types.NamespacedName) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelKind:      strings.ToLower(kind),
		LabelNamespace: owner.Namespace,
		LabelName:      owner.Name,
	}
}

// OwnedBy reports whether labels carry exactly the instance labels of kind/owner.
func OwnedBy(labels map[string]string, kind string, owner types.NamespacedName) bool {
	for k, v := range InstanceLabels(kind, owner) {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// OwnerOf formats the instance labels of an object as kind namespace/name, or "" when
// kaddons does not manage it.
func OwnerOf(labels map[string]string) string {
	if labels[LabelManagedBy] != ManagedByValue || labels[LabelName] == "" {
		return ""
	}
	return labels[LabelKind] + " " + labels[LabelNamespace] + "/" + labels[LabelName]
}
