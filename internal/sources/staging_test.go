package sources_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// randomHex returns n bytes of random hex: a tree value that compresses to about half.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// stagingLeft lists what is left in the cache's staging folder.
func stagingLeft(t *testing.T, cacheDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cacheDir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// cuttingRegistry is an in-process registry on 127.0.0.1 that sends only the first cutAt
// bytes of every blob larger than that, while announcing its whole length, and then
// drops the connection: a registry that resets every layer stream part way.
func cuttingRegistry(t *testing.T, cutAt int) (host string, cut *bool) {
	t.Helper()
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	cutting := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cutting || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
			handler.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		if len(body) > cutAt {
			body = body[:cutAt]
		}
		_, _ = w.Write(body)
		// Returning with fewer bytes than announced makes the server drop the connection.
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &cutting
}

// TestOCICutLayerLeavesNoStaging: a registry that cuts every layer stream part way fails
// the fetch, and leaves nothing in the staging folder, however often it is retried.
func TestOCICutLayerLeavesNoStaging(t *testing.T) {
	g := NewWithT(t)
	host, cutting := cuttingRegistry(t, 16<<10)
	img, _, err := publish.Build(writeTree(t, randomHex(t, 256<<10)), publish.BuildOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = publish.Push(context.Background(), img, host+"/bundles/cut:v1", insecure)
	g.Expect(err).NotTo(HaveOccurred())
	*cutting = true

	cacheDir := t.TempDir()
	f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir})
	g.Expect(err).NotTo(HaveOccurred())
	for i := range 3 {
		_, err = f.Fetch(context.Background(), ociRequest(host+"/bundles/cut:v1"))
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed), "attempt %d: %v", i, err)
		g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty(), "attempt %d", i)
	}
}

// TestStagingRemovedOnFailure: a failed fetch of every kind leaves its staging folders
// behind no more than a successful one.
func TestStagingRemovedOnFailure(t *testing.T) {
	// https: an archive over the byte cap, written to staging before it is refused.
	big := tarGz(t, writeTree(t, randomHex(t, 64<<10)), "")
	archives := newArchiveServer(t, map[string][]byte{"/big.tar.gz": big}, nil)
	// git: a tree over the byte cap, after the clone was written to staging.
	gitSrv := newGitServer(t)
	gitSrv.commit(t, randomHex(t, 64<<10))
	// oci: a layer over the byte cap while it is extracted (its size in the manifest is
	// under it: the tree, not the layer, is what the cap refuses).
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, strings.Repeat("x", 64<<10)), "bundles/big:v1", publish.BuildOptions{})
	// directory: a symbolic link out of the tree, after other files were copied.
	dir := writeTree(t, "one")
	if err := os.Symlink("/etc", filepath.Join(dir, "zz-out")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		req        sources.Request
		limits     sources.Limits
		wantReason string
	}{
		{name: "https", req: sources.Request{Kind: sources.KindHTTPS, URL: archives.URL + "/big.tar.gz", Digest: sha(big),
			Auth: sources.Auth{CA: archives.ca(), InsecureLoopback: true}}, limits: sources.Limits{MaxBytes: 40 << 10},
			wantReason: sources.ReasonArchiveRefused},
		{name: "git", req: gitSrv.request(sources.GitRef{Branch: "main"}), limits: sources.Limits{MaxBytes: 40 << 10},
			wantReason: sources.ReasonArchiveRefused},
		{name: "oci", req: ociRequest(reg.host() + "/bundles/big:v1"), limits: sources.Limits{MaxBytes: 60 << 10},
			wantReason: sources.ReasonArchiveRefused},
		{name: "directory", req: sources.Request{Kind: sources.KindDirectory, URL: dir}, wantReason: sources.ReasonArchiveRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cacheDir := t.TempDir()
			f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, Limits: tc.limits})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = f.Fetch(context.Background(), tc.req)
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())
		})
	}
}

// TestCacheFullRefusesStaging: a fetch whose staging would take the cache over its bound
// is refused (ErrCacheFull, transient) before it writes past it, and leaves nothing.
func TestCacheFullRefusesStaging(t *testing.T) {
	g := NewWithT(t)
	archive := tarGz(t, writeTree(t, randomHex(t, 16<<10)), "")
	srv := newArchiveServer(t, map[string][]byte{"/c.tar.gz": archive}, nil)
	req := sources.Request{Kind: sources.KindHTTPS, URL: srv.URL + "/c.tar.gz", Digest: sha(archive),
		Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}}

	cacheDir := t.TempDir()
	f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, MaxCacheBytes: 4 << 10})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.Fetch(context.Background(), req)
	g.Expect(err).To(MatchError(sources.ErrCacheFull))
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed))
	g.Expect(sources.IsTransient(err)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("of its bound of 4096"))
	g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())

	// With room for the archive and its tree, the same fetch passes.
	f, err = sources.NewFetcher(sources.Options{CacheDir: cacheDir, MaxCacheBytes: 64 << 10})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())
}

// TestNewCacheRemovesLeftoverStaging: staging folders a crashed process left are removed
// when the cache is opened; its whole trees are kept.
func TestNewCacheRemovesLeftoverStaging(t *testing.T) {
	g := NewWithT(t)
	cacheDir := t.TempDir()
	f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir})
	g.Expect(err).NotTo(HaveOccurred())
	kept, err := f.Fetch(context.Background(), sources.Request{Kind: sources.KindDirectory, URL: writeTree(t, "kept")})
	g.Expect(err).NotTo(HaveOccurred())

	for i := range 3 {
		leftover := filepath.Join(cacheDir, "tmp", fmt.Sprintf("fetch-%d", i), "tree", "packages")
		g.Expect(os.MkdirAll(leftover, 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(leftover, "layer"), bytes.Repeat([]byte{1}, 1<<20), 0o444)).To(Succeed())
	}
	g.Expect(stagingLeft(t, cacheDir)).To(HaveLen(3))

	_, err = sources.NewFetcher(sources.Options{CacheDir: cacheDir})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())
	g.Expect(configValue(t, kept)).To(Equal("kept"))
}
