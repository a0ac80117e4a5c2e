package config

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

// FromV1alpha1 converts a v1alpha1 file to the hub. Every v1alpha1 field has a hub field,
// so ToV1alpha1 gives the file back unchanged.
func FromV1alpha1(in *configv1alpha1.OperatorConfiguration) *Configuration {
	le := in.LeaderElection
	return &Configuration{
		Manager: Manager{
			Metrics: Metrics{
				BindAddress: in.Metrics.BindAddress,
				Secure:      clonePtr(in.Metrics.Secure),
			},
			HealthProbeBindAddress: in.Health.HealthProbeBindAddress,
			LeaderElection: LeaderElection{
				Enabled:       le.LeaderElect,
				ID:            le.ResourceName,
				Namespace:     le.ResourceNamespace,
				LeaseDuration: le.LeaseDuration.Duration,
				RenewDeadline: le.RenewDeadline.Duration,
				RetryPeriod:   le.RetryPeriod.Duration,
			},
			CacheSyncPeriod: in.SyncPeriod.Duration,
			Concurrency: Concurrency{
				Default: in.Concurrency.Default,
				PerKind: maps.Clone(in.Concurrency.PerKind),
			},
		},
		Channels: Channels{
			Source:    ChannelSource(in.Manifests.Source),
			Directory: in.Manifests.Directory,
		},
		Runtime: Runtime{
			DefaultChannel: in.DefaultChannel,
			RegistryMirror: in.RegistryMirror,
			PausedKinds:    slices.Clone(in.PausedAddonKinds),
			ResyncInterval: in.ResyncInterval.Duration,
			LogLevel:       LogLevel(in.LogLevel),

			TrustedNamespaces:         slices.Clone(in.TrustedNamespaces),
			DefaultServiceAccountName: in.DefaultServiceAccountName,
		},
	}
}

// ToV1alpha1 converts the hub to a v1alpha1 file, apiVersion and kind included.
func ToV1alpha1(in *Configuration) *configv1alpha1.OperatorConfiguration {
	m := in.Manager
	le := m.LeaderElection
	return &configv1alpha1.OperatorConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1alpha1.GroupVersion.String(), Kind: Kind},
		Metrics: configv1alpha1.Metrics{
			BindAddress: m.Metrics.BindAddress,
			Secure:      clonePtr(m.Metrics.Secure),
		},
		Health: configv1alpha1.Health{HealthProbeBindAddress: m.HealthProbeBindAddress},
		LeaderElection: configv1alpha1.LeaderElection{
			LeaderElect:       le.Enabled,
			ResourceName:      le.ID,
			ResourceNamespace: le.Namespace,
			LeaseDuration:     metav1.Duration{Duration: le.LeaseDuration},
			RenewDeadline:     metav1.Duration{Duration: le.RenewDeadline},
			RetryPeriod:       metav1.Duration{Duration: le.RetryPeriod},
		},
		SyncPeriod: metav1.Duration{Duration: m.CacheSyncPeriod},
		Concurrency: configv1alpha1.Concurrency{
			Default: m.Concurrency.Default,
			PerKind: maps.Clone(m.Concurrency.PerKind),
		},
		Manifests: configv1alpha1.Manifests{
			Source:    configv1alpha1.ManifestSource(in.Channels.Source),
			Directory: in.Channels.Directory,
		},
		DefaultChannel:   in.Runtime.DefaultChannel,
		RegistryMirror:   in.Runtime.RegistryMirror,
		PausedAddonKinds: slices.Clone(in.Runtime.PausedKinds),
		ResyncInterval:   metav1.Duration{Duration: in.Runtime.ResyncInterval},
		LogLevel:         configv1alpha1.LogLevel(in.Runtime.LogLevel),

		TrustedNamespaces:         slices.Clone(in.Runtime.TrustedNamespaces),
		DefaultServiceAccountName: in.Runtime.DefaultServiceAccountName,
	}
}

// v1alpha1Paths maps the hub's field paths, which are v1beta1's, to v1alpha1's, so that a
// validation error names the field as the v1alpha1 file spells it. More specific paths
// come first.
var v1alpha1Paths = pathRenames{
	{"manager.metrics", "metrics"},
	{"manager.healthProbeBindAddress", "health.healthProbeBindAddress"},
	{"manager.leaderElection.enabled", "leaderElection.leaderElect"},
	{"manager.leaderElection.id", "leaderElection.resourceName"},
	{"manager.leaderElection.namespace", "leaderElection.resourceNamespace"},
	{"manager.leaderElection", "leaderElection"},
	{"manager.cacheSyncPeriod", "syncPeriod"},
	{"manager.concurrency", "concurrency"},
	{"channels", "manifests"},
	{"runtime.defaultChannel", "defaultChannel"},
	{"runtime.imageRegistry.mirror", "registryMirror"},
	{"runtime.pausedKinds", "pausedAddonKinds"},
	{"runtime.resyncInterval", "resyncInterval"},
	{"runtime.logLevel", "logLevel"},
	{"runtime.tenancy.trustedNamespaces", "trustedNamespaces"},
	{"runtime.tenancy.defaultServiceAccountName", "defaultServiceAccountName"},
}

// clonePtr returns a pointer to a copy of *p, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
