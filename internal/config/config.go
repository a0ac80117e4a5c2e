// Package config holds the kaddons manager's configuration: Configuration, the internal
// hub type that every version of the configuration file (api/config/...) converts to and
// from, and Load, which reads such a file strictly, converts, defaults and validates it.
//
// The hub follows the layout of the newest file version (v1beta1), so validation errors
// use its field paths; Load rewrites them to the paths of the file's own version.
package config

import (
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the settings. The manager's command-line flags use the same values, so a
// setting means the same whether it is left out of the file or not given as a flag.
const (
	// DefaultMetricsBindAddress turns the metrics endpoint off.
	DefaultMetricsBindAddress = "0"
	// DefaultHealthProbeBindAddress is the address of /healthz and /readyz.
	DefaultHealthProbeBindAddress = ":8081"
	// DefaultLeaderElectionID is the name of the leader election Lease.
	DefaultLeaderElectionID = "kaddons.addons.kaddons.dev"
	// DefaultLeaseDuration is how long followers wait after the last renewal; this and
	// the next two timings are controller-runtime's defaults.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRenewDeadline is how long the leader tries to renew before giving up.
	DefaultRenewDeadline = 10 * time.Second
	// DefaultRetryPeriod is the wait between attempts to acquire or renew the lease.
	DefaultRetryPeriod = 2 * time.Second
	// DefaultCacheSyncPeriod is controller-runtime's cache resync period.
	DefaultCacheSyncPeriod = 10 * time.Hour
	// DefaultConcurrency is how many add-ons of one kind are reconciled in parallel.
	DefaultConcurrency = 4
	// DefaultChannel is the channel for add-ons that name neither a version nor a channel.
	DefaultChannel = "stable"
)

// Configuration is the manager's configuration, whatever version of the file it came from.
// Default fills what a file left unset and Validate checks it; Load does both.
type Configuration struct {
	// Manager holds the settings of the controller manager.
	Manager Manager
	// Channels says where the channels and packages are read from.
	Channels Channels
	// Runtime holds the settings that are safe to change while the operator runs. They
	// are kept apart so that a live override can be merged onto them as one value.
	Runtime Runtime
}

// Manager holds the settings of the controller manager.
type Manager struct {
	// Metrics configures the metrics endpoint.
	Metrics Metrics
	// HealthProbeBindAddress is the host:port of /healthz and /readyz; "0" turns them off.
	HealthProbeBindAddress string
	// LeaderElection configures leader election between replicas.
	LeaderElection LeaderElection
	// CacheSyncPeriod is how often the cache re-lists every watched object.
	CacheSyncPeriod time.Duration
	// Concurrency bounds the parallel reconciles of each add-on controller.
	Concurrency Concurrency
}

// Metrics configures the metrics endpoint.
type Metrics struct {
	// BindAddress is the host:port of the metrics endpoint; "0" turns it off.
	BindAddress string
	// Secure serves HTTPS with authentication and authorisation; nil means true.
	Secure *bool
}

// LeaderElection configures leader election between replicas.
type LeaderElection struct {
	// Enabled turns leader election on.
	Enabled bool
	// ID is the name of the Lease.
	ID string
	// Namespace is the namespace of the Lease; empty means the manager's own.
	Namespace string
	// LeaseDuration is how long followers wait after the last renewal.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader tries to renew before giving up.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between attempts to acquire or renew the lease.
	RetryPeriod time.Duration
}

// Concurrency bounds the parallel reconciles of each add-on controller.
type Concurrency struct {
	// Default applies to every kind PerKind does not name.
	Default int32
	// PerKind maps an add-on kind, such as CoreDNS, to its own bound.
	PerKind map[string]int32
}

// ChannelSource says where the channels and packages come from.
type ChannelSource string

const (
	// ChannelSourceBuiltin is the channels embedded in the manager binary.
	ChannelSourceBuiltin ChannelSource = "Builtin"
	// ChannelSourceDirectory is the directory in Channels.Directory.
	ChannelSourceDirectory ChannelSource = "Directory"
)

// Channels says where the channels and packages are read from.
type Channels struct {
	// Source is Builtin or Directory.
	Source ChannelSource
	// Directory is the channels directory when Source is Directory.
	Directory string
}

// Runtime holds the settings that are safe to change while the operator runs. Every
// field's zero value means "not set", so an override can be merged field by field.
type Runtime struct {
	// DefaultChannel is the channel for add-ons that name neither a version nor a channel.
	DefaultChannel string
	// RegistryMirror replaces the registry of every rendered image; empty means none.
	RegistryMirror string
	// PausedKinds lists the add-on kinds whose reconciliation is paused.
	PausedKinds []string
	// ResyncInterval is how often a Ready add-on is reconciled again; 0 means never.
	ResyncInterval time.Duration
	// LogLevel is the least severe level that is logged.
	LogLevel LogLevel
	// TrustedNamespaces lists the namespaces whose add-ons are applied with the operator's
	// own identity. Nil means DefaultTrustedNamespaces; empty trusts no namespace;
	// TrustAllNamespaces trusts every namespace.
	TrustedNamespaces []string
	// DefaultServiceAccountName is impersonated for add-ons outside the trusted namespaces
	// that name no ServiceAccount; empty refuses them.
	DefaultServiceAccountName string
}

// TrustAllNamespaces trusts every namespace when it is the only trusted namespace: for
// clusters where only cluster admins create add-ons.
const TrustAllNamespaces = "*"

// DefaultTrustedNamespaces returns the namespaces trusted when the configuration names
// none: kube-system and the operator's own namespace.
func DefaultTrustedNamespaces(operatorNamespace string) []string {
	if operatorNamespace == "" || operatorNamespace == metav1.NamespaceSystem {
		return []string{metav1.NamespaceSystem}
	}
	return []string{metav1.NamespaceSystem, operatorNamespace}
}

// Trusted returns the namespaces whose add-ons are applied with the operator's own
// identity: TrustedNamespaces, or DefaultTrustedNamespaces when it is nil.
func (r *Runtime) Trusted(operatorNamespace string) []string {
	if r.TrustedNamespaces == nil {
		return DefaultTrustedNamespaces(operatorNamespace)
	}
	return slices.Clone(r.TrustedNamespaces)
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

// LogLevels lists the supported log levels, least verbose first.
var LogLevels = []LogLevel{LogLevelError, LogLevelInfo, LogLevelDebug}

// ConcurrencyFor returns how many add-ons of kind may be reconciled in parallel: the
// kind's own bound if Manager.Concurrency.PerKind names it, else the default.
func (c *Configuration) ConcurrencyFor(kind string) int {
	if n, ok := c.Manager.Concurrency.PerKind[kind]; ok && n > 0 {
		return int(n)
	}
	if c.Manager.Concurrency.Default > 0 {
		return int(c.Manager.Concurrency.Default)
	}
	return DefaultConcurrency
}

// IsPaused reports whether Runtime.PausedKinds names kind.
func (r *Runtime) IsPaused(kind string) bool {
	return slices.Contains(r.PausedKinds, kind)
}

// DeepCopy returns a copy of c that shares no memory with it.
func (c *Configuration) DeepCopy() *Configuration {
	if c == nil {
		return nil
	}
	out := *c
	if c.Manager.Metrics.Secure != nil {
		secure := *c.Manager.Metrics.Secure
		out.Manager.Metrics.Secure = &secure
	}
	out.Manager.Concurrency.PerKind = maps.Clone(c.Manager.Concurrency.PerKind)
	out.Runtime = *c.Runtime.DeepCopy()
	return &out
}

// DeepCopy returns a copy of r that shares no memory with it.
func (r *Runtime) DeepCopy() *Runtime {
	if r == nil {
		return nil
	}
	out := *r
	out.PausedKinds = slices.Clone(r.PausedKinds)
	out.TrustedNamespaces = slices.Clone(r.TrustedNamespaces)
	return &out
}
