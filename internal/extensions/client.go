// Package extensions calls the extensions that AddonExtensions register: discovery,
// and the hooks the engine runs at fixed points of an add-on's lifecycle, as JSON over
// HTTPS (api/hooks/v1alpha1). It never writes to the cluster; what an extension answers
// goes back to the engine, which checks it as it checks spec.patches.
package extensions

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// MaxResponseBytes caps what kaddons reads of an extension's answer; a longer answer is
// refused, never buffered.
const MaxResponseBytes = 4 << 20

// DefaultTimeout bounds a call when the AddonExtension does not say.
const DefaultTimeout = 10 * time.Second

// MaxRetryAfter caps how long a hold asks kaddons to wait before it asks again.
const MaxRetryAfter = time.Hour

// maxMessageBytes caps the message of an answer that kaddons shows in conditions and
// events.
const maxMessageBytes = 1024

// Audience is the audience of the ServiceAccount tokens kaddons sends to the extension
// name: an extension accepts only tokens minted for it, so one cannot replay what it was
// sent to another.
func Audience(name string) string { return "addons.kaddons.dev/extension/" + name }

// TokenSource gives the bearer token kaddons sends to an extension: one of its own
// ServiceAccount, for the audience given.
type TokenSource interface {
	Token(ctx context.Context, audience string) (string, error)
}

// Endpoint is how to reach one extension: its base URL and the TLS it must speak.
type Endpoint struct {
	// Name is the AddonExtension's name.
	Name string
	// Base is the base URL the hooks are served below.
	Base *url.URL
	// Timeout bounds each call.
	Timeout time.Duration
	// client speaks TLS that trusts only the CA bundle, for the host name of Base.
	client *http.Client
}

// NewEndpoint builds the endpoint of an AddonExtension from its spec. An error is the
// spec's (a CA bundle without a certificate, a malformed URL): kaddons cannot call it.
func NewEndpoint(ext *addonsv1alpha1.AddonExtension) (*Endpoint, error) {
	cc := ext.Spec.ClientConfig
	var base *url.URL
	switch {
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return nil, fmt.Errorf("spec.clientConfig.url: %w", err)
		}
		if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, errors.New("spec.clientConfig.url must be https://host[:port][/path], with no user, query or fragment")
		}
		base = u
	case cc.Service != nil:
		port := cc.Service.Port
		if port == 0 {
			port = 443
		}
		base = &url.URL{Scheme: "https", Host: net.JoinHostPort(cc.Service.Name+"."+cc.Service.Namespace+".svc", fmt.Sprint(port)),
			Path: cc.Service.Path}
	default:
		return nil, errors.New("spec.clientConfig sets neither url nor service")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cc.CABundle) {
		return nil, errors.New("spec.clientConfig.caBundle holds no PEM certificate")
	}
	timeout := DefaultTimeout
	if ext.Spec.Timeout != nil && ext.Spec.Timeout.Duration > 0 {
		timeout = ext.Spec.Timeout.Duration
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: base.Hostname(), MinVersion: tls.VersionTLS12},
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		// No proxy: an extension is reached directly, and its token goes nowhere else.
		Proxy: nil,
	}
	return &Endpoint{Name: ext.Name, Base: base, Timeout: timeout, client: &http.Client{
		Transport: transport,
		// Redirects would send the token to wherever the extension points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Close releases the endpoint's idle connections.
func (e *Endpoint) Close() {
	if t, ok := e.client.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

// Failure classes of a call, as the add-on's reason names them.
const (
	// FailureUnreachable: time-out, TLS, connection or an HTTP status other than 200.
	FailureUnreachable = addonsv1alpha1.ReasonExtensionUnreachable
	// FailureInvalidResponse: not JSON, the wrong kind, larger than MaxResponseBytes.
	FailureInvalidResponse = addonsv1alpha1.ReasonExtensionInvalidResponse
	// FailureFailed: the extension answered status Failure.
	FailureFailed = addonsv1alpha1.ReasonExtensionFailed
	// FailureRefused: the answer breaks a rule (a Render answer that drops an object).
	FailureRefused = addonsv1alpha1.ReasonExtensionResponseRefused
)

// CallError is a failed call to an extension. Reason is one of the Failure* constants.
type CallError struct {
	Extension string
	Hook      string
	Reason    string
	Err       error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("extension %s, hook %s: %v", e.Extension, e.Hook, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Caller calls extensions with a token of kaddons' ServiceAccount.
type Caller struct {
	// Tokens gives the token for each extension's audience.
	Tokens TokenSource
}

// Call POSTs req to the path below the endpoint's base URL and decodes the answer into
// resp, which must come back as kind with status Success. hook names the call in
// metrics and errors.
func (c *Caller) Call(ctx context.Context, e *Endpoint, hook, path, kind string, req any, resp any) (err error) {
	start := time.Now()
	defer func() { observe(e.Name, hook, start, err) }()
	fail := func(reason string, err error) error {
		return &CallError{Extension: e.Name, Hook: hook, Reason: reason, Err: err}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fail(FailureInvalidResponse, fmt.Errorf("encoding the request: %w", err))
	}
	token, err := c.Tokens.Token(ctx, Audience(e.Name))
	if err != nil {
		// Not the extension's fault, nor one it could see: retried as unreachable.
		return fail(FailureUnreachable, fmt.Errorf("getting a token for audience %s: %w", Audience(e.Name), err))
	}
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	u := *e.Base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fail(FailureUnreachable, err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("Authorization", "Bearer "+token)
	httpResp, err := e.client.Do(httpReq)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", e.Timeout, err)
		}
		return fail(FailureUnreachable, err)
	}
	defer func() { _ = httpResp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(httpResp.Body, MaxResponseBytes+1))
	if err != nil {
		return fail(FailureUnreachable, fmt.Errorf("reading the answer: %w", err))
	}
	if httpResp.StatusCode != http.StatusOK {
		return fail(FailureUnreachable, fmt.Errorf("HTTP %d: %s", httpResp.StatusCode, Truncate(string(data))))
	}
	if len(data) > MaxResponseBytes {
		return fail(FailureInvalidResponse, fmt.Errorf("the answer is larger than %d bytes", MaxResponseBytes))
	}
	var envelope struct {
		hooksv1alpha1.TypeMeta       `json:",inline"`
		hooksv1alpha1.CommonResponse `json:",inline"`
	}
	if err := json.Unmarshal(data, &envelope); err != nil {
		return fail(FailureInvalidResponse, fmt.Errorf("the answer is not a %s: %w", kind, err))
	}
	if envelope.APIVersion != hooksv1alpha1.GroupVersion || envelope.Kind != kind {
		return fail(FailureInvalidResponse, fmt.Errorf("the answer is %q %q, not %s %s",
			envelope.APIVersion, envelope.Kind, hooksv1alpha1.GroupVersion, kind))
	}
	switch envelope.Status {
	case hooksv1alpha1.StatusSuccess:
	case hooksv1alpha1.StatusFailure:
		return fail(FailureFailed, fmt.Errorf("the extension failed: %s", Truncate(envelope.Message)))
	default:
		return fail(FailureInvalidResponse, fmt.Errorf("the answer's status is %q, not Success or Failure", envelope.Status))
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fail(FailureInvalidResponse, fmt.Errorf("the answer is not a %s: %w", kind, err))
	}
	return nil
}

// Truncate cuts a message an extension sent to what kaddons shows.
func Truncate(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessageBytes], "") + "…"
}
