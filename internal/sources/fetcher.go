package sources

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/singleflight"
)

// DefaultTimeout bounds a fetch whose Request sets no Timeout.
const DefaultTimeout = 5 * time.Minute

// Options configure a Fetcher.
type Options struct {
	// CacheDir holds the extracted trees (an emptyDir in the manager's Deployment). It is
	// created if missing; trees of an earlier run in it are reused.
	CacheDir string
	// MaxCacheBytes bounds the trees kept in CacheDir and the staging folders of the
	// fetches under way (DefaultCacheBytes when 0). The current revision of each source
	// is kept even over the bound; a fetch whose staging would take the staging of all
	// fetches under way over it is refused (ErrCacheFull).
	MaxCacheBytes int64
	// Limits caps each fetch (DefaultLimits for fields left 0).
	Limits Limits
	// Transport is the base of every HTTP client (oci, https): a request's CA is added to
	// a clone of it, and its dialer goes through the address filter. nil:
	// http.DefaultTransport's settings. Git over HTTP uses go-git's client (network.go).
	Transport *http.Transport
	// Keychain resolves registry credentials for oci requests that carry none (the CLI
	// passes authn.DefaultKeychain, the docker config). nil: anonymous.
	Keychain authn.Keychain
}

// fetcher implements Fetcher.
type fetcher struct {
	cache     *cache
	limits    Limits
	transport *http.Transport
	keychain  authn.Keychain
	group     singleflight.Group

	mu      sync.Mutex
	pullers map[string]*remote.Puller // by source identity: one registry ping per source
}

// CachingFetcher is the Fetcher NewFetcher returns: it also hands out the last artifact of
// a source, and forgets a source that is gone.
type CachingFetcher interface {
	Fetcher
	// Last returns the artifact the last successful Fetch of req returned, while it is
	// still in the cache: what a caller keeps using while the source is down.
	Last(req Request) (*Artifact, bool)
	// Release unpins the current revision of req's source (an AddonSource was deleted), so
	// that the cache may evict it.
	Release(req Request)
}

// NewFetcher returns a Fetcher that caches extracted trees in opts.CacheDir.
func NewFetcher(opts Options) (CachingFetcher, error) {
	if opts.CacheDir == "" {
		return nil, errors.New("sources: a cache directory is required")
	}
	c, err := newCache(opts.CacheDir, opts.MaxCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("sources: preparing the cache directory: %w", err)
	}
	base := opts.Transport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
		base.ResponseHeaderTimeout = time.Minute
	}
	return &fetcher{cache: c, limits: opts.Limits.withDefaults(), transport: base, keychain: opts.Keychain,
		pullers: map[string]*remote.Puller{}}, nil
}

// Fetch implements Fetcher. Concurrent fetches of the same request share one fetch.
func (f *fetcher) Fetch(ctx context.Context, req Request) (*Artifact, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	id := identity(req)
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// The shared fetch outlives a caller that gives up, so that the others still get it.
	ch := f.group.DoChan(id, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return f.fetch(fctx, req, id)
	})
	select {
	case <-ctx.Done():
		return nil, fetchError(ctx.Err(), "fetching %s", redactURL(req.URL))
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		a := *res.Val.(*Artifact)
		return &a, nil
	}
}

func (f *fetcher) Last(req Request) (*Artifact, bool) {
	a, ok := f.cache.lastArtifact(identity(req))
	if !ok {
		return nil, false
	}
	out := *a
	return &out, true
}

func (f *fetcher) Release(req Request) {
	id := identity(req)
	f.cache.release(id)
	f.mu.Lock()
	delete(f.pullers, id)
	f.mu.Unlock()
}

// fetch fetches req by its kind. Should a URL with credentials get here past validate, the
// credentials are scrubbed from its error: the libraries below print URLs their own way.
func (f *fetcher) fetch(ctx context.Context, req Request, id string) (*Artifact, error) {
	a, err := f.fetchKind(ctx, req, id)
	if err != nil {
		err = scrubCredentials(err, req.URL)
	}
	return a, err
}

func (f *fetcher) fetchKind(ctx context.Context, req Request, id string) (*Artifact, error) {
	switch req.Kind {
	case KindOCI:
		return f.fetchOCI(ctx, req, id)
	case KindGit:
		return f.fetchGit(ctx, req, id)
	case KindHTTPS:
		return f.fetchHTTPS(ctx, req, id)
	case KindDirectory:
		return f.fetchDirectory(ctx, req, id)
	}
	return nil, errorf(ReasonInvalidSource, nil, "unknown source kind %q", req.Kind)
}

// validate checks what needs no network: the kind, the URL's form and that it carries no
// credentials, the digest's form, the path, and that https has a digest.
func validate(req Request) error {
	if req.URL == "" {
		return errorf(ReasonInvalidSource, nil, "the source has no URL")
	}
	if req.Kind != KindDirectory {
		if redacted := redactURL(req.URL); redacted != req.URL {
			return errorf(ReasonInvalidSource, nil,
				"%s carries credentials in the URL; put them in the Secret the source's secretRef names "+
					"(username and password), the URL ends up in statuses, events and logs",
				redacted)
		}
	}
	if req.Path != "" {
		if _, err := bundleDir(req.Path); err != nil {
			return errorf(ReasonInvalidSource, err, "path")
		}
	}
	if req.Digest != "" {
		algorithm, _, err := cutDigest(req.Digest)
		if err != nil {
			return errorf(ReasonInvalidSource, err, "digest")
		}
		if algorithm == algoSHA1 && req.Kind != KindGit {
			return errorf(ReasonInvalidSource, nil, "digest %q: only a git source pins a sha1 commit", req.Digest)
		}
	}
	if req.Verify != nil && req.Kind != KindOCI {
		return errorf(ReasonInvalidSource, nil, "signature verification applies to oci sources only")
	}
	if req.Verify != nil && len(req.Verify.PublicKeys) == 0 {
		return errorf(ReasonInvalidSource, nil, "verification is required but lists no public key")
	}
	switch req.Kind {
	case KindOCI, KindGit, KindDirectory:
		return nil
	case KindHTTPS:
		return validateHTTPS(req)
	}
	return errorf(ReasonInvalidSource, nil, "unknown source kind %q (oci, git, https or directory)", req.Kind)
}

