package loopbackcert

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

func TestNewServesLoopbackAndIsItsOwnCA(t *testing.T) {
	certPEM, keyPEM, err := New()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the certificate and key do not pair: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(certPEM) {
		t.Fatal("the certificate is not PEM")
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: roots}); err != nil {
		t.Errorf("a client trusting the certificate refuses it for 127.0.0.1: %v", err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.2", Roots: roots}); err == nil {
		t.Error("the certificate is accepted for 127.0.0.2")
	}
}
