package config

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/leaderelection"
)

// Lower bounds that keep a configuration from loading the API server.
const (
	// MinCacheSyncPeriod is the shortest cache sync period: every sync re-lists every
	// watched object.
	MinCacheSyncPeriod = time.Minute
	// MinResyncInterval is the shortest periodic resync of a Ready add-on.
	MinResyncInterval = 10 * time.Second
)

var (
	// kindPattern matches an add-on kind such as CoreDNS or NodeLocalDNS.
	kindPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,62}$`)
	// channelPattern matches a channel name, as the channels package accepts it.
	channelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$`)
	// mirrorPattern matches a registry host, with an optional port and path, in the
	// grammar of image references: no scheme, no tag, no digest, no trailing slash.
	mirrorPattern = regexp.MustCompile(`^` +
		`[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*` + // host
		`(?::[0-9]+)?` + // port
		`(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` + // path
		`$`)
)

// Validate checks every setting of a defaulted c and returns one error per invalid
// value, with the field path of the newest file version.
func Validate(c *Configuration) field.ErrorList {
	return slices.Concat(
		validateManager(&c.Manager, field.NewPath("manager")),
		validateChannels(&c.Channels, field.NewPath("channels")),
		validateRuntime(&c.Runtime, field.NewPath("runtime")),
	)
}

// ValidateKinds checks that every add-on kind c names, in Manager.Concurrency.PerKind and
// in Runtime.PausedKinds, is one of kinds, the kinds this manager runs. Names that are not
// kinds at all are Validate's to report.
func ValidateKinds(c *Configuration, kinds []string) field.ErrorList {
	var errs field.ErrorList
	perKind := field.NewPath("manager", "concurrency", "perKind")
	for _, kind := range sortedKeys(c.Manager.Concurrency.PerKind) {
		if kindPattern.MatchString(kind) && !slices.Contains(kinds, kind) {
			errs = append(errs, field.NotSupported(perKind.Key(kind), kind, kinds))
		}
	}
	paused := field.NewPath("runtime", "pausedKinds")
	for i, kind := range c.Runtime.PausedKinds {
		if kindPattern.MatchString(kind) && !slices.Contains(kinds, kind) {
			errs = append(errs, field.NotSupported(paused.Index(i), kind, kinds))
		}
	}
	return errs
}

func validateManager(m *Manager, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateBindAddress(m.Metrics.BindAddress, p.Child("metrics", "bindAddress"))...)
	errs = append(errs, validateBindAddress(m.HealthProbeBindAddress, p.Child("healthProbeBindAddress"))...)
	errs = append(errs, validateLeaderElection(&m.LeaderElection, p.Child("leaderElection"))...)
	if m.CacheSyncPeriod < MinCacheSyncPeriod {
		errs = append(errs, field.Invalid(p.Child("cacheSyncPeriod"), m.CacheSyncPeriod.String(),
			fmt.Sprintf("must be at least %s", MinCacheSyncPeriod)))
	}
	errs = append(errs, validateConcurrency(&m.Concurrency, p.Child("concurrency"))...)
	return errs
}

// validateBindAddress accepts "0" (off), host:port, and empty, which controller-runtime
// treats as its own default; Default never leaves it empty.
func validateBindAddress(addr string, p *field.Path) field.ErrorList {
	if addr == "" || addr == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(p, addr, `must be "0" (off) or host:port, such as ":8443"`)}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return field.ErrorList{field.Invalid(p, addr, "the port must be a number from 0 to 65535")}
	}
	return nil
}

func validateLeaderElection(le *LeaderElection, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if le.ID == "" {
		errs = append(errs, field.Required(p.Child("id"), "the name of the leader election Lease"))
	} else if msgs := validation.IsDNS1123Subdomain(le.ID); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("id"), le.ID, strings.Join(msgs, "; ")))
	}
	if le.Namespace != "" {
		if msgs := validation.IsDNS1123Label(le.Namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("namespace"), le.Namespace, strings.Join(msgs, "; ")))
		}
	}

	positive := true
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"leaseDuration", le.LeaseDuration},
		{"renewDeadline", le.RenewDeadline},
		{"retryPeriod", le.RetryPeriod},
	} {
		if d.value <= 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.value.String(), "must be greater than 0"))
			positive = false
		}
	}
	if !positive {
		return errs
	}
	// The same rules as client-go's leader elector, which would otherwise fail later and
	// less clearly.
	if le.LeaseDuration <= le.RenewDeadline {
		errs = append(errs, field.Invalid(p.Child("leaseDuration"), le.LeaseDuration.String(),
			fmt.Sprintf("must be greater than renewDeadline (%s)", le.RenewDeadline)))
	}
	if minimum := time.Duration(leaderelection.JitterFactor * float64(le.RetryPeriod)); le.RenewDeadline <= minimum {
		errs = append(errs, field.Invalid(p.Child("renewDeadline"), le.RenewDeadline.String(),
			fmt.Sprintf("must be greater than %v × retryPeriod (%s)", leaderelection.JitterFactor, minimum)))
	}
	return errs
}

