//go:build e2e && faults

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// faultProxy is a loopback reverse proxy between one manager and the API server. It
// authenticates upstream with the manager's ServiceAccount token (the manager talks to
// it over plain HTTP, without credentials), records every write that the API server
// accepted, and injects faults on demand: error answers to a share of the requests
// (seeded, so a run can be repeated), severed watches, refused requests that match a
// rule, or no service at all.
type faultProxy struct {
	name     string
	server   *http.Server
	listener net.Listener
	handler  http.Handler
	info     *request.RequestInfoFactory

	mu sync.Mutex
	// writes are the accepted writes (2xx answers), in the order they were answered.
	writes []proxyWrite
	// unsettled are the writes forwarded to the API server that got no answer or a 5xx
	// one: whether they were committed is unknown (etcd may have stored one whose answer
	// was lost when it or the API server went away).
	unsettled []proxyWrite
	// onWrite, when set, is called (without mu) after each accepted write.
	onWrite func(proxyWrite)
	// errorRate is the share of requests answered with 429 or 500 instead of being
	// forwarded; rng decides which.
	errorRate float64
	rng       *rand.Rand
	injected  int
	// refuse, when set, decides per request whether to answer it with a fault instead.
	refuse func(proxyRequest) fault
	// severWatches closes every watch as it opens, after at most severAfter.
	severWatches bool
	severAfter   time.Duration
	// down is true while the proxy's port is closed (setDown).
	down bool
	// streams cancels the requests in flight, by id.
	streams map[int]context.CancelFunc
	nextID  int
	severed int
}

// proxyRequest is what a fault rule sees of a request.
type proxyRequest struct {
	verb, group, resource, subresource, namespace, name string
}

// proxyWrite is one write that the API server accepted.
type proxyWrite struct {
	at   time.Time
	verb string
	// object is "<group>/<resource>/<namespace>/<name>", with "/<subresource>" when
	// the write went to one. A create (POST) has no name.
	object string
	code   int
}

// fault is how a rule answers a request: zero forwards it.
type fault int

// The faults a rule can inject.
const (
	faultNone     fault = iota
	faultInternal       // 500 InternalError
	faultThrottle       // 429 TooManyRequests, without Retry-After: client-go does not retry it itself
	faultTimeout        // 504 Timeout
	faultConflict       // 409 Conflict
	faultReset          // the connection closes without an answer
)

