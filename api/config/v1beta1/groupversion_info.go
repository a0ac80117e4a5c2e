// Package v1beta1 contains version v1beta1 of the kaddons operator's configuration file,
// kind OperatorConfiguration, which the manager reads from --config. Compared with
// v1alpha1 it groups the manager settings under manager, moves manifests to channels, and
// gathers the settings that are safe to change while the operator runs under runtime,
// where registryMirror becomes imageRegistry.mirror and pausedAddonKinds pausedKinds.
// +kubebuilder:object:generate=true
// +groupName=config.kaddons.dev
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this configuration API.
	GroupVersion = schema.GroupVersion{Group: "config.kaddons.dev", Version: "v1beta1"}

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
