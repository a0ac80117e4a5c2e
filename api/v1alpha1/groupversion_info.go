// Package v1alpha1 contains the add-on API of kaddons: one kind per managed cluster add-on.
// +kubebuilder:object:generate=true
// +groupName=addons.kaddons.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the kaddons add-on API.
	GroupVersion = schema.GroupVersion{Group: "addons.kaddons.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the add-on types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the add-on types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
