package main

import (
	"crypto/tls"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/kaddons/kaddons/internal/config"
)

func TestNewMetricsOptions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		secure      *bool
		enableHTTP2 bool
		wantSecure  bool
		wantProtos  []string
	}{
		{name: "defaults", wantSecure: true, wantProtos: []string{"http/1.1"}},
		{name: "plain HTTP", secure: ptr.To(false), wantProtos: []string{"http/1.1"}},
		{name: "HTTP/2 enabled", secure: ptr.To(true), enableHTTP2: true, wantSecure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newMetricsOptions(config.Metrics{BindAddress: ":8443", Secure: tc.secure}, tc.enableHTTP2)
			if got.BindAddress != ":8443" || got.SecureServing != tc.wantSecure {
				t.Errorf("BindAddress = %q, SecureServing = %v; want :8443, %v", got.BindAddress, got.SecureServing, tc.wantSecure)
			}
			// Only a secure endpoint asks scrapers for a token.
			if (got.FilterProvider != nil) != tc.wantSecure {
				t.Errorf("FilterProvider set = %v, want %v", got.FilterProvider != nil, tc.wantSecure)
			}
			c := &tls.Config{}
			for _, opt := range got.TLSOpts {
				opt(c)
			}
			if len(c.NextProtos) != len(tc.wantProtos) || len(c.NextProtos) > 0 && c.NextProtos[0] != tc.wantProtos[0] {
				t.Errorf("NextProtos = %v, want %v", c.NextProtos, tc.wantProtos)
			}
		})
	}
}

func TestOperatorNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	if got := operatorNamespace(); got != defaultOperatorNamespace {
		t.Errorf("operatorNamespace() without POD_NAMESPACE = %q, want %q", got, defaultOperatorNamespace)
	}
	t.Setenv("POD_NAMESPACE", "addons")
	if got := operatorNamespace(); got != "addons" {
		t.Errorf("operatorNamespace() = %q, want addons", got)
	}
}
