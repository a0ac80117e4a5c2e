package sources

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestAddressPolicy(t *testing.T) {
	cases := []struct {
		addr          string
		allowLoopback bool
		wantRule      string // "" when allowed
	}{
		{addr: "8.8.8.8"},
		{addr: "10.0.0.1"},
		{addr: "192.168.1.10"},
		{addr: "172.16.0.1"},
		{addr: "100.64.0.1"},
		{addr: "2001:db8::1"},
		{addr: "fd00::1"},
		{addr: "127.0.0.1", wantRule: "loopback"},
		{addr: "127.1.2.3", wantRule: "loopback"},
		{addr: "::1", wantRule: "loopback"},
		{addr: "::ffff:127.0.0.1", wantRule: "loopback"},
		{addr: "127.0.0.1", allowLoopback: true},
		{addr: "::1", allowLoopback: true},
		{addr: "169.254.169.254", wantRule: "cloud metadata"},
		{addr: "169.254.169.254", allowLoopback: true, wantRule: "cloud metadata"},
		{addr: "169.254.170.2", wantRule: "cloud metadata"},
		{addr: "fd00:ec2::254", allowLoopback: true, wantRule: "cloud metadata"},
		{addr: "100.100.100.200", wantRule: "cloud metadata"},
		{addr: "168.63.129.16", wantRule: "cloud metadata"},
		{addr: "::ffff:169.254.169.254", wantRule: "cloud metadata"},
		{addr: "64:ff9b::a9fe:a9fe", wantRule: "cloud metadata"},
		{addr: "64:ff9b::808:808"},
		{addr: "169.254.1.1", allowLoopback: true, wantRule: "link-local"},
		{addr: "fe80::1", allowLoopback: true, wantRule: "link-local"},
		{addr: "fe80::1%eth0", wantRule: "link-local"},
		{addr: "febf::1", wantRule: "link-local"},
		{addr: "0.0.0.0", allowLoopback: true, wantRule: "unspecified"},
		{addr: "0.1.2.3", wantRule: "unspecified"},
		{addr: "::", allowLoopback: true, wantRule: "unspecified"},
		{addr: "224.0.0.1", wantRule: "multicast"},
		{addr: "239.255.255.250", wantRule: "multicast"},
		{addr: "ff02::1", allowLoopback: true, wantRule: "multicast"},
		{addr: "255.255.255.255", wantRule: "broadcast"},
	}
	for _, tc := range cases {
		name := tc.addr
		if tc.allowLoopback {
			name += " with insecureLoopback"
		}
		t.Run(name, func(t *testing.T) {
			err := addressPolicy{allowLoopback: tc.allowLoopback}.check("", netip.MustParseAddr(tc.addr))
			switch {
			case tc.wantRule == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantRule != "" && err == nil:
				t.Fatalf("allowed, want refused as %s", tc.wantRule)
			case tc.wantRule != "" && err.rule.name != tc.wantRule:
				t.Fatalf("refused as %s, want %s: %v", err.rule.name, tc.wantRule, err)
			}
		})
	}
}

