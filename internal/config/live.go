package config

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

// livePaths renames the Runtime's field paths to the OperatorConfig's.
var livePaths = strings.NewReplacer(
	"spec.imageRegistry.mirror", "spec.registryMirror",
	"spec.pausedKinds", "spec.pausedAddonKinds",
	"spec.tenancy.trustedNamespaces", "spec.trustedNamespaces",
	"spec.tenancy.defaultServiceAccountName", "spec.defaultServiceAccountName",
)

// MergeLive lays the settings an OperatorConfig's spec sets over base, the configuration
// file's, and validates the result: kinds are the add-on kinds the manager runs and
// channels the channels it has. Errors name the OperatorConfig's fields.
func MergeLive(base Runtime, spec configv1alpha1.OperatorConfigSpec, kinds, channels []string) (Runtime, field.ErrorList) {
	merged := *base.DeepCopy()
	if spec.DefaultChannel != "" {
		merged.DefaultChannel = spec.DefaultChannel
	}
	if spec.RegistryMirror != "" {
		merged.RegistryMirror = spec.RegistryMirror
	}
	if spec.PausedAddonKinds != nil {
		merged.PausedKinds = slices.Clone(spec.PausedAddonKinds)
	}
	if spec.LogLevel != "" {
		merged.LogLevel = LogLevel(spec.LogLevel)
	}
	if spec.ResyncInterval != nil {
		merged.ResyncInterval = spec.ResyncInterval.Duration
	}
	if spec.TrustedNamespaces != nil {
		merged.TrustedNamespaces = slices.Clone(spec.TrustedNamespaces)
	}
	if spec.DefaultServiceAccountName != "" {
		merged.DefaultServiceAccountName = spec.DefaultServiceAccountName
	}

	p := field.NewPath("spec")
	errs := validateRuntime(&merged, p)
	for i, kind := range merged.PausedKinds {
		if kindPattern.MatchString(kind) && !slices.Contains(kinds, kind) {
			errs = append(errs, field.NotSupported(p.Child("pausedKinds").Index(i), kind, kinds))
		}
	}
	if spec.DefaultChannel != "" && channelPattern.MatchString(spec.DefaultChannel) && !slices.Contains(channels, spec.DefaultChannel) {
		errs = append(errs, field.NotSupported(p.Child("defaultChannel"), spec.DefaultChannel, channels))
	}
	for _, e := range errs {
		e.Field = livePaths.Replace(e.Field)
	}
	return merged, errs
}
