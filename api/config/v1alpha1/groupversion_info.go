// Package v1alpha1 contains version v1alpha1 of the kaddons operator's configuration file,
// kind OperatorConfiguration, which the manager reads from --config. The manager converts
// every supported version to one internal type (internal/config), so a v1alpha1 file keeps
// working when newer versions are added.
// +kubebuilder:object:generate=true
// +groupName=config.kaddons.dev
package v1alpha1

import (
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

// AddToScheme adds the kinds of this group and version to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	return SchemeBuilder.AddToScheme(s)
}
