package extensions

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/loopbackcert"
)

// staticTokens gives one token for every audience and records the audiences asked for.
type staticTokens struct{ audiences []string }

func (s *staticTokens) Token(_ context.Context, audience string) (string, error) {
	s.audiences = append(s.audiences, audience)
	return "token-for-" + audience, nil
}

// server starts a TLS server on loopback that answers with h, and returns an
// AddonExtension that points at it.
func server(t *testing.T, h http.HandlerFunc) *addonsv1alpha1.AddonExtension {
	t.Helper()
	s := httptest.NewTLSServer(h)
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return &addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: "test"},
		Spec: addonsv1alpha1.AddonExtensionSpec{
			ClientConfig: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To(s.URL + "/base"), CABundle: ca},
			Timeout:      &metav1.Duration{Duration: time.Second}}}
}

func answer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }
}

const beforeUpgradeOK = `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Success"}`

func TestCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handler   http.HandlerFunc
		mutate    func(*addonsv1alpha1.AddonExtension)
		reason    string
		message   string
		wantHold  Hold
		wantToken bool
	}{
		{name: "lets it go on", handler: answer(beforeUpgradeOK)},
		{name: "holds", wantHold: Hold{RetryAfter: 30 * time.Second, Message: "closed"},
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Success","retryAfterSeconds":30,"message":"closed"}`)},
		{name: "holds at most an hour", wantHold: Hold{RetryAfter: time.Hour, Message: "long"},
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Success","retryAfterSeconds":90000,"message":"long"}`)},
		{name: "sends the token and the request", wantToken: true, handler: func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || r.URL.Path != "/base/hooks.addons.kaddons.dev/v1alpha1/beforeupgrade" ||
				r.Header.Get("Authorization") != "Bearer token-for-addons.kaddons.dev/extension/test" ||
				!strings.Contains(string(body), `"kind":"BeforeUpgradeRequest"`) || !strings.Contains(string(body), `"fromVersion":"1"`) {
				http.Error(w, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body), http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, beforeUpgradeOK)
		}},
		{name: "times out", reason: FailureUnreachable, message: "no answer within 1s",
			handler: func(http.ResponseWriter, *http.Request) { time.Sleep(2 * time.Second) }},
		{name: "HTTP error", reason: FailureUnreachable, message: "HTTP 503: down", handler: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}},
		{name: "redirect is not followed", reason: FailureUnreachable, message: "HTTP 307", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://example.com/", http.StatusTemporaryRedirect)
		}},
		{name: "another CA", reason: FailureUnreachable, message: "certificate", handler: answer(beforeUpgradeOK),
			mutate: func(ext *addonsv1alpha1.AddonExtension) {
				other, _, err := loopbackcert.New()
				if err != nil {
					panic(err)
				}
				ext.Spec.ClientConfig.CABundle = other
			}},
		{name: "garbage", reason: FailureInvalidResponse, message: "is not a BeforeUpgradeResponse", handler: answer("<html>")},
		{name: "wrong kind", reason: FailureInvalidResponse, message: `is "hooks.addons.kaddons.dev/v1alpha1" "RenderResponse"`,
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"RenderResponse","status":"Success"}`)},
		{name: "no status", reason: FailureInvalidResponse, message: `status is ""`,
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse"}`)},
		{name: "negative retry", reason: FailureInvalidResponse, message: "below 0",
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Success","retryAfterSeconds":-1}`)},
		{name: "too large", reason: FailureInvalidResponse, message: "larger than 4194304 bytes",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Success","message":"`+
					strings.Repeat("x", 10<<20)+`"}`)
			}},
		{name: "failure", reason: FailureFailed, message: "the extension failed: no settings",
			handler: answer(`{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"BeforeUpgradeResponse","status":"Failure","message":"no settings"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext := server(t, tc.handler)
			if tc.mutate != nil {
				tc.mutate(ext)
			}
			endpoint, err := NewEndpoint(ext)
			if err != nil {
				t.Fatal(err)
			}
			defer endpoint.Close()
			tokens := &staticTokens{}
			hold, err := (&Caller{Tokens: tokens}).BeforeUpgrade(context.Background(), endpoint, hooksv1alpha1.Addon{Kind: "CoreDNS"}, "1", "2")
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if hold != tc.wantHold {
					t.Errorf("hold = %+v, want %+v", hold, tc.wantHold)
				}
				if len(tokens.audiences) != 1 || tokens.audiences[0] != "addons.kaddons.dev/extension/test" {
					t.Errorf("audiences = %v", tokens.audiences)
				}
				return
			}
			var ce *CallError
			if !errors.As(err, &ce) || ce.Reason != tc.reason {
				t.Fatalf("err = %v, want a CallError with reason %s", err, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.message) || !strings.HasPrefix(err.Error(), "extension test, hook BeforeUpgrade: ") {
				t.Errorf("err = %q, want it to name the extension and the hook and contain %q", err, tc.message)
			}
		})
	}
}

func TestNewEndpoint(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	for _, tc := range []struct {
		name    string
		config  addonsv1alpha1.ExtensionClientConfig
		want    string
		wantErr string
	}{
		{name: "service", config: addonsv1alpha1.ExtensionClientConfig{Service: &addonsv1alpha1.ExtensionServiceReference{
			Namespace: "platform", Name: "placement", Path: "/kaddons"}}, want: "https://placement.platform.svc:443/kaddons"},
		{name: "service port", config: addonsv1alpha1.ExtensionClientConfig{Service: &addonsv1alpha1.ExtensionServiceReference{
			Namespace: "platform", Name: "placement", Port: 8443}}, want: "https://placement.platform.svc:8443"},
		{name: "plain http", config: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To("http://127.0.0.1:1")}, wantErr: "must be https://"},
		{name: "user", config: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To("https://a:b@127.0.0.1:1")}, wantErr: "no user"},
		{name: "no certificate", config: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To("https://127.0.0.1:1")}, wantErr: "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.config.CABundle == nil && tc.wantErr != "holds no PEM certificate" {
				s := httptest.NewTLSServer(http.NotFoundHandler())
				tc.config.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
				s.Close()
			} else if tc.config.CABundle == nil {
				tc.config.CABundle = ca
			}
			e, err := NewEndpoint(&addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: addonsv1alpha1.AddonExtensionSpec{ClientConfig: tc.config}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Base.String() != tc.want || e.Timeout != DefaultTimeout {
				t.Errorf("base %s, timeout %s; want %s, %s", e.Base, e.Timeout, tc.want, DefaultTimeout)
			}
			transport := e.client.Transport.(*http.Transport)
			if transport.Proxy != nil || transport.TLSClientConfig.MinVersion != tls.VersionTLS12 ||
				transport.TLSClientConfig.ServerName != e.Base.Hostname() {
				t.Errorf("transport: proxy %v, TLS %+v", transport.Proxy != nil, transport.TLSClientConfig)
			}
		})
	}
}