// newFaultProxy starts a proxy on 127.0.0.1 in front of the API server that kubeconfig
// names, authenticating as kubeconfig's user, and writes a kubeconfig for the manager
// that points at the proxy. seed drives the error injection.
func newFaultProxy(name, kubeconfig string, seed uint64) (*faultProxy, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, "", fmt.Errorf("parsing the API server address %q: %w", cfg.Host, err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("building the proxy's transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("listening for the proxy: %w", err)
	}
	p := &faultProxy{
		name:     name,
		listener: ln,
		info: &request.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		streams: map[int]context.CancelFunc{},
	}
	p.handler = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: transport,
		// Watches stream: pass every event on at once.
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.server.Serve(ln) }()

	path := filepath.Join(workDir, name+".kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: proxy
  cluster:
    server: http://%s
users:
- name: through-proxy
  user: {}
contexts:
- name: proxy
  context:
    cluster: proxy
    user: through-proxy
    namespace: %s
current-context: proxy
`, ln.Addr().String(), operatorNamespace)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		_ = p.Close()
		return nil, "", err
	}
	return p, path, nil
}

// Close stops the proxy and drops every connection.
func (p *faultProxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.streams {
		cancel()
	}
	return p.server.Close()
}

// ServeHTTP applies the faults in force, forwards the request and records an accepted write.
func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := p.classify(r)
	isWatch := req.verb == "watch"
	p.mu.Lock()
	f := faultNone
	switch {
	case p.down:
		f = faultReset
	case p.refuse != nil:
		f = p.refuse(req)
	}
	if f == faultNone && p.errorRate > 0 && p.rng.Float64() < p.errorRate {
		f = faultThrottle
		if p.rng.IntN(2) == 0 {
			f = faultInternal
		}
	}
	if f != faultNone {
		p.injected++
	}
	ctx, cancel := context.WithCancel(r.Context())
	id := p.nextID
	p.nextID++
	p.streams[id] = cancel
	if isWatch && p.severWatches && f == faultNone {
		after := time.Duration(p.rng.Int64N(int64(p.severAfter) + 1))
		time.AfterFunc(after, func() { p.sever(id) })
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, id)
		p.mu.Unlock()
		cancel()
	}()

	if f != faultNone {
		injectFault(w, f)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	p.handler.ServeHTTP(rec, r.WithContext(ctx))
	switch req.verb {
	case "create", "update", "patch", "delete", "deletecollection":
	default:
		return
	}
	object := strings.Join([]string{req.group, req.resource, req.namespace, req.name}, "/")
	if req.subresource != "" {
		object += "/" + req.subresource
	}
	write := proxyWrite{at: time.Now(), verb: req.verb, object: object, code: rec.code}
	if rec.code == 0 || rec.code >= http.StatusInternalServerError {
		p.mu.Lock()
		p.unsettled = append(p.unsettled, write)
		p.mu.Unlock()
		return
	}
	if rec.code < 200 || rec.code > 299 {
		return
	}
	p.mu.Lock()
	p.writes = append(p.writes, write)
	hook := p.onWrite
	p.mu.Unlock()
	if hook != nil {
		hook(write)
	}
}

// sever cancels request id if it is still in flight.
func (p *faultProxy) sever(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cancel, ok := p.streams[id]; ok {
		cancel()
		p.severed++
	}
}

// severAll cancels every request in flight: open watches end at once.
func (p *faultProxy) severAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.streams)
	for _, cancel := range p.streams {
		cancel()
	}
	p.severed += n
	return n
}

// classify parses the request's verb and object.
func (p *faultProxy) classify(r *http.Request) proxyRequest {
	info, err := p.info.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return proxyRequest{verb: "discovery"}
	}
	return proxyRequest{verb: info.Verb, group: info.APIGroup, resource: info.Resource, subresource: info.Subresource,
		namespace: info.Namespace, name: info.Name}
}

// setErrorRate answers the share rate of requests with 429 or 500 from now on.
func (p *faultProxy) setErrorRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errorRate = rate
}

// setSeverWatches, when on, cuts every watch at once and every new one within after.
func (p *faultProxy) setSeverWatches(on bool, after time.Duration) int {
	p.mu.Lock()
	p.severWatches, p.severAfter = on, after
	p.mu.Unlock()
	if on {
		return p.severAll()
	}
	return 0
}

// setRefuse installs (or, with nil, removes) a rule that answers matching requests with a fault.
func (p *faultProxy) setRefuse(rule func(proxyRequest) fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = rule
}

// setDown, when on, closes the proxy's port and every connection: the manager's requests
// are refused, as with an API server that is gone. Off opens the same port again.
func (p *faultProxy) setDown(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.down {
		return nil
	}
	p.down = on
	if on {
		for _, cancel := range p.streams {
			cancel()
		}
		return p.server.Close()
	}
	ln, err := net.Listen("tcp", p.listener.Addr().String())
	if err != nil {
		return fmt.Errorf("opening the proxy's port again: %w", err)
	}
	p.listener = ln
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func(s *http.Server) { _ = s.Serve(ln) }(p.server)
	return nil
}

// setOnWrite installs a hook called after each accepted write.
func (p *faultProxy) setOnWrite(hook func(proxyWrite)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onWrite = hook
}

// stats returns how many faults were injected and how many requests were severed.
func (p *faultProxy) stats() (injected, severed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected, p.severed
}

// writesSince returns the accepted writes answered at or after since.
func (p *faultProxy) writesSince(since time.Time) []proxyWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	return answeredSince(p.writes, since)
}

// unsettledSince returns the writes answered at or after since whose outcome is unknown
// (see faultProxy.unsettled).
func (p *faultProxy) unsettledSince(since time.Time) []proxyWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	return answeredSince(p.unsettled, since)
}

// answeredSince returns the writes of writes answered at or after since.
func answeredSince(writes []proxyWrite, since time.Time) []proxyWrite {
	var out []proxyWrite
	for _, w := range writes {
		if !w.at.Before(since) {
			out = append(out, w)
		}
	}
	return out
}

// injectFault answers with f: a Status body as the API server would send, or a closed connection.
func injectFault(w http.ResponseWriter, f fault) {
	var code int
	var reason string
	switch f {
	case faultReset:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case faultThrottle:
		code, reason = http.StatusTooManyRequests, "TooManyRequests"
	case faultTimeout:
		code, reason = http.StatusGatewayTimeout, "Timeout"
	case faultConflict:
		code, reason = http.StatusConflict, "Conflict"
	default:
		code, reason = http.StatusInternalServerError, "InternalError"
	}
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
		"message": "injected by the fault suite's proxy: " + reason,
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// statusRecorder remembers the status code of a response and passes flushes on.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
