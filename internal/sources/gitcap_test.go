package sources_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kaddons/kaddons/internal/sources"
)

// commitBlob commits size random (incompressible) bytes as name at the top of the
// repository and pushes.
func (s *gitServer) commitBlob(t *testing.T, name string, size int) {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.work, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	gitOutput(t, s.work, "add", "-A")
	gitOutput(t, s.work, "commit", "-q", "-m", name)
	gitOutput(t, s.work, "push", "-q", "origin", "main")
}

// TestGitTransferCap: a git fetch reads at most Limits.MaxTransferBytes from the server,
// although the channels tree it wants is small: a packfile over the cap is refused.
func TestGitTransferCap(t *testing.T) {
	srv := newGitServer(t)
	srv.commit(t, "one")
	srv.commitBlob(t, "blob.bin", 1<<20) // next to channels/, in the same commit's packfile
	cases := []struct {
		name       string
		limits     sources.Limits
		wantReason string
	}{
		{name: "under the cap", limits: sources.Limits{MaxTransferBytes: 4 << 20}},
		{name: "over the cap", limits: sources.Limits{MaxTransferBytes: 256 << 10}, wantReason: sources.ReasonArchiveRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cacheDir := t.TempDir()
			f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, Limits: tc.limits})
			g.Expect(err).NotTo(HaveOccurred())
			a, err := f.Fetch(context.Background(), srv.request(sources.GitRef{Branch: "main"}))
			g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(configValue(t, a)).To(Equal("one"))
				return
			}
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			g.Expect(sources.IsTransient(err)).To(BeFalse())
			g.Expect(err).To(MatchError("the git server sent more than 262144 bytes, the cap of a git fetch"))
		})
	}
}

// TestGitCommitPinShallow: a commit pin fetches that commit alone, shallow, from a server
// that serves a commit by its hash; a server that does not gets every branch and tag,
// within the transfer cap. The history after the pinned commit holds a 1 MiB blob that
// only the full fetch reads.
func TestGitCommitPinShallow(t *testing.T) {
	srv := newGitServer(t)
	pinned := srv.commit(t, "one")
	srv.commitBlob(t, "blob.bin", 1<<20)
	srv.commit(t, "two")
	limits := sources.Limits{MaxTransferBytes: 512 << 10}
	req := srv.request(sources.GitRef{Commit: pinned})

	t.Run("a server without allow-reachable-sha1-in-want: every branch, over the cap", func(t *testing.T) {
		g := NewWithT(t)
		_, err := newFetcher(t, limits).Fetch(context.Background(), req)
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonArchiveRefused), "%v", err)
		g.Expect(err).To(MatchError(ContainSubstring("the cap of a git fetch")))
		// The same with room: the full fetch works.
		a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(configValue(t, a)).To(Equal("one"))
	})
	t.Run("a server with allow-reachable-sha1-in-want: the commit alone, under the cap", func(t *testing.T) {
		g := NewWithT(t)
		gitOutput(t, srv.bare, "config", "uploadpack.allowReachableSHA1InWant", "true")
		a, err := newFetcher(t, limits).Fetch(context.Background(), req)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(configValue(t, a)).To(Equal("one"))
		g.Expect(a.Revision).To(Equal("sha1:" + pinned))
	})
}

// TestGitRedirectRefused: a git fetch follows no redirect, to another host or the same.
func TestGitRedirectRefused(t *testing.T) {
	srv := newGitServer(t)
	srv.commit(t, "one")
	redirector := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	for _, ref := range []sources.GitRef{{Branch: "main"}, {Commit: gitOutput(t, srv.work, "rev-parse", "HEAD")}} {
		g := NewWithT(t)
		req := srv.request(ref)
		req.URL = redirector.URL + "/repo.git"
		_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
		g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed), "%v", err)
		g.Expect(sources.IsTransient(err)).To(BeFalse())
		g.Expect(err).To(MatchError(ContainSubstring("the git server redirects to " + srv.URL + "/repo.git/info/refs")))
		g.Expect(err).To(MatchError(ContainSubstring("a git source does not follow redirects")))
	}
}

// TestGitTransferCapOverSSH: over SSH, whose connection go-git dials itself, the git
// objects written are capped the same.
func TestGitTransferCapOverSSH(t *testing.T) {
	srv := newGitServer(t)
	srv.commit(t, "one")
	srv.commitBlob(t, "blob.bin", 1<<20)
	sshClientPub, clientKey := sshClientKey(t)
	addr, hostKey := sshGitServer(t, filepath.Dir(srv.bare), sshClientPub)
	req := sources.Request{Kind: sources.KindGit, URL: "ssh://git@" + addr + "/repo.git", Git: sources.GitRef{Branch: "main"},
		Path: "channels", Auth: sources.Auth{SSHPrivateKey: clientKey, InsecureLoopback: true,
			KnownHosts: []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostKey) + "\n")}}

	g := NewWithT(t)
	cacheDir := t.TempDir()
	f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, Limits: sources.Limits{MaxTransferBytes: 256 << 10}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.Fetch(context.Background(), req)
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonArchiveRefused), "%v", err)
	g.Expect(err).To(MatchError("the git objects fetched are more than 262144 bytes, the cap of a git fetch"))
	g.Expect(stagingLeft(t, cacheDir)).To(BeEmpty())

	a, err := newFetcher(t, sources.Limits{MaxTransferBytes: 4 << 20}).Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(configValue(t, a)).To(Equal("one"))
}
