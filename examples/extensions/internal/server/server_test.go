package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	"github.com/kaddons/kaddons/internal/extensions"
)

// discard drops the log.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

const (
	testExtension = "platform-placement"
	goodToken     = "kaddons-token"
)

// fakeReviewer authenticates tokens from a table, as the API server would.
type fakeReviewer struct {
	mu sync.Mutex
	// tokens maps a token to its user and audiences.
	tokens map[string]authenticationv1.TokenReviewStatus
	err    error
	calls  int
}

func (f *fakeReviewer) Review(_ context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	status, ok := f.tokens[token]
	if !ok {
		return &authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	// An audience-aware authenticator answers the audiences both have.
	var both []string
	for _, a := range audiences {
		for _, b := range status.Audiences {
			if a == b {
				both = append(both, a)
			}
		}
	}
	if len(both) == 0 && len(status.Audiences) > 0 {
		return &authenticationv1.TokenReviewStatus{Error: "token audiences are invalid"}, nil
	}
	status.Audiences = both
	return &status, nil
}

func newFakeReviewer() *fakeReviewer {
	return &fakeReviewer{tokens: map[string]authenticationv1.TokenReviewStatus{
		goodToken: {Authenticated: true, User: authenticationv1.UserInfo{Username: DefaultAllowedUser},
			Audiences: []string{Audience(testExtension)}},
		"for-another-extension": {Authenticated: true, User: authenticationv1.UserInfo{Username: DefaultAllowedUser},
			Audiences: []string{Audience("other")}},
		"someone-else": {Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:default:default"},
			Audiences: []string{Audience(testExtension)}},
		// An authenticator that ignores audiences says nothing about them.
		"api-token": {Authenticated: true, User: authenticationv1.UserInfo{Username: DefaultAllowedUser}},
	}}
}

// testServer serves a Render that labels every object, and a BeforeUpgrade that fails.
func testServer(reviewer TokenReviewer) *Server {
	return &Server{
		Auth: &Authenticator{Reviewer: reviewer, Audience: Audience(testExtension), AllowedUser: DefaultAllowedUser},
		Handlers: Handlers{
			Render: func(_ context.Context, req *hooksv1alpha1.RenderRequest) (*hooksv1alpha1.RenderResponse, error) {
				return &hooksv1alpha1.RenderResponse{Objects: req.Objects}, nil
			},
			BeforeUpgrade: func(context.Context, *hooksv1alpha1.BeforeUpgradeRequest) (*hooksv1alpha1.BeforeUpgradeResponse, error) {
				return nil, errors.New("no settings")
			},
		},
		Revision: func() (string, error) { return "sha256:0123", nil },
		Log:      discard,
	}
}

func call(t *testing.T, h http.Handler, method, path, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const (
	discoveryRequest = `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"DiscoveryRequest"}`
	renderRequest    = `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"RenderRequest",` +
		`"addon":{"kind":"CoreDNS","namespace":"kube-system","name":"coredns"},"version":"1.12.1",` +
		`"objects":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns"}}]}`
	beforeUpgradeRequest = `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeRequest",` +
		`"addon":{"kind":"CoreDNS"},"fromVersion":"1.11.3","toVersion":"1.12.1"}`
)

func TestServer(t *testing.T) {
	prefix := hooksv1alpha1.PathPrefix
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		// response is a JSON the answer must hold (its fields, not all of them).
		response string
	}{
		{name: "healthz needs no token", method: http.MethodGet, path: "/healthz", status: http.StatusOK},
		{name: "discovery lists the hooks served and the revision", method: http.MethodPost, path: hooksv1alpha1.DiscoveryPath,
			token: goodToken, body: discoveryRequest, status: http.StatusOK,
			response: `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"DiscoveryResponse","status":"Success",` +
				`"hooks":[{"name":"Render","apiVersion":"hooks.addons.kaddons.dev/v1alpha1"},` +
				`{"name":"BeforeUpgrade","apiVersion":"hooks.addons.kaddons.dev/v1alpha1"}],"revision":"sha256:0123"}`},
		{name: "below a base path", method: http.MethodPost, path: "/kaddons" + hooksv1alpha1.DiscoveryPath,
			token: goodToken, body: discoveryRequest, status: http.StatusOK, response: `{"kind":"DiscoveryResponse"}`},
		{name: "render", method: http.MethodPost, path: hooksv1alpha1.Render.Path(), token: goodToken, body: renderRequest,
			status: http.StatusOK, response: `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"RenderResponse",` +
				`"status":"Success","objects":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns"}}]}`},
		{name: "a handler's error is a Failure", method: http.MethodPost, path: hooksv1alpha1.BeforeUpgrade.Path(), token: goodToken,
			body: beforeUpgradeRequest, status: http.StatusOK,
			response: `{"kind":"BeforeUpgradeResponse","status":"Failure","message":"no settings"}`},
		{name: "no token", method: http.MethodPost, path: hooksv1alpha1.Render.Path(), body: renderRequest,
			status: http.StatusUnauthorized},
		{name: "an unknown token", method: http.MethodPost, path: hooksv1alpha1.Render.Path(), token: "forged", body: renderRequest,
			status: http.StatusUnauthorized},
		{name: "a token for another extension", method: http.MethodPost, path: hooksv1alpha1.Render.Path(),
			token: "for-another-extension", body: renderRequest, status: http.StatusUnauthorized},
		{name: "another user's token", method: http.MethodPost, path: hooksv1alpha1.Render.Path(), token: "someone-else",
			body: renderRequest, status: http.StatusUnauthorized},
		{name: "a token without audiences", method: http.MethodPost, path: hooksv1alpha1.DiscoveryPath, token: "api-token",
			body: discoveryRequest, status: http.StatusUnauthorized},
		{name: "a hook not served", method: http.MethodPost, path: hooksv1alpha1.BeforeDelete.Path(), token: goodToken,
			body: `{}`, status: http.StatusNotFound},
		{name: "not below the hooks' path", method: http.MethodPost, path: "/render", token: goodToken, status: http.StatusNotFound},
		{name: "a GET", method: http.MethodGet, path: hooksv1alpha1.Render.Path(), token: goodToken, status: http.StatusMethodNotAllowed},
		{name: "not JSON", method: http.MethodPost, path: prefix + "render", token: goodToken, body: "<html>",
			status: http.StatusBadRequest},
		{name: "the wrong kind", method: http.MethodPost, path: prefix + "render", token: goodToken, body: discoveryRequest,
			status: http.StatusBadRequest},
		{name: "the wrong apiVersion", method: http.MethodPost, path: prefix + "render", token: goodToken,
			body: strings.Replace(renderRequest, "v1alpha1", "v1", 1), status: http.StatusBadRequest},
		{name: "malformed fields", method: http.MethodPost, path: prefix + "render", token: goodToken,
			body: strings.Replace(renderRequest, `"objects":[`, `"objects":7,"x":[`, 1), status: http.StatusBadRequest},
		{name: "larger than the cap", method: http.MethodPost, path: prefix + "render", token: goodToken,
			body: strings.Repeat(" ", MaxRequestBytes+1), status: http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := call(t, testServer(newFakeReviewer()), tc.method, tc.path, tc.token, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.response == "" {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			expectJSONHas(t, rec.Body.Bytes(), tc.response)
		})
	}
}

// expectJSONHas checks that every field of want is in got, with the same value.
func expectJSONHas(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("the answer is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	for k, v := range w {
		gv, _ := json.Marshal(g[k])
		wv, _ := json.Marshal(v)
		if string(gv) != string(wv) {
			t.Errorf("%s is %s, want %s (the answer: %s)", k, gv, wv, got)
		}
	}
}

func TestDiscoveryWithBadSettingsFails(t *testing.T) {
	s := testServer(newFakeReviewer())
	s.Revision = func() (string, error) { return "sha256:bad", errors.New("the settings file x: tolerations[0]: bad") }
	rec := call(t, s, http.MethodPost, hooksv1alpha1.DiscoveryPath, goodToken, discoveryRequest)
	expectJSONHas(t, rec.Body.Bytes(), `{"status":"Failure","message":"the settings file x: tolerations[0]: bad"}`)
}

func TestAuthenticatorCachesPassedTokens(t *testing.T) {
	reviewer := newFakeReviewer()
	now := time.Date(2025, 6, 7, 2, 0, 0, 0, time.UTC)
	a := &Authenticator{Reviewer: reviewer, Audience: Audience(testExtension), AllowedUser: DefaultAllowedUser,
		now: func() time.Time { return now }}
	for range 3 {
		if _, status, err := a.Authenticate(context.Background(), "Bearer "+goodToken); err != nil {
			t.Fatalf("%d: %v", status, err)
		}
		if _, _, err := a.Authenticate(context.Background(), "Bearer forged"); err == nil {
			t.Fatal("a forged token passed")
		}
	}
	if reviewer.calls != 4 {
		t.Errorf("%d reviews, want 1 for the good token and 3 for the forged one", reviewer.calls)
	}
	now = now.Add(cacheTTL)
	if _, _, err := a.Authenticate(context.Background(), "bearer "+goodToken); err != nil {
		t.Fatal(err)
	}
	if reviewer.calls != 5 {
		t.Errorf("the token was not reviewed again after %s", cacheTTL)
	}
}

func TestAuthenticatorWithoutTheAPIServer(t *testing.T) {
	reviewer := newFakeReviewer()
	reviewer.err = errors.New("connection refused")
	rec := call(t, testServer(reviewer), http.MethodPost, hooksv1alpha1.DiscoveryPath, goodToken, discoveryRequest)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503: kaddons retries", rec.Code)
	}
}

func TestAudienceIsKaddons(t *testing.T) {
	if got, want := Audience(testExtension), extensions.Audience(testExtension); got != want {
		t.Errorf("Audience is %q, kaddons sends tokens for %q", got, want)
	}
}

func TestSelfSignedCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	certPath, keyPath, err := EnsureSelfSigned(dir, []string{"127.0.0.1", "localhost", "placement.platform.svc"})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(keyPath); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("the key is readable by others: %v", info.Mode())
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if cert.IsCA {
		t.Error("the certificate is a CA")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	for _, name := range []string{"127.0.0.1", "localhost", "placement.platform.svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("cert.pem as the caBundle does not verify %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example.com"}); err == nil {
		t.Error("the certificate is valid for a name not given")
	}

	// The files are kept: the caBundle stays valid across restarts.
	if _, _, err := EnsureSelfSigned(dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(certPath)
	if string(again) != string(certPEM) {
		t.Error("an existing certificate was replaced")
	}
	// Half a pair is refused.
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureSelfSigned(dir, []string{"127.0.0.1"}); err == nil || !strings.Contains(err.Error(), "only one") {
		t.Errorf("half a pair: %v", err)
	}
}

// TestServeTLS serves a Server over TLS with a self-signed certificate, and calls it as
// kaddons does, trusting only cert.pem; then it shuts the server down.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	tlsConfig, err := serverTLS(Options{SelfSignedCertDir: dir, TLSNames: "127.0.0.1"}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, discard, ln, tlsConfig, testServer(newFakeReviewer())) }()

	certPEM, _ := os.ReadFile(filepath.Join(dir, CertFile))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+ln.Addr().String()+hooksv1alpha1.DiscoveryPath, strings.NewReader(discoveryRequest))
	req.Header.Set("Authorization", "Bearer "+goodToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var discovery hooksv1alpha1.DiscoveryResponse
	if err := json.NewDecoder(resp.Body).Decode(&discovery); err != nil || len(discovery.Hooks) != 2 {
		t.Errorf("%v: %+v", err, discovery)
	}
	_ = resp.Body.Close()
	client.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

func TestSettingsRevisionFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.yaml")
	parses := 0
	s := &Settings[string]{Path: path, Parse: func(data []byte) (string, error) {
		parses++
		if strings.Contains(string(data), "bad") {
			return "", errors.New("bad settings")
		}
		return string(data), nil
	}}
	write := func(content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Get(); err == nil {
		t.Error("a missing file has settings")
	}
	write("a: 1")
	v1, r1, err := s.Get()
	if err != nil || v1 != "a: 1" || r1 == "" {
		t.Fatalf("%q %q %v", v1, r1, err)
	}
	if _, again, _ := s.Get(); again != r1 || parses != 1 {
		t.Errorf("an unchanged file: revision %q (was %q), %d parses", again, r1, parses)
	}
	write("a: 2")
	v2, r2, err := s.Get()
	if err != nil || v2 != "a: 2" || r2 == r1 {
		t.Errorf("a changed file: %q %q (was %q) %v", v2, r2, r1, err)
	}
	write("bad")
	if _, r3, err := s.Get(); err == nil || !strings.Contains(err.Error(), path) || r3 == r2 {
		t.Errorf("a bad file: %q %v", r3, err)
	}
	write("a: 2")
	if _, r4, err := s.Get(); err != nil || r4 != r2 {
		t.Errorf("the file fixed: %q (want %q) %v", r4, r2, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		problem string
	}{
		{name: "self-signed", opts: Options{Name: "x", Settings: "s", AllowedUser: "u", SelfSignedCertDir: "d", TLSNames: "a", LogLevel: "info"}},
		{name: "files", opts: Options{Name: "x", Settings: "s", AllowedUser: "u", TLSCert: "c", TLSKey: "k", LogLevel: "debug"}},
		{name: "no name", opts: Options{Settings: "s", AllowedUser: "u", TLSCert: "c", TLSKey: "k"}, problem: "--name is required"},
		{name: "no certificate", opts: Options{Name: "x", Settings: "s", AllowedUser: "u"}, problem: "set --tls-cert and --tls-key"},
		{name: "both", opts: Options{Name: "x", Settings: "s", AllowedUser: "u", TLSCert: "c", TLSKey: "k", SelfSignedCertDir: "d"},
			problem: "either"},
		{name: "no names", opts: Options{Name: "x", Settings: "s", AllowedUser: "u", SelfSignedCertDir: "d", TLSNames: " , "},
			problem: "--tls-names"},
		{name: "bad level", opts: Options{Name: "x", Settings: "s", AllowedUser: "u", TLSCert: "c", TLSKey: "k", LogLevel: "loud"},
			problem: "--log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("unexpected: %v", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Errorf("got %v, want %q", err, tc.problem)
			}
		})
	}
}

// TestClientTokenReviewer reviews a token through client-go against a stand-in for the
// API server's TokenReview endpoint.
func TestClientTokenReviewer(t *testing.T) {
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review authenticationv1.TokenReview
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" ||
			json.NewDecoder(r.Body).Decode(&review) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		if review.Spec.Token == goodToken {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: review.Spec.Audiences,
				User: authenticationv1.UserInfo{Username: DefaultAllowedUser}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	defer apiserver.Close()
	// JSON: the stand-in speaks no protobuf, client-go's default for built-in kinds.
	reviews, err := authenticationv1client.NewForConfig(&rest.Config{Host: apiserver.URL,
		ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Authenticator{Reviewer: ClientTokenReviewer{Client: reviews}, Audience: Audience(testExtension), AllowedUser: DefaultAllowedUser}
	if user, status, err := a.Authenticate(context.Background(), "Bearer "+goodToken); err != nil || user != DefaultAllowedUser {
		t.Errorf("%q %d %v", user, status, err)
	}
	if _, status, err := a.Authenticate(context.Background(), "Bearer forged"); err == nil || status != http.StatusUnauthorized {
		t.Errorf("a forged token: %d %v", status, err)
	}
}
