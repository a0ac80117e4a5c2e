// Package v1alpha1 contains the add-on API of kaddons: one kind per managed cluster add-on.
// +kubebuilder:object:generate=true
// +groupName=addons.kaddons.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the kaddons add-on API.
	GroupVersion = schema.GroupVersion{Group: "addons.kaddons.dev", Version: "v1alpha1"}

	// SchemeBuilder collects the functions that register the add-on types; each types
	// file registers its kinds in init.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
)

// AddToScheme adds the add-on types of this group and version to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	return SchemeBuilder.AddToScheme(s)
}

// register adds kinds to the group version.
func register(objects ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objects...)
		return nil
	})
}
