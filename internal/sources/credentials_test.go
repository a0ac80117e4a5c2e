package sources_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
)

// secret is the credential the URLs of these tests carry.
const secret = "s3cretT0ken"

// TestCredentialsInURLRefused: a URL with user information is refused before any fetch,
// with a message that shows the URL without it.
func TestCredentialsInURLRefused(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	cases := []struct {
		name string
		req  sources.Request
		want string
	}{
		{name: "https, user and password", req: sources.Request{Kind: sources.KindHTTPS, URL: "https://user:" + secret + "@example.com/c.tar.gz", Digest: digest},
			want: "https://REDACTED@example.com/c.tar.gz carries credentials in the URL"},
		{name: "https, a token as the user", req: sources.Request{Kind: sources.KindHTTPS, URL: "https://" + secret + "@example.com/c.tar.gz", Digest: digest},
			want: "https://REDACTED@example.com/c.tar.gz carries credentials"},
		{name: "git over https", req: sources.Request{Kind: sources.KindGit, URL: "https://x-access-token:" + secret + "@github.com/org/repo.git"},
			want: "https://REDACTED@github.com/org/repo.git carries credentials"},
		{name: "git over ssh with a password", req: sources.Request{Kind: sources.KindGit, URL: "ssh://git:" + secret + "@example.com/repo.git"},
			want: "ssh://REDACTED@example.com/repo.git carries credentials"},
		{name: "git, scp-like with a password", req: sources.Request{Kind: sources.KindGit, URL: "git:" + secret + "@example.com:org/repo.git"},
			want: "REDACTED@example.com:org/repo.git carries credentials"},
		{name: "oci", req: sources.Request{Kind: sources.KindOCI, URL: "oci://puller:" + secret + "@registry.example.com/b:v1"},
			want: "oci://REDACTED@registry.example.com/b:v1 carries credentials"},
		{name: "https, a URL that does not parse", req: sources.Request{Kind: sources.KindHTTPS, URL: "https://user:" + secret + "@exa mple.com:x/c.tar.gz", Digest: digest},
			want: "https://REDACTED@exa mple.com:x/c.tar.gz carries credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), tc.req)
			g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(err).To(MatchError(ContainSubstring("secretRef")))
			g.Expect(err.Error()).NotTo(ContainSubstring(secret))
		})
	}
	t.Run("ssh://git@ keeps its user name, which is no secret", func(t *testing.T) {
		g := NewWithT(t)
		_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(),
			sources.Request{Kind: sources.KindGit, URL: "ssh://git@example.com/repo.git"})
		g.Expect(err).To(MatchError(ContainSubstring("needs a private key")))
	})
}

// TestCredentialsInURLRedacted: behind the refusal, a URL with credentials that reached a
// fetch would still not show them: not in the artifact's revision (an add-on's
// status.source), nor in the error of a fetch that fails.
func TestCredentialsInURLRedacted(t *testing.T) {
	g := NewWithT(t)
	good := tarGz(t, writeTree(t, "one"), "")
	srv := newArchiveServer(t, map[string][]byte{"/c.tar.gz": good}, nil)
	withCreds := strings.Replace(srv.URL, "https://", "https://user:"+secret+"@", 1)
	f := newFetcher(t, sources.Limits{})

	a, err := sources.FetchUnvalidated(context.Background(), f, sources.Request{Kind: sources.KindHTTPS, URL: withCreds + "/c.tar.gz",
		Digest: sha(good), Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Revision).To(Equal(strings.Replace(srv.URL, "https://", "https://REDACTED@", 1) + "/c.tar.gz"))

	for _, req := range []sources.Request{
		{Kind: sources.KindHTTPS, URL: withCreds + "/none.tar.gz", Digest: sha(good), Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}},
		{Kind: sources.KindHTTPS, URL: withCreds + "/c.tar.gz", Digest: sha([]byte("other")), Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}},
		{Kind: sources.KindHTTPS, URL: withCreds + "/c.tar.gz", Digest: sha(good)},
		{Kind: sources.KindGit, URL: withCreds + "/repo.git", Auth: sources.Auth{CA: srv.ca(), InsecureLoopback: true}},
		{Kind: sources.KindGit, URL: withCreds + "/repo.git"},
		// net/http prints a URL's user name, and hides only its password.
		{Kind: sources.KindHTTPS, URL: strings.Replace(srv.URL, "https://", "https://"+secret+"@", 1) + "/c.tar.gz", Digest: sha(good)},
		{Kind: sources.KindGit, URL: strings.Replace(srv.URL, "https://", "https://"+secret+"@", 1) + "/repo.git"},
		{Kind: sources.KindOCI, URL: "puller:" + secret + "@" + strings.TrimPrefix(srv.URL, "https://") + "/b:v1"},
	} {
		_, err := sources.FetchUnvalidated(context.Background(), f, req)
		g.Expect(err).To(HaveOccurred(), "%s", req.URL)
		g.Expect(err.Error()).NotTo(ContainSubstring(secret))
		g.Expect(err.Error()).To(ContainSubstring("REDACTED"))
		g.Expect(err.Error()).NotTo(ContainSubstring("user:***"))
	}
}
