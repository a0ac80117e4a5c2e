// Package v1alpha1 contains version v1alpha1 of the kaddons operator's configuration API:
// the configuration file, kind OperatorConfiguration, which the manager reads from --config
// (the manager converts every supported version to one internal type, internal/config, so
// a v1alpha1 file keeps working when newer versions are added); and the cluster resources
// OperatorConfig, for the settings that may change while the operator runs, and
// AddonPolicy, through which cluster admins delegate add-ons to namespaces.
// +kubebuilder:object:generate=true
// +groupName=config.kaddons.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this configuration API.
	GroupVersion = schema.GroupVersion{Group: "config.kaddons.dev", Version: "v1alpha1"}

	// SchemeBuilder collects the functions that register the kinds of this group version.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &OperatorConfiguration{})
		return nil
	})
)

// register adds the cluster resource kinds (with their lists) to the scheme builder.
func register(objects ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objects...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
}

// AddToScheme adds the kinds of this group and version to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	return SchemeBuilder.AddToScheme(s)
}
