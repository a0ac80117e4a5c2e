package v1alpha1

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

	// metrics configures the metrics endpoint.
	// +optional
	Metrics Metrics `json:"metrics,omitzero"`

	// health configures the health probe endpoint.
	// +optional
	Health Health `json:"health,omitzero"`

	// leaderElection configures leader election between manager replicas.
	// +optional
	LeaderElection LeaderElection `json:"leaderElection,omitzero"`

	// syncPeriod is how often the manager's cache re-lists every watched object and so
	// reconciles every add-on again. Unset or 0 means 10h.
	// +optional
	SyncPeriod metav1.Duration `json:"syncPeriod,omitzero"`

	// concurrency bounds how many add-ons of one kind are reconciled in parallel.
	// +optional
	Concurrency Concurrency `json:"concurrency,omitzero"`

	// manifests says where the channels and packages are read from.
	// +optional
	Manifests Manifests `json:"manifests,omitzero"`

	// defaultChannel is the channel for add-ons that set neither spec.version nor
	// spec.channel. Unset means stable.
	// +optional
	DefaultChannel string `json:"defaultChannel,omitempty"`

	// registryMirror is a registry host with an optional path, such as
	// registry.example.com/mirror, that replaces the registry of every rendered image,
	// for clusters that cannot pull from the public registries. Unset means images are
	// pulled from where the packages say.
	// +optional
	RegistryMirror string `json:"registryMirror,omitempty"`

	// pausedAddonKinds lists add-on kinds, such as CoreDNS, whose reconciliation is paused:
	// their add-ons are left as they are until the kind is removed from the list.
	// +optional
	PausedAddonKinds []string `json:"pausedAddonKinds,omitempty"`

	// resyncInterval is how often a Ready add-on is reconciled again even when nothing it
	// watches changed. Unset or 0 turns the periodic resync off.
	// +optional
	ResyncInterval metav1.Duration `json:"resyncInterval,omitzero"`

	// logLevel is the least severe level that is logged: error, info or debug. Unset
	// means info.
	// +optional
	LogLevel LogLevel `json:"logLevel,omitempty"`

	// trustedNamespaces lists the namespaces whose add-ons are applied with the operator's
	// own identity; add-ons elsewhere are applied as a ServiceAccount of their namespace.
	// Unset means kube-system and the operator's own namespace; ["*"] trusts every one.
	// +optional
	TrustedNamespaces []string `json:"trustedNamespaces,omitempty"`

	// defaultServiceAccountName is impersonated for add-ons outside the trusted namespaces
	// that name no ServiceAccount. Unset means such add-ons are refused.
	// +optional
	DefaultServiceAccountName string `json:"defaultServiceAccountName,omitempty"`
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

// Health configures the health probe endpoint (/healthz and /readyz).
type Health struct {
	// healthProbeBindAddress is the host:port the probe endpoint listens on, or 0 to turn
	// it off. Unset means :8081.
	// +optional
	HealthProbeBindAddress string `json:"healthProbeBindAddress,omitempty"`
}

// LeaderElection configures leader election, so that only one manager replica reconciles.
type LeaderElection struct {
	// leaderElect turns leader election on.
	// +optional
	LeaderElect bool `json:"leaderElect,omitempty"`

	// resourceName is the name of the leader election Lease. Unset means
	// kaddons.addons.kaddons.dev.
	// +optional
	ResourceName string `json:"resourceName,omitempty"`

	// resourceNamespace is the namespace of the leader election Lease. Unset means the
	// manager's own namespace when it runs in a cluster.
	// +optional
	ResourceNamespace string `json:"resourceNamespace,omitempty"`

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

// ManifestSource says where the channels and packages come from.
type ManifestSource string

const (
	// ManifestSourceBuiltin reads the channels embedded in the manager binary
	// (channels/embed.go): nothing on disk is needed.
	ManifestSourceBuiltin ManifestSource = "Builtin"
	// ManifestSourceDirectory reads the channels directory at Manifests.Directory.
	ManifestSourceDirectory ManifestSource = "Directory"
)

// Manifests says where the channels and packages are read from.
type Manifests struct {
	// source is Builtin or Directory. Unset means Directory when directory is set and
	// Builtin otherwise.
	// +optional
	Source ManifestSource `json:"source,omitempty"`

	// directory is the channels directory (channel files and packages/) when source is
	// Directory.
	// +optional
	Directory string `json:"directory,omitempty"`
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
