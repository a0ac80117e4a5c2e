package sources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	gittransport "github.com/go-git/go-git/v5/plumbing/transport"
	gitclient "github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/net/proxy"
)

// addressRange is a named set of addresses the address filter refuses.
type addressRange struct {
	// name says what the addresses are, in an error.
	name     string
	prefixes []netip.Prefix
}

func (r *addressRange) contains(ip netip.Addr) bool {
	for _, p := range r.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// String lists the range's prefixes, as an error shows them.
func (r *addressRange) String() string {
	list := make([]string, 0, len(r.prefixes))
	for _, p := range r.prefixes {
		if p.IsSingleIP() {
			list = append(list, p.Addr().String())
		} else {
			list = append(list, p.String())
		}
	}
	return strings.Join(list, ", ")
}

func mustPrefixes(list ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, p := range list {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// loopbackRange is refused unless the request allows it (Auth.InsecureLoopback): with the
// manager on the host network it is the node's own loopback, where the kubelet, etcd and
// other node-local services listen.
// loopbackName names the loopback range in messages, and the SSH guard's host that
// allows it.
const loopbackName = "loopback"

var loopbackRange = &addressRange{name: loopbackName, prefixes: mustPrefixes("127.0.0.0/8", "::1/128")}

// refusedRanges are never connected to, whatever the request says. The first that holds
// an address names it in the error, so the specific ranges come before the broad ones.
var refusedRanges = []*addressRange{
	{name: "unspecified", prefixes: mustPrefixes("0.0.0.0/8", "::/128")},
	{name: "cloud metadata", prefixes: mustPrefixes(
		"169.254.169.254/32", // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
		"169.254.170.2/32",   // AWS ECS task credentials
		"fd00:ec2::254/128",  // AWS over IPv6
		"100.100.100.200/32", // Alibaba Cloud
		"168.63.129.16/32",   // Azure's wire server
	)},
	{name: "link-local", prefixes: mustPrefixes("169.254.0.0/16", "fe80::/10")},
	{name: "multicast", prefixes: mustPrefixes("224.0.0.0/4", "ff00::/8")},
	{name: "broadcast", prefixes: mustPrefixes("255.255.255.255/32")},
}

// nat64Prefix is the well-known NAT64 prefix: an address in it reaches the IPv4 address in
// its last 32 bits, which is checked as well.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// addressError is a connection the address filter refused.
type addressError struct {
	addr netip.Addr
	host string // the name that resolved to addr; empty when the URL wrote the address
	rule *addressRange
}

func (e *addressError) Error() string {
	target := e.addr.String()
	if e.host != "" && e.host != target {
		target += " (" + e.host + ")"
	}
	if e.rule == loopbackRange {
		return fmt.Sprintf("refusing to connect to %s: loopback addresses (%s) are refused unless the AddonSource sets insecureLoopback",
			target, e.rule)
	}
	return fmt.Sprintf("refusing to connect to %s: %s addresses (%s) are never fetched from", target, e.rule.name, e.rule)
}

// addressPolicy says which addresses a fetch may connect to.
type addressPolicy struct {
	// allowLoopback is the request's Auth.InsecureLoopback.
	allowLoopback bool
}

// check returns the error that refuses ip, which host resolved to, or nil.
func (p addressPolicy) check(host string, ip netip.Addr) *addressError {
	ip = ip.WithZone("").Unmap()
	candidates := []netip.Addr{ip}
	if nat64Prefix.Contains(ip) {
		b := ip.As16()
		candidates = append(candidates, netip.AddrFrom4([4]byte(b[12:16])))
	}
	for _, a := range candidates {
		for _, r := range refusedRanges {
			if r.contains(a) {
				return &addressError{addr: ip, host: host, rule: r}
			}
		}
		if !p.allowLoopback && loopbackRange.contains(a) {
			return &addressError{addr: ip, host: host, rule: loopbackRange}
		}
	}
	return nil
}

// dialFunc is the shape of http.Transport's DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dial resolves the host of addr, refuses it when any of its addresses is refused (an
// answer that mixes a public address with a metadata one is an attack, not a fallback),
// and connects through next to the addresses it checked, in turn. The address connected
// to is the one checked, right before the connection: a name that resolves to another
// address the next time (DNS rebinding) cannot slip past.
func (p addressPolicy) dial(ctx context.Context, next dialFunc, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	name := host // what the error shows besides the address
	if _, err := netip.ParseAddr(host); err == nil {
		name = ""
	}
	for _, ip := range ips {
		if err := p.check(name, ip); err != nil {
			return nil, err
		}
	}
	var first error
	for _, ip := range ips {
		conn, err := next(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// lookupNetIP resolves names for the address filter; a test may replace it.
var lookupNetIP = net.DefaultResolver.LookupNetIP

// resolve returns the addresses of host: itself when it is an address.
func resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	ips, err := lookupNetIP(ctx, family, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
	}
	return ips, nil
}

// guard makes t connect only where p allows (https, oci).
func (p addressPolicy) guard(t *http.Transport) {
	guardTransport(t, func(context.Context) (addressPolicy, bool) { return p, true })
}

// guardTransport makes t connect through the address filter: policyOf returns the policy
// of a request's or a dial's context, or false for a connection the filter leaves alone.
// The proxy t is configured with (HTTPS_PROXY and the like) is the operator's choice, not
// a source's, so it is dialled unchecked; a proxy resolves the names it is sent itself,
// so behind one only an address the URL writes is checked, before the request goes out.
func guardTransport(t *http.Transport, policyOf func(context.Context) (addressPolicy, bool)) {
	next := t.DialContext
	if next == nil {
		next = (&net.Dialer{}).DialContext
	}
	var proxies sync.Map // host:port of the proxies t's Proxy chose
	if choose := t.Proxy; choose != nil {
		t.Proxy = func(r *http.Request) (*url.URL, error) {
			u, err := choose(r)
			if u == nil || err != nil {
				return u, err
			}
			if p, ok := policyOf(r.Context()); ok {
				if ip, perr := netip.ParseAddr(r.URL.Hostname()); perr == nil {
					if aerr := p.check("", ip); aerr != nil {
						return nil, aerr
					}
				}
			}
			proxies.Store(proxyAddr(u), true)
			return u, nil
		}
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		p, ok := policyOf(ctx)
		if _, proxied := proxies.Load(addr); !ok || proxied {
			return next(ctx, network, addr)
		}
		return p.dial(ctx, next, network, addr)
	}
}

// proxyAddr is the host:port net/http dials for the proxy u.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{schemeHTTP: "80", schemeHTTPS: "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// gitFetchKey is the context key of a git fetch's connection settings.
type gitFetchKey struct{}

// gitFetch is what the connections of one git fetch obey.
type gitFetch struct {
	policy addressPolicy
	// read caps the bytes read from the server over every connection of the fetch.
	read *byteBudget
}

func withGitFetch(ctx context.Context, g *gitFetch) context.Context {
	return context.WithValue(ctx, gitFetchKey{}, g)
}

func gitFetchOf(ctx context.Context) (*gitFetch, bool) {
	g, ok := ctx.Value(gitFetchKey{}).(*gitFetch)
	return g, ok
}

// gitTransport is go-git's HTTP transport in every process that imports this package:
// go-git v5 takes its HTTP client from a process-wide table (client.InstallProtocol), not
// from a fetch's options, so a fetch's settings travel in its context. A connection for a
// fetch of this package (its context carries a gitFetch) goes through the address filter
// and counts its bytes; any other is made as go-git's default client makes it.
// Connections are not kept alive: one kept from a fetch would serve another fetch of the
// same host under the first one's policy and count.
var gitTransport = newGitTransport()

func newGitTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	guardTransport(t, func(ctx context.Context) (addressPolicy, bool) {
		g, ok := gitFetchOf(ctx)
		if !ok {
			return addressPolicy{}, false
		}
		return g.policy, true
	})
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if g, ok := gitFetchOf(ctx); ok && err == nil {
			return &countedConn{Conn: conn, budget: g.read}, nil
		}
		return conn, err
	}
	return t
}

// gitRedirectError is a redirect a git fetch refused. go-git follows the redirect of the
// first request (the ref listing) to any host of the same scheme, and the address filter
// would only see where it leads once it is dialled; a git source names its server.
type gitRedirectError struct{ to string }

func (e *gitRedirectError) Error() string {
	return "the git server redirects to " + e.to + "; a git source does not follow redirects: set its url to where the repository is"
}

// checkGitRedirect refuses every redirect of a git fetch of this package; others get
// net/http's default rule (at most 10).
func checkGitRedirect(req *http.Request, via []*http.Request) error {
	if _, ok := gitFetchOf(req.Context()); ok {
		return &gitRedirectError{to: redactURL(req.URL.String())}
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// sshGuardScheme is the scheme of the proxy URL a git fetch over SSH names. go-git's SSH
// transport takes no dialer, but it dials through the golang.org/x/net/proxy dialer of
// the scheme of its ProxyOptions' URL, which this package registers: the dialer checks
// the addresses with the policy the URL's host names, then dials as go-git would (through
// ALL_PROXY when set, else directly).
const sshGuardScheme = "kaddons-address-filter"

// sshProxyOptions are the ProxyOptions of a git fetch over SSH under p.
func sshProxyOptions(p addressPolicy) gittransport.ProxyOptions {
	host := "default"
	if p.allowLoopback {
		host = loopbackName
	}
	return gittransport.ProxyOptions{URL: sshGuardScheme + "://" + host}
}

// sshGuard is the proxy.Dialer of sshGuardScheme.
type sshGuard struct{ policy addressPolicy }

func (g sshGuard) Dial(network, addr string) (net.Conn, error) {
	return g.DialContext(context.Background(), network, addr)
}

func (g sshGuard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.policy.dial(ctx, proxy.Dial, network, addr)
}

func init() {
	c := githttp.NewClient(&http.Client{Transport: gitTransport, CheckRedirect: checkGitRedirect})
	gitclient.InstallProtocol(schemeHTTP, c)
	gitclient.InstallProtocol(schemeHTTPS, c)
	proxy.RegisterDialerType(sshGuardScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		return sshGuard{policy: addressPolicy{allowLoopback: u.Host == loopbackName}}, nil
	})
}

// byteBudget counts bytes against a cap; past it, every count fails with err.
type byteBudget struct {
	max   int64
	count atomic.Int64
	err   *Error
}

func newByteBudget(maxBytes int64, err *Error) *byteBudget {
	return &byteBudget{max: maxBytes, err: err}
}

// add counts n bytes and fails once the total is over the cap.
func (b *byteBudget) add(n int64) error {
	if b.count.Add(n) > b.max {
		return b.err
	}
	return nil
}

// exceeded reports whether more than the cap was counted.
func (b *byteBudget) exceeded() bool { return b.count.Load() > b.max }

// countedConn counts the bytes read from a connection; a read past the budget fails.
type countedConn struct {
	net.Conn
	budget *byteBudget
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if berr := c.budget.add(int64(n)); berr != nil {
			return n, berr
		}
	}
	return n, err
}