// validateHTTPS checks that an https source has a digest and an https URL.
func validateHTTPS(req Request) error {
	if req.Digest == "" {
		return errorf(ReasonInvalidSource, nil, "an https source needs a sha256 digest: the archive is checked against it before it is used")
	}
	u, err := url.Parse(req.URL)
	if err != nil || u.Host == "" {
		return errorf(ReasonInvalidSource, nil, "%q is not a URL", req.URL)
	}
	if u.Scheme != schemeHTTPS && (u.Scheme != schemeHTTP || !plainHTTPAllowed(req.Auth, u.Host)) {
		return errorf(ReasonInvalidSource, nil,
			"%q: an https source must use https (plain http only to a loopback address, with insecure and insecureLoopback set)", req.URL)
	}
	return nil
}

// plainHTTPAllowed reports whether a request may use plain HTTP to host: only to a loopback
// address, and only when it sets both Insecure and InsecureLoopback.
func plainHTTPAllowed(a Auth, host string) bool {
	return a.Insecure && a.InsecureLoopback && isLoopback(host)
}

// redactedUserinfo replaces the credentials of a URL in what redactURL returns.
const redactedUserinfo = "REDACTED"

// redactURL returns s with the credentials of its authority replaced: the whole user
// information of an http or https URL (a token may stand alone, as the user name), and of
// any other URL when it holds a password (ssh://git@host keeps its user name, which is no
// secret). It works on the text, so that a URL that does not parse is redacted too.
func redactURL(s string) string {
	prefix, userinfo, rest := urlCredentials(s)
	if userinfo == "" {
		return s
	}
	return prefix + redactedUserinfo + rest
}

// urlCredentials splits s around the credentials redactURL replaces; userinfo is empty
// when there are none.
func urlCredentials(s string) (prefix, userinfo, rest string) {
	after := s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, after = s[:i+len("://")], s[i+len("://"):]
	}
	authority := after
	if j := strings.IndexAny(after, "/?#"); j >= 0 {
		authority = after[:j]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return s, "", ""
	}
	scheme := strings.ToLower(strings.TrimSuffix(prefix, "://"))
	if scheme != schemeHTTP && scheme != schemeHTTPS && !strings.Contains(authority[:at], ":") {
		return s, "", ""
	}
	return prefix, authority[:at], after[at:]
}

// scrubCredentials returns err with the credentials of rawURL (what redactURL replaces)
// replaced in its text, keeping its reason and whether it is transient; err itself when
// rawURL carries none. net/http, for one, prints a URL's user name and hides only its
// password.
func scrubCredentials(err error, rawURL string) error {
	_, userinfo, _ := urlCredentials(rawURL)
	if userinfo == "" {
		return err
	}
	user, password, _ := strings.Cut(userinfo, ":")
	pairs := []string{userinfo, redactedUserinfo, user + ":***", redactedUserinfo}
	if password != "" {
		pairs = append(pairs, password, redactedUserinfo)
	}
	text := strings.NewReplacer(pairs...).Replace(err.Error())
	if text == err.Error() {
		return err
	}
	return &Error{Reason: ReasonOf(err), Message: text, Transient: IsTransient(err)}
}

// identity names a source: everything of the request but its timeout, credentials hashed.
// Two requests with the same identity share a fetch, a resolved revision and a pin.
func identity(req Request) string {
	req.Timeout = 0
	data, _ := json.Marshal(req)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// transportFor returns the base transport with req's CA bundle added to the system roots
// and its connections filtered by the address policy of auth.
func (f *fetcher) transportFor(auth Auth) (*http.Transport, error) {
	t := f.transport.Clone()
	addressPolicy{allowLoopback: auth.InsecureLoopback}.guard(t)
	if len(auth.CA) == 0 {
		return t, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(auth.CA) {
		return nil, errorf(ReasonInvalidSource, nil, "the CA bundle holds no PEM certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	}
	cfg.RootCAs = pool
	t.TLSClientConfig = cfg
	return t, nil
}

// isLoopback reports whether host (with or without a port) is localhost or a loopback IP.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// finish reads the bundle in the cached tree of e (under sub, the request's path for kinds
// whose cache entry is the whole archive) and records it as id's current revision, and
// resolution (the source and its resolved revision) as resolved to e.
func (f *fetcher) finish(id, resolution, revision string, e *cacheEntry, sub string, requireMediaType bool) (*Artifact, error) {
	root := filepath.Join(f.cache.treeDir(e.key), filepath.FromSlash(path.Clean("/" + sub))[1:])
	if sub != "" {
		info, err := os.Lstat(root)
		if err != nil || !info.IsDir() {
			return nil, errorf(ReasonInvalidBundle, err, "the source has no folder %q", sub)
		}
	}
	b, dir, err := ReadBundle(root, e.meta.Labels, requireMediaType)
	if err != nil {
		return nil, err
	}
	a := &Artifact{Revision: revision, Digest: e.meta.Digest, Dir: dir, Metadata: b.Metadata}
	f.cache.use(id, resolution, e, a)
	return a, nil
}
