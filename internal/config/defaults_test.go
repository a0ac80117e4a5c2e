package config

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

// defaulted returns the configuration that an empty file loads as.
func defaulted() *Configuration {
	return &Configuration{
		Manager: Manager{
			Metrics:                Metrics{BindAddress: "0", Secure: ptr.To(true)},
			HealthProbeBindAddress: ":8081",
			LeaderElection: LeaderElection{
				ID:            "kaddons.addons.kaddons.dev",
				LeaseDuration: 15 * time.Second,
				RenewDeadline: 10 * time.Second,
				RetryPeriod:   2 * time.Second,
			},
			CacheSyncPeriod: 10 * time.Hour,
			Concurrency:     Concurrency{Default: 4},
		},
		Channels: Channels{Source: ChannelSourceBuiltin},
		Runtime:  Runtime{DefaultChannel: "stable", LogLevel: LogLevelInfo},
	}
}

func TestDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   func(*Configuration)
		want func(*Configuration) // nil: the same as in
	}{
		{name: "everything unset", in: func(*Configuration) {}},
		{
			name: "set values are kept",
			in: func(c *Configuration) {
				c.Manager.Metrics.BindAddress = ":8443"
				c.Manager.HealthProbeBindAddress = "0"
				c.Manager.LeaderElection = LeaderElection{Enabled: true, ID: "x", Namespace: "ns",
					LeaseDuration: time.Minute, RenewDeadline: 30 * time.Second, RetryPeriod: 10 * time.Second}
				c.Manager.CacheSyncPeriod = time.Hour
				c.Manager.Concurrency = Concurrency{Default: 1, PerKind: map[string]int32{"CoreDNS": 2}}
				c.Runtime = Runtime{DefaultChannel: "rapid", RegistryMirror: "m.example.com", PausedKinds: []string{"CoreDNS"},
					ResyncInterval: time.Minute, LogLevel: LogLevelDebug}
			},
		},
		{name: "secure false is kept", in: func(c *Configuration) { c.Manager.Metrics.Secure = ptr.To(false) }},
		{name: "only some lease timings set", in: func(c *Configuration) { c.Manager.LeaderElection.RenewDeadline = 12 * time.Second }},
		{
			name: "an explicit source is kept",
			in:   func(c *Configuration) { c.Channels = Channels{Source: ChannelSourceBuiltin, Directory: "/channels"} },
		},
		{
			name: "a directory without a source means Directory",
			in:   func(c *Configuration) { c.Channels.Directory = "/channels" },
			want: func(c *Configuration) { c.Channels = Channels{Source: ChannelSourceDirectory, Directory: "/channels"} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := &Configuration{}
			tc.in(got)
			Default(got)
			want := defaulted()
			if tc.want == nil {
				tc.want = tc.in
			}
			tc.want(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Default() mismatch (-want +got):\n%s", diff)
			}
			again := got.DeepCopy()
			Default(again)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("a second Default() changed the configuration (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDefaultIsValid(t *testing.T) {
	c := &Configuration{}
	Default(c)
	if errs := Validate(c); len(errs) > 0 {
		t.Fatalf("Validate(defaults) = %v, want no errors", errs)
	}
}

func TestConcurrencyFor(t *testing.T) {
	c := &Configuration{Manager: Manager{Concurrency: Concurrency{Default: 2, PerKind: map[string]int32{"CoreDNS": 7}}}}
	for _, tc := range []struct {
		name string
		c    *Configuration
		kind string
		want int
	}{
		{name: "a kind with its own bound", c: c, kind: "CoreDNS", want: 7},
		{name: "another kind gets the default", c: c, kind: "Dashboard", want: 2},
		{name: "without defaults", c: &Configuration{}, kind: "CoreDNS", want: DefaultConcurrency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.ConcurrencyFor(tc.kind); got != tc.want {
				t.Errorf("ConcurrencyFor(%q) = %d, want %d", tc.kind, got, tc.want)
			}
		})
	}
}

func TestDeepCopy(t *testing.T) {
	c := defaulted()
	c.Manager.Concurrency.PerKind = map[string]int32{"CoreDNS": 1}
	c.Runtime.PausedKinds = []string{"CoreDNS"}
	cp := c.DeepCopy()
	*cp.Manager.Metrics.Secure = false
	cp.Manager.Concurrency.PerKind["CoreDNS"] = 9
	cp.Runtime.PausedKinds[0] = "Dashboard"
	if diff := cmp.Diff(func() *Configuration {
		w := defaulted()
		w.Manager.Concurrency.PerKind = map[string]int32{"CoreDNS": 1}
		w.Runtime.PausedKinds = []string{"CoreDNS"}
		return w
	}(), c); diff != "" {
		t.Errorf("changing the copy changed the original (-want +got):\n%s", diff)
	}
}

func TestTrusted(t *testing.T) {
	for _, tc := range []struct {
		name              string
		trusted           []string
		operatorNamespace string
		want              []string
	}{
		{name: "unset", operatorNamespace: "kaddons-system", want: []string{"kube-system", "kaddons-system"}},
		{name: "unset, operator in kube-system", operatorNamespace: "kube-system", want: []string{"kube-system"}},
		{name: "empty trusts none", trusted: []string{}, operatorNamespace: "kaddons-system", want: []string{}},
		{name: "set", trusted: []string{"platform"}, operatorNamespace: "kaddons-system", want: []string{"platform"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Runtime{TrustedNamespaces: tc.trusted}
			if got := r.Trusted(tc.operatorNamespace); !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("Trusted(%q) = %#v, want %#v", tc.operatorNamespace, got, tc.want)
			}
		})
	}
}