func validateConcurrency(c *Concurrency, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Default < 1 {
		errs = append(errs, field.Invalid(p.Child("default"), c.Default, "must be at least 1"))
	}
	for _, kind := range sortedKeys(c.PerKind) {
		kp := p.Child("perKind").Key(kind)
		if !kindPattern.MatchString(kind) {
			errs = append(errs, field.Invalid(kp, kind, "must be an add-on kind, such as CoreDNS"))
		}
		if n := c.PerKind[kind]; n < 1 {
			errs = append(errs, field.Invalid(kp, n, "must be at least 1"))
		}
	}
	return errs
}

func validateChannels(c *Channels, p *field.Path) field.ErrorList {
	switch c.Source {
	case ChannelSourceBuiltin:
		if c.Directory != "" {
			return field.ErrorList{field.Forbidden(p.Child("directory"), "must be empty when source is Builtin")}
		}
	case ChannelSourceDirectory:
		if c.Directory == "" {
			return field.ErrorList{field.Required(p.Child("directory"), "must be set when source is Directory")}
		}
	default:
		return field.ErrorList{field.NotSupported(p.Child("source"), c.Source,
			[]ChannelSource{ChannelSourceBuiltin, ChannelSourceDirectory})}
	}
	return nil
}

func validateRuntime(r *Runtime, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch ch := r.DefaultChannel; {
	case ch == "":
		errs = append(errs, field.Required(p.Child("defaultChannel"), "the channel for add-ons that name neither a version nor a channel"))
	case !channelPattern.MatchString(ch) || strings.Contains(ch, "..") || ch == "packages":
		errs = append(errs, field.Invalid(p.Child("defaultChannel"), ch,
			"must be a channel name: letters, digits, '.', '_', '+' or '-', at most 63 characters"))
	}

	if r.RegistryMirror != "" && !mirrorPattern.MatchString(r.RegistryMirror) {
		errs = append(errs, field.Invalid(p.Child("imageRegistry", "mirror"), r.RegistryMirror,
			"must be a registry host with an optional port and path, such as registry.example.com/mirror, "+
				"without a scheme, tag, digest or trailing slash"))
	}

	seen := sets.New[string]()
	for i, kind := range r.PausedKinds {
		ip := p.Child("pausedKinds").Index(i)
		switch {
		case !kindPattern.MatchString(kind):
			errs = append(errs, field.Invalid(ip, kind, "must be an add-on kind, such as CoreDNS"))
		case seen.Has(kind):
			errs = append(errs, field.Duplicate(ip, kind))
		}
		seen.Insert(kind)
	}

	errs = append(errs, validateTenancy(r, p.Child("tenancy"))...)

	switch d := r.ResyncInterval; {
	case d < 0:
		errs = append(errs, field.Invalid(p.Child("resyncInterval"), d.String(), "must not be negative; 0 turns the resync off"))
	case d > 0 && d < MinResyncInterval:
		errs = append(errs, field.Invalid(p.Child("resyncInterval"), d.String(),
			fmt.Sprintf("must be 0 (off) or at least %s", MinResyncInterval)))
	}

	if !slices.Contains(LogLevels, r.LogLevel) {
		errs = append(errs, field.NotSupported(p.Child("logLevel"), r.LogLevel, LogLevels))
	}
	return errs
}

// sortedKeys returns the keys of m in order, so that errors come in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// validateTenancy checks that the trusted namespaces are namespace names, without
// duplicates, and that the default ServiceAccount is a ServiceAccount name.
func validateTenancy(r *Runtime, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, ns := range r.TrustedNamespaces {
		ip := p.Child("trustedNamespaces").Index(i)
		switch {
		case ns == TrustAllNamespaces && len(r.TrustedNamespaces) > 1:
			errs = append(errs, field.Invalid(ip, ns, `"*" trusts every namespace and must be the only entry`))
		case ns == TrustAllNamespaces:
		case len(validation.IsDNS1123Label(ns)) > 0:
			errs = append(errs, field.Invalid(ip, ns, `must be a namespace name, or "*" for every namespace`))
		case seen.Has(ns):
			errs = append(errs, field.Duplicate(ip, ns))
		}
		seen.Insert(ns)
	}
	if sa := r.DefaultServiceAccountName; sa != "" && len(validation.IsDNS1123Subdomain(sa)) > 0 {
		errs = append(errs, field.Invalid(p.Child("defaultServiceAccountName"), sa, "must be a ServiceAccount name"))
	}
	return errs
}
