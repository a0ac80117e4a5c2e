package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OperatorConfiguration is the kaddons manager's configuration file, read once at start-up
// from the path given with --config. It is a file, not a resource the API server serves.
// Unset fields take their defaults; command-line flags that are set explicitly override
// the file.
// +kubebuilder:object:root=true
type OperatorConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// manager holds the settings of the controller manager: endpoints, leader election,
	// cache and concurrency.
	// +optional
	Manager Manager `json:"manager,omitzero"`

	// channels says where the channels and packages are read from.
	// +optional
	Channels Channels `json:"channels,omitzero"`

	// runtime holds the settings that are safe to change while the operator runs.
	// +optional
	Runtime Runtime `json:"runtime,omitzero"`
}

// Manager holds the settings of the controller manager.
type Manager struct {
	// metrics configures the metrics endpoint.
	// +optional
	Metrics Metrics `json:"metrics,omitzero"`

	// healthProbeBindAddress is the host:port the probe endpoint (/healthz and /readyz)
	// listens on, or 0 to turn it off. Unset means :8081.
	// +optional
	HealthProbeBindAddress string `json:"healthProbeBindAddress,omitempty"`

	// leaderElection configures leader election between manager replicas.
	// +optional
	LeaderElection LeaderElection `json:"leaderElection,omitzero"`

	// cacheSyncPeriod is how often the manager's cache re-lists every watched object and
	// so reconciles every add-on again. Unset or 0 means 10h.
	// +optional
	CacheSyncPeriod metav1.Duration `json:"cacheSyncPeriod,omitzero"`

	// concurrency bounds how many add-ons of one kind are reconciled in parallel.
	// +optional
	Concurrency Concurrency `json:"concurrency,omitzero"`
}

// Metrics configures the metrics endpoint.
type Metrics struct {
	// bindAddress is the host:port the metrics endpoint listens on, such as :8443, or 0
	// to turn the endpoint off. Unset means 0.
	// +optional
	BindAddress string `json:"bindAddress,omitempty"`

	// secure serves the metrics over HTTPS, to clients that authenticate with a token
	// that is authorised to GET /metrics. false serves plain HTTP. Unset means true.
	// +optional
	Secure *bool `json:"secure,omitempty"`
}

// LeaderElection configures leader election, so that only one manager replica reconciles.
type LeaderElection struct {
	// enabled turns leader election on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// id is the name of the leader election Lease. Unset means kaddons.addons.kaddons.dev.
	// +optional
	ID string `json:"id,omitempty"`

	// namespace is the namespace of the leader election Lease. Unset means the manager's
	// own namespace when it runs in a cluster.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// leaseDuration is how long followers wait after the last renewal before they try to
	// take over. Unset or 0 means 15s.
	// +optional
	LeaseDuration metav1.Duration `json:"leaseDuration,omitzero"`

	// renewDeadline is how long the leader keeps trying to renew before it gives up
	// leadership. Unset or 0 means 10s.
	// +optional
	RenewDeadline metav1.Duration `json:"renewDeadline,omitzero"`

	// retryPeriod is how long to wait between attempts to acquire or renew the lease.
	// Unset or 0 means 2s.
	// +optional
	RetryPeriod metav1.Duration `json:"retryPeriod,omitzero"`
}

// Concurrency bounds the parallel reconciles of each add-on controller.
type Concurrency struct {
	// default is how many add-ons of one kind are reconciled in parallel, for every kind
	// that perKind does not name. Unset or 0 means 4.
	// +optional
	Default int32 `json:"default,omitempty"`

	// perKind overrides default for the add-on kinds it names, such as CoreDNS.
	// +optional
	PerKind map[string]int32 `json:"perKind,omitempty"`
}

// ChannelSource says where the channels and packages come from.
type ChannelSource string

const (
	// ChannelSourceBuiltin reads the channels embedded in the manager binary
	// (channels/embed.go): nothing on disk is needed.
	ChannelSourceBuiltin ChannelSource = "Builtin"
	// ChannelSourceDirectory reads the channels directory at Channels.Directory.
	ChannelSourceDirectory ChannelSource = "Directory"
)

// Channels says where the channels and packages are read from.
type Channels struct {
	// source is Builtin or Directory. Unset means Directory when directory is set and
	// Builtin otherwise.
	// +optional
	Source ChannelSource `json:"source,omitempty"`

	// directory is the channels directory (channel files and packages/) when source is
	// Directory.
	// +optional
	Directory string `json:"directory,omitempty"`
}

// Runtime holds the settings that are safe to change while the operator runs.
type Runtime struct {
	// defaultChannel is the channel for add-ons that set neither spec.version nor
	// spec.channel. Unset means stable.
	// +optional
	DefaultChannel string `json:"defaultChannel,omitempty"`

	// imageRegistry rewrites the images of the rendered packages.
	// +optional
	ImageRegistry ImageRegistry `json:"imageRegistry,omitzero"`

	// pausedKinds lists add-on kinds, such as CoreDNS, whose reconciliation is paused:
	// their add-ons are left as they are until the kind is removed from the list.
	// +optional
	PausedKinds []string `json:"pausedKinds,omitempty"`

	// resyncInterval is how often a Ready add-on is reconciled again even when nothing
	// it watches changed. Unset or 0 turns the periodic resync off.
	// +optional
	ResyncInterval metav1.Duration `json:"resyncInterval,omitzero"`

	// logLevel is the least severe level that is logged: error, info or debug. Unset
	// means info.
	// +optional
	LogLevel LogLevel `json:"logLevel,omitempty"`

	// tenancy says which add-ons are applied with the operator's own identity and which
	// as a ServiceAccount of their namespace.
	// +optional
	Tenancy Tenancy `json:"tenancy,omitzero"`
}

// Tenancy says whose permissions apply an add-on's objects.
type Tenancy struct {
	// trustedNamespaces lists the namespaces whose add-ons are applied with the operator's
	// own identity (unless they name a spec.serviceAccountName). Add-ons anywhere else are
	// applied by impersonating a ServiceAccount of their namespace. Unset means
	// kube-system and the operator's own namespace; [] trusts no namespace; ["*"] trusts
	// every namespace (only for clusters where just cluster admins create add-ons).
	// +optional
	TrustedNamespaces []string `json:"trustedNamespaces,omitempty"`

	// defaultServiceAccountName is the ServiceAccount impersonated for add-ons outside the
	// trusted namespaces that set no spec.serviceAccountName, as Flux's
	// --default-service-account. Unset means such add-ons are refused.
	// +optional
	DefaultServiceAccountName string `json:"defaultServiceAccountName,omitempty"`
}

// ImageRegistry rewrites the images of the rendered packages.
type ImageRegistry struct {
	// mirror is a registry host with an optional path, such as
	// registry.example.com/mirror, that replaces the registry of every rendered image,
	// for clusters that cannot pull from the public registries. Unset means images are
	// pulled from where the packages say.
	// +optional
	Mirror string `json:"mirror,omitempty"`
}

// LogLevel is the least severe level that is logged.
type LogLevel string

const (
	// LogLevelError logs errors only.
	LogLevelError LogLevel = "error"
	// LogLevelInfo logs errors and informational messages.
	LogLevelInfo LogLevel = "info"
	// LogLevelDebug also logs debug messages (logr verbosity 1).
	LogLevelDebug LogLevel = "debug"
)
