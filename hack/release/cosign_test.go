//go:build cosign

package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// TestCosignVerifiesARelease checks that the real cosign CLI (KADDONS_COSIGN, built by
// make test-cosign) accepts what a release signs: the signature of checksums.txt with
// `cosign verify-blob`, and the image pushed by release push with `cosign verify`, both
// against the public key of a key pair cosign generated and the release signed with.
// Offline: no transparency log, a registry on loopback.
func TestCosignVerifiesARelease(t *testing.T) {
	bin := os.Getenv("KADDONS_COSIGN")
	if bin == "" {
		t.Fatal("KADDONS_COSIGN is not set: run `make test-cosign` (hack/cosign.sh builds cosign and prints its path)")
	}
	home := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TUF_ROOT=" + filepath.Join(home, "tuf"),
		"DOCKER_CONFIG=" + filepath.Join(home, "docker"), "COSIGN_PASSWORD=kaddons-release",
		// Nothing listens on port 9 of loopback: a request that is not to the loopback
		// registry fails at once.
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=",
	}
	cosign := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Dir = env, home
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cosign("generate-key-pair", "--output-key-prefix", filepath.Join(home, "release")); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	t.Setenv("COSIGN_PASSWORD", "kaddons-release")
	signer, err := loadSigner(filepath.Join(home, "release.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(home, "release.pub")
	dir := fakeRelease(t, signer)

	sums, sig := filepath.Join(dir, ChecksumsFile), filepath.Join(dir, SignatureFile)
	out, err := cosign("verify-blob", "--key", pub, "--signature", sig, "--insecure-ignore-tlog=true", sums)
	if err != nil {
		t.Fatalf("cosign verify-blob refused the release's checksums: %v\n%s", err, out)
	}
	t.Logf("cosign verify-blob: %s", strings.TrimSpace(out))
	// The same signature over a changed file is refused: cosign checks, not just parses.
	changed := filepath.Join(home, "changed.txt")
	data, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(changed, append(data, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cosign("verify-blob", "--key", pub, "--signature", sig, "--insecure-ignore-tlog=true", changed); err == nil {
		t.Fatalf("cosign verify-blob accepted the signature over a changed file:\n%s", out)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Push(t.Context(), dir, u.Host+"/kaddons", signer, true)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	out, err = cosign("verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", ref)
	if err != nil {
		t.Fatalf("cosign verify refused the pushed release image %s: %v\n%s", ref, err, out)
	}
	if _, digest, _ := strings.Cut(ref, "@"); !strings.Contains(out, digest) {
		t.Errorf("cosign verify does not name the digest of %s:\n%s", ref, out)
	}
}