func TestAddressErrorMessage(t *testing.T) {
	cases := []struct {
		host, addr string
		want       string
	}{
		{addr: "127.0.0.1", want: "refusing to connect to 127.0.0.1: loopback addresses (127.0.0.0/8, ::1) are refused unless the AddonSource sets insecureLoopback"},
		{host: "localhost", addr: "::1", want: "refusing to connect to ::1 (localhost): loopback addresses (127.0.0.0/8, ::1) are refused unless the AddonSource sets insecureLoopback"},
		{host: "metadata.google.internal", addr: "169.254.169.254",
			want: "refusing to connect to 169.254.169.254 (metadata.google.internal): cloud metadata addresses (169.254.169.254, 169.254.170.2, fd00:ec2::254, 100.100.100.200, 168.63.129.16) are never fetched from"},
		{addr: "fe80::1", want: "refusing to connect to fe80::1: link-local addresses (169.254.0.0/16, fe80::/10) are never fetched from"},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			err := addressPolicy{}.check(tc.host, netip.MustParseAddr(tc.addr))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v\nwant    %s", err, tc.want)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{in: "https://host/c.tar.gz", want: "https://host/c.tar.gz"},
		{in: "https://user:s3cret@host/c.tar.gz", want: "https://REDACTED@host/c.tar.gz"},
		{in: "https://ghp_t0ken@github.com/org/repo.git", want: "https://REDACTED@github.com/org/repo.git"},
		{in: "HTTP://user:s3cret@127.0.0.1:8080/x", want: "HTTP://REDACTED@127.0.0.1:8080/x"},
		{in: "https://u:p@ss@host/x", want: "https://REDACTED@host/x"},
		{in: "https://host/pkg@v1.tar.gz", want: "https://host/pkg@v1.tar.gz"},
		{in: "https://user:s3cret@host:bad port/x", want: "https://REDACTED@host:bad port/x"},
		{in: "ssh://git@host/repo.git", want: "ssh://git@host/repo.git"},
		{in: "ssh://git:s3cret@host/repo.git", want: "ssh://REDACTED@host/repo.git"},
		{in: "git@github.com:org/repo.git", want: "git@github.com:org/repo.git"},
		{in: "user:s3cret@host:org/repo.git", want: "REDACTED@host:org/repo.git"},
		{in: "oci://user:s3cret@registry.example.com/b:v1", want: "oci://REDACTED@registry.example.com/b:v1"},
		{in: "user:s3cret@registry.example.com/b:v1", want: "REDACTED@registry.example.com/b:v1"},
		{in: "registry.example.com/b@sha256:abc", want: "registry.example.com/b@sha256:abc"},
		{in: "busybox@sha256:abc", want: "busybox@sha256:abc"},
		{in: "/srv/channels", want: "/srv/channels"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := redactURL(tc.in); got != tc.want {
				t.Fatalf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestDialConnectsToTheCheckedAddress: the filter resolves a name once and connects to the
// address it checked, never to the name (which could resolve elsewhere the next time: DNS
// rebinding), and refuses a name any of whose addresses is refused.
func TestDialConnectsToTheCheckedAddress(t *testing.T) {
	answers := map[string][]netip.Addr{
		"public.example":   {netip.MustParseAddr("203.0.113.7")},
		"mixed.example":    {netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("169.254.169.254")},
		"loopback.example": {netip.MustParseAddr("127.0.0.1")},
	}
	lookups := 0
	lookupNetIP = func(_ context.Context, _, host string) ([]netip.Addr, error) {
		lookups++
		return answers[host], nil
	}
	t.Cleanup(func() { lookupNetIP = net.DefaultResolver.LookupNetIP })
	cases := []struct {
		addr      string
		wantDial  string
		wantError string
	}{
		{addr: "public.example:443", wantDial: "203.0.113.7:443"},
		{addr: "mixed.example:443", wantError: "refusing to connect to 169.254.169.254 (mixed.example): cloud metadata addresses"},
		{addr: "loopback.example:443", wantError: "refusing to connect to 127.0.0.1 (loopback.example): loopback addresses"},
		{addr: "[fe80::1%eth0]:443", wantError: "refusing to connect to fe80::1: link-local addresses"},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			lookups = 0
			var dialled []string
			next := func(_ context.Context, _, addr string) (net.Conn, error) {
				dialled = append(dialled, addr)
				return nil, errors.New("not dialled in this test")
			}
			_, err := addressPolicy{}.dial(context.Background(), next, "tcp", tc.addr)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) || len(dialled) != 0 {
					t.Fatalf("error = %v, dialled %v; want %q and no dial", err, dialled, tc.wantError)
				}
				return
			}
			if len(dialled) != 1 || dialled[0] != tc.wantDial || lookups != 1 {
				t.Fatalf("dialled %v after %d lookups, want %s after one", dialled, lookups, tc.wantDial)
			}
		})
	}
}
