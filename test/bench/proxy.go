package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kaddons/kaddons/internal/loopbackcert"
)

// Request classes the proxy counts. Resource requests use the API server's own verbs;
// everything else (discovery, /version, /openapi) is "discovery".
const (
	verbGet       = "get"
	verbList      = "list"
	verbWatch     = "watch"
	verbCreate    = "create"
	verbUpdate    = "update"
	verbPatch     = "patch"
	verbDelete    = "delete"
	verbDeleteAll = "deletecollection"
	verbDiscovery = "discovery"
)

// tally counts requests by class. Watches are counted when they open; every other
// request is counted once.
type tally struct {
	byVerb map[string]int
	// eventWrites counts the writes to Events (core and events.k8s.io), which are part of
	// the writes but say nothing about the managed objects.
	eventWrites int
}

// newTally returns an empty tally.
func newTally() tally { return tally{byVerb: map[string]int{}} }

// requests returns every non-watch request.
func (t tally) requests() int {
	n := 0
	for v, c := range t.byVerb {
		if v != verbWatch {
			n += c
		}
	}
	return n
}

// writes returns the requests that change state: create, update, patch and delete.
func (t tally) writes() int {
	return t.byVerb[verbCreate] + t.byVerb[verbUpdate] + t.byVerb[verbPatch] + t.byVerb[verbDelete] + t.byVerb[verbDeleteAll]
}

// objectWrites returns the writes that are not Events.
func (t tally) objectWrites() int { return t.writes() - t.eventWrites }

// sub returns t minus an earlier snapshot.
func (t tally) sub(earlier tally) tally {
	out := newTally()
	for v, c := range t.byVerb {
		if d := c - earlier.byVerb[v]; d != 0 {
			out.byVerb[v] = d
		}
	}
	out.eventWrites = t.eventWrites - earlier.eventWrites
	return out
}

// String formats the non-zero counts, e.g. "get=3 patch=1".
func (t tally) String() string {
	var parts []string
	for _, v := range []string{verbDiscovery, verbGet, verbList, verbWatch, verbCreate, verbUpdate, verbPatch, verbDelete, verbDeleteAll} {
		if t.byVerb[v] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", v, t.byVerb[v]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// countingProxy is a loopback reverse proxy to the API server that counts what passes
// through it. The operator under test talks to it over TLS, with HTTP/2, as it talks to
// an API server in a cluster: over plain HTTP, client-go would fall back to Go's default
// transport, which asks for gzip whatever the client's DisableCompression and keeps two
// idle connections, and would measure a client no cluster runs. The proxy forwards with
// the credentials it is given.
type countingProxy struct {
	server   *http.Server
	listener net.Listener
	handler  http.Handler
	info     *request.RequestInfoFactory

	// caData is the PEM certificate the proxy serves, which the operator's kubeconfig
	// trusts.
	caData []byte

	mu sync.Mutex
	// trace, when set, gets one line per request.
	trace       io.Writer
	started     time.Time
	counts      tally
	writeLog    []string
	inflight    int
	lastActive  time.Time
	openWatches int
	watchedPath map[string]bool
}

// newCountingProxy starts a proxy on 127.0.0.1 in front of the API server of cfg, and
// forwards with cfg's credentials.
func newCountingProxy(cfg *rest.Config) (*countingProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server address %q: %w", cfg.Host, err)
	}
	// Pass Accept-Encoding through as the operator sent it: without this the proxy's
	// transport would ask for gzip itself whenever the operator did not, and unzip it.
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the proxy's transport: %w", err)
	}
	certPEM, keyPEM, err := loopbackcert.New()
	if err != nil {
		return nil, fmt.Errorf("making the proxy's certificate: %w", err)
	}
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the proxy's certificate: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the proxy: %w", err)
	}
	p := &countingProxy{
		listener: ln,
		caData:   certPEM,
		info: &request.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		counts:      newTally(),
		started:     time.Now(),
		lastActive:  time.Now(),
		watchedPath: map[string]bool{},
	}
	p.handler = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: transport,
		// No FlushInterval: ReverseProxy passes a response of unknown length (a watch
		// stream) on at every write anyway, and writes the others whole.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}}
	// ServeTLS offers HTTP/2 as well as HTTP/1.1.
	go func() { _ = p.server.ServeTLS(ln, "", "") }()
	return p, nil
}

// traceTo logs every request to w from now on.
func (p *countingProxy) traceTo(w io.Writer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trace = w
}

// URL returns the proxy's address.
func (p *countingProxy) URL() string { return "https://" + p.listener.Addr().String() }

// CAData returns the PEM certificate a client of the proxy trusts.
func (p *countingProxy) CAData() []byte { return p.caData }

// Close stops the proxy and drops the open watches.
func (p *countingProxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.server.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return p.server.Close()
}

// ServeHTTP counts the request and forwards it.
func (p *countingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	verb, isEvent := p.classify(r)
	p.begin(verb, isEvent, r)
	defer p.end(verb)
	p.handler.ServeHTTP(w, r)
}

// classify returns the request's class and whether it writes an Event.
func (p *countingProxy) classify(r *http.Request) (string, bool) {
	info, err := p.info.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return verbDiscovery, false
	}
	return info.Verb, info.Resource == "events"
}

// begin counts a request as it arrives.
func (p *countingProxy) begin(verb string, isEvent bool, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.byVerb[verb]++
	if p.trace != nil {
		_, _ = fmt.Fprintf(p.trace, "%9.3f %-16s %s %s\n", time.Since(p.started).Seconds(), verb, r.Method, r.URL.RequestURI())
	}
	if verb == verbWatch {
		p.openWatches++
		p.watchedPath[r.URL.Path] = true
		return
	}
	p.inflight++
	p.lastActive = time.Now()
	switch verb {
	case verbCreate, verbUpdate, verbPatch, verbDelete, verbDeleteAll:
		if isEvent {
			p.counts.eventWrites++
		}
		p.writeLog = append(p.writeLog, r.Method+" "+r.URL.Path)
	}
}

// end notes that a request finished.
func (p *countingProxy) end(verb string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if verb == verbWatch {
		p.openWatches--
		return
	}
	p.inflight--
	p.lastActive = time.Now()
}

// mark is a point in the proxy's history.
type mark struct {
	counts tally
	writes int
}

// mark returns the counts so far.
func (p *countingProxy) mark() mark {
	p.mu.Lock()
	defer p.mu.Unlock()
	return mark{counts: p.counts.sub(newTally()), writes: len(p.writeLog)}
}

// since returns what was counted after m, and the writes in order.
func (p *countingProxy) since(m mark) (tally, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts.sub(m.counts), append([]string(nil), p.writeLog[m.writes:]...)
}

// watches returns how many watch streams are open.
func (p *countingProxy) watches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.openWatches
}

// watching reports whether a watch was opened on path.
func (p *countingProxy) watching(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watchedPath[path]
}

// idleFor returns how long no request has been in flight or started.
func (p *countingProxy) idleFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight > 0 {
		return 0
	}
	return time.Since(p.lastActive)
}

// waitQuiet waits until the operator has sent no request for quiet.
func (p *countingProxy) waitQuiet(ctx context.Context, quiet time.Duration) error {
	for {
		idle := p.idleFor()
		if idle >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the operator to go quiet: %w", ctx.Err())
		case <-time.After(quiet - idle):
		}
	}
}
