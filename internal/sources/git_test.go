package sources_test

import (
	"context"
	"encoding/pem"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
)

// gitServer is a repository served by git http-backend over TLS on 127.0.0.1.
type gitServer struct {
	*httptest.Server
	work string // the working copy commits are made in
	bare string // the served repository
}

func newGitServer(t *testing.T) *gitServer {
	t.Helper()
	backend := filepath.Join(gitOutput(t, "", "--exec-path"), "git-http-backend")
	root := t.TempDir()
	s := &gitServer{work: filepath.Join(root, "work"), bare: filepath.Join(root, "repo.git")}
	gitOutput(t, "", "init", "-q", "-b", "main", s.work)
	gitOutput(t, "", "init", "-q", "--bare", "-b", "main", s.bare)
	gitOutput(t, s.work, "remote", "add", "origin", s.bare)
	s.Server = httptest.NewTLSServer(&cgi.Handler{Path: backend, Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(s.Close)
	return s
}

func gitOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com",
		"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit replaces channels/ with the tree of value, commits, pushes, and returns the commit.
func (s *gitServer) commit(t *testing.T, value string, tags ...string) string {
	t.Helper()
	dst := filepath.Join(s.work, "channels")
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(writeTree(t, value))); err != nil {
		t.Fatal(err)
	}
	gitOutput(t, s.work, "add", "-A")
	gitOutput(t, s.work, "commit", "-q", "-m", value)
	for _, tag := range tags {
		gitOutput(t, s.work, "tag", "-a", "-m", tag, tag)
	}
	gitOutput(t, s.work, "push", "-q", "--tags", "origin", "main")
	return gitOutput(t, s.work, "rev-parse", "HEAD")
}

func (s *gitServer) request(ref sources.GitRef) sources.Request {
	return sources.Request{Kind: sources.KindGit, URL: s.URL + "/repo.git", Git: ref, Path: "channels",
		Auth: sources.Auth{CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), InsecureLoopback: true}}
}

func TestGitFetch(t *testing.T) {
	srv := newGitServer(t)
	first := srv.commit(t, "one", "v1.0.0")
	second := srv.commit(t, "two", "v1.1.0")
	third := srv.commit(t, "three", "v2.0.0")
	ctx := context.Background()
	cases := []struct {
		name         string
		ref          sources.GitRef
		digest       string
		wantValue    string
		wantRevision string
		wantReason   string
	}{
		{name: "default branch", wantValue: "three", wantRevision: "main@sha1:" + third},
		{name: "branch", ref: sources.GitRef{Branch: "main"}, wantValue: "three", wantRevision: "main@sha1:" + third},
		{name: "tag", ref: sources.GitRef{Tag: "v1.0.0"}, wantValue: "one", wantRevision: "v1.0.0@sha1:" + first},
		{name: "semver range", ref: sources.GitRef{SemVer: ">=1.0.0 <2.0.0"}, wantValue: "two", wantRevision: "v1.1.0@sha1:" + second},
		{name: "commit", ref: sources.GitRef{Commit: first}, wantValue: "one", wantRevision: "sha1:" + first},
		{name: "commit pin", ref: sources.GitRef{Branch: "main"}, digest: "sha1:" + third, wantValue: "three", wantRevision: "main@sha1:" + third},
		{name: "commit pin mismatch", ref: sources.GitRef{Branch: "main"}, digest: "sha1:" + first, wantReason: sources.ReasonDigestMismatch},
		{name: "tree pin mismatch", ref: sources.GitRef{Branch: "main"}, digest: "sha256:" + strings.Repeat("a", 64), wantReason: sources.ReasonDigestMismatch},
		{name: "no tag in range", ref: sources.GitRef{SemVer: ">=3.0.0"}, wantReason: sources.ReasonFetchFailed},
		{name: "missing branch", ref: sources.GitRef{Branch: "nope"}, wantReason: sources.ReasonFetchFailed},
		{name: "short commit", ref: sources.GitRef{Commit: first[:7]}, wantReason: sources.ReasonInvalidSource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := srv.request(tc.ref)
			req.Digest = tc.digest
			a, err := newFetcher(t, sources.Limits{}).Fetch(ctx, req)
			if tc.wantReason != "" {
				g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(configValue(t, a)).To(Equal(tc.wantValue))
			g.Expect(a.Revision).To(Equal(tc.wantRevision))
			digest, err := sources.TreeDigest(a.Dir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Digest).To(Equal(digest))
		})
	}
}

func TestGitNewCommitAndDown(t *testing.T) {
	g := NewWithT(t)
	srv := newGitServer(t)
	srv.commit(t, "one")
	f := newFetcher(t, sources.Limits{})
	req := srv.request(sources.GitRef{Branch: "main"})
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Dir).To(Equal(a.Dir))

	srv.commit(t, "two")
	b, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Digest).NotTo(Equal(a.Digest))
	g.Expect(configValue(t, b)).To(Equal("two"))

	srv.Close()
	_, err = f.Fetch(context.Background(), req)
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonFetchFailed))
	g.Expect(sources.IsTransient(err)).To(BeTrue(), "%v", err)
	last, ok := f.Last(req)
	g.Expect(ok).To(BeTrue())
	g.Expect(configValue(t, last)).To(Equal("two"))
}

func TestGitRefusals(t *testing.T) {
	srv := newGitServer(t)
	srv.commit(t, "one")
	if err := os.Symlink("/etc/passwd", filepath.Join(srv.work, "channels", "linked")); err != nil {
		t.Fatal(err)
	}
	gitOutput(t, srv.work, "add", "-A")
	gitOutput(t, srv.work, "commit", "-q", "-m", "link")
	gitOutput(t, srv.work, "push", "-q", "origin", "main")
	ctx := context.Background()
	cases := []struct {
		name       string
		req        sources.Request
		limits     sources.Limits
		wantReason string
		wantError  string
	}{
		{name: "a symbolic link in the tree", req: srv.request(sources.GitRef{Branch: "main"}), wantReason: sources.ReasonArchiveRefused, wantError: "symbolic link"},
		{name: "too many files", req: func() sources.Request {
			r := srv.request(sources.GitRef{Branch: "main"})
			r.Git.Commit = gitOutput(t, srv.work, "rev-parse", "HEAD~1")
			return r
		}(), limits: sources.Limits{MaxFiles: 3}, wantReason: sources.ReasonArchiveRefused, wantError: "more than 3 entries"},
		{name: "ssh without known_hosts", req: sources.Request{Kind: sources.KindGit, URL: "ssh://git@127.0.0.1:2222/repo.git",
			Auth: sources.Auth{SSHPrivateKey: []byte("key")}}, wantReason: sources.ReasonInvalidSource, wantError: "known_hosts"},
		{name: "plain http elsewhere", req: sources.Request{Kind: sources.KindGit, URL: "http://git.example.com/repo.git",
			Auth: sources.Auth{Insecure: true}}, wantReason: sources.ReasonInvalidSource},
		{name: "a local repository", req: sources.Request{Kind: sources.KindGit, URL: "file://" + srv.bare},
			wantReason: sources.ReasonInvalidSource},
		{name: "a path outside", req: func() sources.Request {
			r := srv.request(sources.GitRef{Branch: "main"})
			r.Path = "../x"
			return r
		}(), wantReason: sources.ReasonInvalidSource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := newFetcher(t, tc.limits).Fetch(ctx, tc.req)
			g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
			if tc.wantError != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)))
			}
		})
	}
}
