package config

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1beta1 "github.com/kaddons/kaddons/api/config/v1beta1"
)

// FromV1beta1 converts a v1beta1 file to the hub, which has v1beta1's layout, so that
// ToV1beta1 gives the file back unchanged.
func FromV1beta1(in *configv1beta1.OperatorConfiguration) *Configuration {
	m := in.Manager
	le := m.LeaderElection
	return &Configuration{
		Manager: Manager{
			Metrics: Metrics{
				BindAddress: m.Metrics.BindAddress,
				Secure:      clonePtr(m.Metrics.Secure),
			},
			HealthProbeBindAddress: m.HealthProbeBindAddress,
			LeaderElection: LeaderElection{
				Enabled:       le.Enabled,
				ID:            le.ID,
				Namespace:     le.Namespace,
				LeaseDuration: le.LeaseDuration.Duration,
				RenewDeadline: le.RenewDeadline.Duration,
				RetryPeriod:   le.RetryPeriod.Duration,
			},
			CacheSyncPeriod: m.CacheSyncPeriod.Duration,
			Concurrency: Concurrency{
				Default: m.Concurrency.Default,
				PerKind: maps.Clone(m.Concurrency.PerKind),
			},
		},
		Channels: Channels{
			Source:    ChannelSource(in.Channels.Source),
			Directory: in.Channels.Directory,
		},
		Runtime: Runtime{
			DefaultChannel: in.Runtime.DefaultChannel,
			RegistryMirror: in.Runtime.ImageRegistry.Mirror,
			PausedKinds:    slices.Clone(in.Runtime.PausedKinds),
			ResyncInterval: in.Runtime.ResyncInterval.Duration,
			LogLevel:       LogLevel(in.Runtime.LogLevel),

			TrustedNamespaces:         slices.Clone(in.Runtime.Tenancy.TrustedNamespaces),
			DefaultServiceAccountName: in.Runtime.Tenancy.DefaultServiceAccountName,
		},
	}
}

// ToV1beta1 converts the hub to a v1beta1 file, apiVersion and kind included.
func ToV1beta1(in *Configuration) *configv1beta1.OperatorConfiguration {
	m := in.Manager
	le := m.LeaderElection
	return &configv1beta1.OperatorConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1beta1.GroupVersion.String(), Kind: Kind},
		Manager: configv1beta1.Manager{
			Metrics: configv1beta1.Metrics{
				BindAddress: m.Metrics.BindAddress,
				Secure:      clonePtr(m.Metrics.Secure),
			},
			HealthProbeBindAddress: m.HealthProbeBindAddress,
			LeaderElection: configv1beta1.LeaderElection{
				Enabled:       le.Enabled,
				ID:            le.ID,
				Namespace:     le.Namespace,
				LeaseDuration: metav1.Duration{Duration: le.LeaseDuration},
				RenewDeadline: metav1.Duration{Duration: le.RenewDeadline},
				RetryPeriod:   metav1.Duration{Duration: le.RetryPeriod},
			},
			CacheSyncPeriod: metav1.Duration{Duration: m.CacheSyncPeriod},
			Concurrency: configv1beta1.Concurrency{
				Default: m.Concurrency.Default,
				PerKind: maps.Clone(m.Concurrency.PerKind),
			},
		},
		Channels: configv1beta1.Channels{
			Source:    configv1beta1.ChannelSource(in.Channels.Source),
			Directory: in.Channels.Directory,
		},
		Runtime: configv1beta1.Runtime{
			DefaultChannel: in.Runtime.DefaultChannel,
			ImageRegistry:  configv1beta1.ImageRegistry{Mirror: in.Runtime.RegistryMirror},
			PausedKinds:    slices.Clone(in.Runtime.PausedKinds),
			ResyncInterval: metav1.Duration{Duration: in.Runtime.ResyncInterval},
			LogLevel:       configv1beta1.LogLevel(in.Runtime.LogLevel),
			Tenancy: configv1beta1.Tenancy{
				TrustedNamespaces:         slices.Clone(in.Runtime.TrustedNamespaces),
				DefaultServiceAccountName: in.Runtime.DefaultServiceAccountName,
			},
		},
	}
}
