package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// Addon is the contract between an add-on type and the shared engine. Every add-on kind
// implements it, so the engine never needs to know which add-on it reconciles.
// +kubebuilder:object:generate=false
type Addon interface {
	addonv1alpha1.CommonObject
	addonv1alpha1.Patchable

	// GetAddonStatus returns the add-on's status for the engine to fill in.
	GetAddonStatus() *AddonStatus
}

// AddonStatus is the status shared by every add-on kind.
type AddonStatus struct {
	addonv1alpha1.CommonStatus `json:",inline"`

	// conditions describe the add-on's state: Ready is the summary, Progressing,
	// Degraded and Stalled say why.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// appliedVersion is the package version whose manifests were last applied in full.
	// +optional
	AppliedVersion string `json:"appliedVersion,omitempty"`

	// lastAppliedTime is when the manifests were last applied in full.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`

	// inventory lists every object kaddons applied for this add-on. Objects that leave the
	// rendered manifests are pruned from it; deleting the add-on deletes all of them.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=512
	// +optional
	Inventory []ObjectReference `json:"inventory,omitempty"`
}

// ObjectReference identifies one object that kaddons applied.
type ObjectReference struct {
	// group is the API group of the object; empty for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// version is the API version the object was applied with.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Version string `json:"version"`
	// kind is the object's kind.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// namespace is the object's namespace; empty for cluster-scoped objects.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name is the object's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// GroupVersionKind returns the object's group, version and kind.
func (r ObjectReference) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// String formats the reference as Kind namespace/name, the form used in messages.
func (r ObjectReference) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}
