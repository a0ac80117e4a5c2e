package enginetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// RequestCounter counts a manager's API requests, so that tests can assert how many
// requests and writes a reconcile makes. A suite wraps its manager's rest.Config with
// Wrap. KADDONS_TEST_REQUESTS=1 prints every request.
type RequestCounter struct {
	mu sync.Mutex
	// writes lists the writes as "METHOD path", in order.
	writes []string
	// all lists every request as "METHOD path", in order.
	all []string
	// applied lists, for every server-side apply, "path kind" with the kind of the
	// object the API server answered with, in order.
	applied []string
}

// Wrap is a rest.Config's WrapTransport: it records every request rt sends.
func (c *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		// Watches stay open; only count requests that complete.
		if req.URL.Query().Get("watch") != "true" {
			c.mu.Lock()
			c.all = append(c.all, req.Method+" "+req.URL.Path)
			if req.Method != http.MethodGet {
				c.writes = append(c.writes, req.Method+" "+req.URL.Path)
			}
			if os.Getenv("KADDONS_TEST_REQUESTS") != "" {
				fmt.Fprintf(os.Stderr, "request: %s %s\n", req.Method, req.URL.Path)
			}
			c.mu.Unlock()
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Header.Get("Content-Type") == string(types.ApplyPatchType) {
			kind, kerr := responseKind(resp)
			if kerr != nil {
				return nil, kerr
			}
			c.mu.Lock()
			c.applied = append(c.applied, req.URL.Path+" "+kind)
			c.mu.Unlock()
		}
		return resp, err
	})
}

// responseKind returns the kind of the object in resp's body, JSON or protobuf, and
// leaves the body to be read again.
func responseKind(resp *http.Response) (string, error) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return "", err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if magic := []byte("k8s\x00"); bytes.HasPrefix(body, magic) {
		var unknown runtime.Unknown
		if err := unknown.Unmarshal(body[len(magic):]); err != nil {
			return "", fmt.Errorf("decoding a protobuf response: %w", err)
		}
		return unknown.Kind, nil
	}
	var typeMeta metav1.TypeMeta
	if err := json.Unmarshal(body, &typeMeta); err != nil {
		return "", fmt.Errorf("decoding a JSON response: %w", err)
	}
	return typeMeta.Kind, nil
}

// Count returns how many requests were recorded so far.
func (c *RequestCounter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all)
}

// WriteCount returns how many writes were recorded so far.
func (c *RequestCounter) WriteCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes)
}

// ApplyCount returns how many server-side applies were recorded so far.
func (c *RequestCounter) ApplyCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.applied)
}

// RequestsSince returns the requests since the n-th whose path names ns (which includes
// the cluster RBAC of an add-on in ns and the add-on's events).
func (c *RequestCounter) RequestsSince(n int, ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return naming(c.all[n:], ns, "")
}

// WritesSince returns the writes since the n-th whose path names ns, events included.
func (c *RequestCounter) WritesSince(n int, ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return naming(c.writes[n:], ns, "")
}

// ObjectWritesSince returns the writes since the n-th whose path names ns (which includes
// the cluster RBAC of an add-on in ns), leaving out events.
func (c *RequestCounter) ObjectWritesSince(n int, ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return naming(c.writes[n:], ns, "/events")
}

// AppliedSince returns the server-side applies whose path names ns, from the n-th on,
// each as "path kind" with the kind of the object the API server answered with.
func (c *RequestCounter) AppliedSince(n int, ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return naming(c.applied[n:], ns, "")
}

// naming returns the recorded requests that contain ns and, unless it is empty, do not
// contain except.
func naming(recorded []string, ns, except string) []string {
	var out []string
	for _, r := range recorded {
		if strings.Contains(r, ns) && (except == "" || !strings.Contains(r, except)) {
			out = append(out, r)
		}
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// QuietWindow is how long a test watches a manager's requests for an add-on.
const QuietWindow = 2 * time.Second

// WaitQuiet waits until the manager whose requests c counts made no request for anything
// in ns for a whole QuietWindow, so the reconciles an add-on's creation set off have
// settled.
func WaitQuiet(t *testing.T, c *RequestCounter, ns string) {
	t.Helper()
	gomega.NewWithT(t).Eventually(func() []string {
		mark := c.Count()
		time.Sleep(QuietWindow)
		return c.RequestsSince(mark, ns)
	}).WithTimeout(EventuallyTimeout).Should(gomega.BeEmpty())
}
