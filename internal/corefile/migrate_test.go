package corefile

import (
	"errors"
	"strings"
	"testing"
)

// custom is a Corefile as an admin edits kubeadm's: an extra hosts block in the root
// server and an extra server block.
const custom = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    hosts {
       10.0.0.1 example.internal
       fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
example.internal:53 {
    forward . 10.0.0.53
}
`

func TestMigrate(t *testing.T) {
	for _, tc := range []struct {
		name, corefile, from, to string
		downgrade                bool
		wantBlocked              string
		wantFrom                 string
		wantLibraryError         bool
		wantKept                 []string
	}{
		{name: "same version", corefile: custom, from: "1.12.1", to: "1.12.1", wantKept: []string{"hosts {", "example.internal:53"}},
		{name: "unknown running version", corefile: custom, from: "", to: "1.12.1", wantKept: []string{"hosts {"}},
		{name: "up", corefile: custom, from: "1.11.3", to: "1.12.1", wantKept: []string{"hosts {", "10.0.0.1 example.internal",
			"example.internal:53 {", "forward . 10.0.0.53"}},
		{name: "down, rolling back", corefile: custom, from: "v1.12.1", to: "1.11.3", downgrade: true,
			wantKept: []string{"hosts {", "example.internal:53 {"}},
		{name: "down, adopting", corefile: custom, from: "1.14.6", to: "1.12.1",
			wantBlocked: "the running CoreDNS 1.14.6 is newer; adoption never downgrades it", wantFrom: "1.14.6"},
		{name: "a removed option", corefile: strings.Replace(custom, "ttl 30", "ttl 30\n       upstream", 1), from: "1.6.7", to: "1.12.1",
			wantBlocked: `Option "upstream" in plugin "kubernetes" is removed`, wantFrom: "1.6.7"},
		{name: "a plugin the library does not know", corefile: strings.Replace(custom, "loop\n", "loop\n    myplugin\n", 1),
			from: "1.11.3", to: "1.12.1", wantBlocked: `Plugin "myplugin" is unsupported`, wantFrom: "1.11.3"},
		{name: "same version with a plugin it removed", corefile: strings.Replace(custom, "forward . 10.0.0.53", "proxy . 10.0.0.53", 1),
			from: "1.14.6", to: "1.14.6", wantBlocked: `Plugin "proxy" is unsupported`, wantFrom: "1.14.6"},
		{name: "unknown running version with a plugin it removed", corefile: strings.Replace(custom, "forward . 10.0.0.53", "proxy . 10.0.0.53", 1),
			to: "1.12.1", wantBlocked: `Plugin "proxy" is unsupported`},
		{name: "not a version", corefile: custom, from: "latest", to: "1.12.1", wantBlocked: "unknown version", wantFrom: "latest"},
		{name: "a move the library refuses", corefile: custom, from: "1.12.1", to: "1.99.0",
			wantBlocked: "1.99.0", wantFrom: "1.12.1", wantLibraryError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Migrate(tc.corefile, tc.from, tc.to, tc.downgrade)
			if tc.wantBlocked != "" {
				var failed *MigrationError
				if !errors.As(err, &failed) || got != "" || !strings.Contains(failed.Detail, tc.wantBlocked) ||
					failed.From != tc.wantFrom || failed.To != strings.TrimPrefix(tc.to, "v") {
					t.Fatalf("Migrate = %q, %v; want a MigrationError from %q to %s naming %q", got, err, tc.wantFrom, tc.to, tc.wantBlocked)
				}
				if want := "the existing Corefile cannot be migrated from CoreDNS "; !strings.HasPrefix(err.Error(), want) {
					t.Errorf("Migrate error = %q, want it to start with %q", err, want)
				}
				if (failed.Unwrap() != nil) != tc.wantLibraryError {
					t.Errorf("Migrate error wraps %v; want the library's error: %v", failed.Unwrap(), tc.wantLibraryError)
				}
				return
			}
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			for _, k := range tc.wantKept {
				if !strings.Contains(got, k) {
					t.Errorf("the migrated Corefile lost %q:\n%s", k, got)
				}
			}
		})
	}
}
