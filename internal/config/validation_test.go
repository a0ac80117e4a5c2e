package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Configuration)
		want   []string
	}{
		{name: "defaults", mutate: func(*Configuration) {}},
		{
			name: "every setting valid and set",
			mutate: func(c *Configuration) {
				c.Manager.Metrics.BindAddress = "127.0.0.1:8443"
				c.Manager.HealthProbeBindAddress = "[::1]:8081"
				c.Manager.LeaderElection = LeaderElection{Enabled: true, ID: "kaddons-leader", Namespace: "kaddons-system",
					LeaseDuration: time.Minute, RenewDeadline: 30 * time.Second, RetryPeriod: 10 * time.Second}
				c.Manager.Concurrency.PerKind = map[string]int32{"CoreDNS": 1, "NodeLocalDNS": 8}
				c.Channels = Channels{Source: ChannelSourceDirectory, Directory: "/channels"}
				c.Runtime = Runtime{DefaultChannel: "rapid", RegistryMirror: "localhost:5000/mirror/k8s-io",
					PausedKinds: []string{"Dashboard", "MetricsServer"}, ResyncInterval: 10 * time.Second, LogLevel: LogLevelError}
			},
		},
		{name: "metrics off", mutate: func(c *Configuration) { c.Manager.Metrics.BindAddress = "0" }},
		{
			name: "tenancy set",
			mutate: func(c *Configuration) {
				c.Runtime.TrustedNamespaces = []string{"kube-system", "platform"}
				c.Runtime.DefaultServiceAccountName = "kaddons-tenant"
			},
		},
		{name: "no namespace trusted", mutate: func(c *Configuration) { c.Runtime.TrustedNamespaces = []string{} }},
		{name: "every namespace trusted", mutate: func(c *Configuration) { c.Runtime.TrustedNamespaces = []string{TrustAllNamespaces} }},
		{
			name: "tenancy invalid",
			mutate: func(c *Configuration) {
				c.Runtime.TrustedNamespaces = []string{"kube-system", "Team_A", "kube-system", "*"}
				c.Runtime.DefaultServiceAccountName = "Tenant SA"
			},
			want: []string{
				`runtime.tenancy.trustedNamespaces[1]: Invalid value: "Team_A": must be a namespace name, or "*" for every namespace`,
				`runtime.tenancy.trustedNamespaces[2]: Duplicate value: "kube-system"`,
				`runtime.tenancy.trustedNamespaces[3]: Invalid value: "*": "*" trusts every namespace and must be the only entry`,
				`runtime.tenancy.defaultServiceAccountName: Invalid value: "Tenant SA": must be a ServiceAccount name`,
			},
		},
		{
			name:   "metrics address without a port",
			mutate: func(c *Configuration) { c.Manager.Metrics.BindAddress = "8443" },
			want:   []string{`manager.metrics.bindAddress: Invalid value: "8443": must be "0" (off) or host:port, such as ":8443"`},
		},
		{
			name:   "probe port out of range",
			mutate: func(c *Configuration) { c.Manager.HealthProbeBindAddress = ":80810" },
			want:   []string{`manager.healthProbeBindAddress: Invalid value: ":80810": the port must be a number from 0 to 65535`},
		},
		{
			name:   "lease shorter than the renew deadline",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.LeaseDuration = time.Second },
			want:   []string{`manager.leaderElection.leaseDuration: Invalid value: "1s": must be greater than renewDeadline (10s)`},
		},
		{
			name:   "renew deadline within the jittered retry period",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.RetryPeriod = 9 * time.Second },
			want:   []string{`manager.leaderElection.renewDeadline: Invalid value: "10s": must be greater than 1.2 × retryPeriod (10.8s)`},
		},
		{
			name:   "negative timing",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.RetryPeriod = -time.Second },
			want:   []string{`manager.leaderElection.retryPeriod: Invalid value: "-1s": must be greater than 0`},
		},
		{
			name:   "lease name not a DNS subdomain",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.ID = "Kaddons_Leader" },
			want: []string{`manager.leaderElection.id: Invalid value: "Kaddons_Leader": a lowercase RFC 1123 subdomain must consist of ` +
				`lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name:   "lease name empty",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.ID = "" },
			want:   []string{`manager.leaderElection.id: Required value: the name of the leader election Lease`},
		},
		{
			name:   "lease namespace not a DNS label",
			mutate: func(c *Configuration) { c.Manager.LeaderElection.Namespace = "kaddons.system" },
			want:   []string{`manager.leaderElection.namespace: Invalid value: "kaddons.system": must not contain dots`},
		},
		{
			name:   "cache sync period too short",
			mutate: func(c *Configuration) { c.Manager.CacheSyncPeriod = 30 * time.Second },
			want:   []string{`manager.cacheSyncPeriod: Invalid value: "30s": must be at least 1m0s`},
		},
		{
			name:   "concurrency zero",
			mutate: func(c *Configuration) { c.Manager.Concurrency.Default = 0 },
			want:   []string{`manager.concurrency.default: Invalid value: 0: must be at least 1`},
		},
		{
			name:   "per-kind concurrency: bad kind and bad bound",
			mutate: func(c *Configuration) { c.Manager.Concurrency.PerKind = map[string]int32{"coredns": 1, "CoreDNS": -1} },
			want: []string{
				`manager.concurrency.perKind[CoreDNS]: Invalid value: -1: must be at least 1`,
				`manager.concurrency.perKind[coredns]: Invalid value: "coredns": must be an add-on kind, such as CoreDNS`,
			},
		},
		{
			name:   "unknown channel source",
			mutate: func(c *Configuration) { c.Channels.Source = "Git" },
			want:   []string{`channels.source: Unsupported value: "Git": supported values: "Builtin", "Directory"`},
		},
		{
			name:   "builtin with a directory",
			mutate: func(c *Configuration) { c.Channels.Directory = "/channels" },
			want:   []string{`channels.directory: Forbidden: must be empty when source is Builtin`},
		},
		{
			name:   "directory without a directory",
			mutate: func(c *Configuration) { c.Channels.Source = ChannelSourceDirectory },
			want:   []string{`channels.directory: Required value: must be set when source is Directory`},
		},
		{
			name:   "default channel a path",
			mutate: func(c *Configuration) { c.Runtime.DefaultChannel = "../stable" },
			want: []string{`runtime.defaultChannel: Invalid value: "../stable": must be a channel name: ` +
				`letters, digits, '.', '_', '+' or '-', at most 63 characters`},
		},
		{
			name:   "default channel packages",
			mutate: func(c *Configuration) { c.Runtime.DefaultChannel = "packages" },
			want: []string{`runtime.defaultChannel: Invalid value: "packages": must be a channel name: ` +
				`letters, digits, '.', '_', '+' or '-', at most 63 characters`},
		},
		{
			name:   "default channel empty",
			mutate: func(c *Configuration) { c.Runtime.DefaultChannel = "" },
			want:   []string{`runtime.defaultChannel: Required value: the channel for add-ons that name neither a version nor a channel`},
		},
		{
			name:   "mirror with a scheme",
			mutate: func(c *Configuration) { c.Runtime.RegistryMirror = "https://registry.example.com" },
			want: []string{`runtime.imageRegistry.mirror: Invalid value: "https://registry.example.com": must be a registry host ` +
				`with an optional port and path, such as registry.example.com/mirror, without a scheme, tag, digest or trailing slash`},
		},
		{
			name:   "mirror with a tag",
			mutate: func(c *Configuration) { c.Runtime.RegistryMirror = "registry.example.com/mirror:v1" },
			want: []string{`runtime.imageRegistry.mirror: Invalid value: "registry.example.com/mirror:v1": must be a registry host ` +
				`with an optional port and path, such as registry.example.com/mirror, without a scheme, tag, digest or trailing slash`},
		},
		{
			name:   "mirror with a trailing slash",
			mutate: func(c *Configuration) { c.Runtime.RegistryMirror = "registry.example.com/" },
			want: []string{`runtime.imageRegistry.mirror: Invalid value: "registry.example.com/": must be a registry host ` +
				`with an optional port and path, such as registry.example.com/mirror, without a scheme, tag, digest or trailing slash`},
		},
		{
			name:   "paused kinds: bad and duplicate",
			mutate: func(c *Configuration) { c.Runtime.PausedKinds = []string{"CoreDNS", "core-dns", "CoreDNS"} },
			want: []string{
				`runtime.pausedKinds[1]: Invalid value: "core-dns": must be an add-on kind, such as CoreDNS`,
				`runtime.pausedKinds[2]: Duplicate value: "CoreDNS"`,
			},
		},
		{
			name:   "resync negative",
			mutate: func(c *Configuration) { c.Runtime.ResyncInterval = -time.Minute },
			want:   []string{`runtime.resyncInterval: Invalid value: "-1m0s": must not be negative; 0 turns the resync off`},
		},
		{
			name:   "resync too often",
			mutate: func(c *Configuration) { c.Runtime.ResyncInterval = time.Second },
			want:   []string{`runtime.resyncInterval: Invalid value: "1s": must be 0 (off) or at least 10s`},
		},
		{
			name:   "unknown log level",
			mutate: func(c *Configuration) { c.Runtime.LogLevel = "verbose" },
			want:   []string{`runtime.logLevel: Unsupported value: "verbose": supported values: "error", "info", "debug"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaulted()
			tc.mutate(c)
			errs := Validate(c)
			got := make([]string, 0, len(errs))
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Validate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateKinds(t *testing.T) {
	kinds := []string{"CoreDNS", "Dashboard"}
	for _, tc := range []struct {
		name    string
		perKind map[string]int32
		paused  []string
		want    []string
	}{
		{name: "known kinds", perKind: map[string]int32{"CoreDNS": 1}, paused: []string{"Dashboard"}},
		{
			name:    "unknown kinds",
			perKind: map[string]int32{"CoreDNS": 1, "CoreDns": 2},
			paused:  []string{"Dashboard", "Dashbord"},
			want: []string{
				`manager.concurrency.perKind[CoreDns]: Unsupported value: "CoreDns": supported values: "CoreDNS", "Dashboard"`,
				`runtime.pausedKinds[1]: Unsupported value: "Dashbord": supported values: "CoreDNS", "Dashboard"`,
			},
		},
		{name: "names that are not kinds are left to Validate", perKind: map[string]int32{"core-dns": 1}, paused: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaulted()
			c.Manager.Concurrency.PerKind = tc.perKind
			c.Runtime.PausedKinds = tc.paused
			errs := ValidateKinds(c, kinds)
			got := make([]string, 0, len(errs))
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ValidateKinds() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
