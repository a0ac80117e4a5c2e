package sources_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/kaddons/kaddons/internal/sources"
)

// writeTree writes a channels tree with one add-on, demo, whose ConfigMap carries value,
// and returns its directory.
func writeTree(t *testing.T, value string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"stable":                                 "manifests:\n- name: demo\n  version: 1.0.0\n",
		"packages/demo/1.0.0/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- configmap.yaml\n",
		"packages/demo/1.0.0/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\ndata:\n  value: " + value + "\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// configValue reads the demo ConfigMap's value line from a fetched tree.
func configValue(t *testing.T, a *sources.Artifact) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.Dir, "packages", "demo", "1.0.0", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, v, _ := strings.Cut(string(data), "value: ")
	return strings.TrimSpace(v)
}

// testRegistry is go-containerregistry's in-process registry on 127.0.0.1, counting the
// requests it serves; tamper, when set, may rewrite a response.
type testRegistry struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
	tamper   func(r *http.Request, body []byte) []byte
}

func newRegistry(t *testing.T) *testRegistry {
	t.Helper()
	reg := &testRegistry{}
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg.mu.Lock()
		reg.requests = append(reg.requests, r.Method+" "+r.URL.Path)
		tamper := reg.tamper
		reg.mu.Unlock()
		if tamper == nil || r.Method != http.MethodGet {
			handler.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(tamper(r, rec.Body.Bytes()))
	}))
	t.Cleanup(reg.Close)
	return reg
}

// host is the registry's host:port.
func (r *testRegistry) host() string { return strings.TrimPrefix(r.URL, "http://") }

func (r *testRegistry) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = nil
}

func (r *testRegistry) served() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// countMatching counts the requests served whose "METHOD path" contains s.
func (r *testRegistry) countMatching(s string) int {
	n := 0
	for _, req := range r.served() {
		if strings.Contains(req, s) {
			n++
		}
	}
	return n
}

// newKey returns an ECDSA P-256 signer and its PEM public key.
func newKey(t *testing.T) (signature.Signer, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signature.LoadECDSASignerVerifier(key, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return signer, pub
}

func newFetcher(t *testing.T, limits sources.Limits) sources.CachingFetcher {
	t.Helper()
	f, err := sources.NewFetcher(sources.Options{CacheDir: t.TempDir(), Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return f
}
