// Package sourcestest holds helpers for tests that sign and verify bundles.
package sourcestest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// WriteKeyPair writes a new ECDSA P-256 key pair as PEM files in a temporary folder of t,
// the private key unencrypted (which `kubectl kaddons bundle push --sign-key` reads), and
// returns their paths.
func WriteKeyPair(t testing.TB) (private, public string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := cryptoutils.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	private, public = filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	if err := os.WriteFile(private, privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return private, public
}
