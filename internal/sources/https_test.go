package sources_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
)

// tarGz packs the files of dir under prefix into a .tar.gz.
func tarGz(t *testing.T, dir, prefix string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: prefix + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// archiveServer serves files by path over TLS on 127.0.0.1 and counts the requests.
type archiveServer struct {
	*httptest.Server
	files    map[string][]byte
	requests atomic.Int32
}

func newArchiveServer(t *testing.T, files map[string][]byte, redirects map[string]string) *archiveServer {
	t.Helper()
	s := &archiveServer{files: files}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if to, ok := redirects[r.URL.Path]; ok {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		data, ok := s.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *archiveServer) ca() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func TestHTTPSFetch(t *testing.T) {
	tree := writeTree(t, "one")
	good := tarGz(t, tree, "channels/")
	other := newArchiveServer(t, map[string][]byte{"/channels.tar.gz": good}, nil)
	evil := makeEvilArchive()
	srv := newArchiveServer(t, map[string][]byte{
		"/channels.tar.gz": good,
		"/big.tar.gz":      bytes.Repeat([]byte{0}, 5000),
		"/evil.tar.gz":     evil,
	}, map[string]string{
		"/same-host": "/channels.tar.gz",
		"/elsewhere": other.URL + "/channels.tar.gz",
	})
	ctx := context.Background()
	req := func(path, digest string) sources.Request {
		return sources.Request{Kind: sources.KindHTTPS, URL: srv.URL + path, Digest: digest, Path: "channels",
			Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}}
	}
	cases := []struct {
		name       string
		req        sources.Request
		limits     sources.Limits
		wantReason string
	}{
		{name: "fetched and checked", req: req("/channels.tar.gz", sha(good))},
		{name: "a redirect on the same host", req: req("/same-host", sha(good))},
		{name: "no digest", req: req("/channels.tar.gz", ""), wantReason: sources.ReasonInvalidSource},
		{name: "wrong digest", req: req("/channels.tar.gz", sha([]byte("other"))), wantReason: sources.ReasonDigestMismatch},
		{name: "a redirect to another host", req: req("/elsewhere", sha(good)), wantReason: sources.ReasonFetchFailed},
		{name: "over the size cap", req: req("/big.tar.gz", sha(bytes.Repeat([]byte{0}, 5000))), limits: sources.Limits{MaxBytes: 1000},
			wantReason: sources.ReasonArchiveRefused},
		{name: "a traversal in the archive", req: req("/evil.tar.gz", sha(evil)), wantReason: sources.ReasonArchiveRefused},
		{name: "missing", req: req("/none.tar.gz", sha(good)), wantReason: sources.ReasonFetchFailed},
		{name: "an unknown CA", req: sources.Request{Kind: sources.KindHTTPS, URL: srv.URL + "/channels.tar.gz", Digest: sha(good),
			Auth: sources.Auth{InsecureLoopback: true}},
			wantReason: sources.ReasonFetchFailed},
		{name: "plain http", req: sources.Request{Kind: sources.KindHTTPS, URL: "http://example.com/c.tar.gz", Digest: sha(good)},
			wantReason: sources.ReasonInvalidSource},
		{name: "a path that is not in the archive", req: sources.Request{Kind: sources.KindHTTPS, URL: srv.URL + "/channels.tar.gz",
			Digest: sha(good), Path: "nowhere", Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}}, wantReason: sources.ReasonInvalidBundle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := newFetcher(t, tc.limits).Fetch(ctx, tc.req)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(a.Digest).To(Equal(sha(good)))
				g.Expect(configValue(t, a)).To(Equal("one"))
				g.Expect(a.Metadata.MediaType).To(Equal(sources.MediaTypeChannels))
				return
			}
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			g.Expect(sources.IsTransient(err)).To(BeFalse())
		})
	}
}

// makeEvilArchive is a .tar.gz with a channels tree and one entry that leaves it.
func makeEvilArchive() []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range []string{"channels/stable", "channels/../../../tmp/evil"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x"))
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

func TestHTTPSCacheAndDown(t *testing.T) {
	g := NewWithT(t)
	good := tarGz(t, writeTree(t, "one"), "")
	srv := newArchiveServer(t, map[string][]byte{"/c.tar.gz": good}, nil)
	f := newFetcher(t, sources.Limits{})
	req := sources.Request{Kind: sources.KindHTTPS, URL: srv.URL + "/c.tar.gz", Digest: sha(good), Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}}
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.requests.Load()).To(Equal(int32(1)))

	// The pinned digest was fetched: no second download, even with the server gone.
	srv.Close()
	b, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Dir).To(Equal(a.Dir))
	g.Expect(srv.requests.Load()).To(Equal(int32(1)))

	// A new digest needs the server, which is down: a transient error.
	good2 := tarGz(t, writeTree(t, "two"), "")
	req.Digest = sha(good2)
	_, err = f.Fetch(context.Background(), req)
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed))
	g.Expect(sources.IsTransient(err)).To(BeTrue(), "%v", err)
	g.Expect(strings.Contains(err.Error(), srv.URL)).To(BeTrue())
}
