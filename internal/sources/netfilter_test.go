package sources_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// TestLoopbackRefusedWithoutInsecureLoopback: a server on loopback is refused, for every
// kind that goes over the network, unless the request sets InsecureLoopback; the error
// names the address and the rule.
func TestLoopbackRefusedWithoutInsecureLoopback(t *testing.T) {
	archive := tarGz(t, writeTree(t, "one"), "")
	archives := newArchiveServer(t, map[string][]byte{"/c.tar.gz": archive}, nil)
	gitSrv := newGitServer(t)
	gitSrv.commit(t, "one")
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1", publish.BuildOptions{})

	sshClientPub, clientKey := sshClientKey(t)
	sshAddr, hostKey := sshGitServer(t, filepath.Dir(gitSrv.bare), sshClientPub)

	ociTLS := ociRequest(reg.host() + "/bundles/demo:v1")
	ociTLS.Auth.Insecure = false
	cases := []struct {
		name string
		req  sources.Request
	}{
		{name: "https", req: sources.Request{Kind: sources.KindHTTPS, URL: archives.URL + "/c.tar.gz", Digest: sha(archive),
			Auth: sources.Auth{CA: archives.ca()}}},
		{name: "git over https", req: gitSrv.request(sources.GitRef{Branch: "main"})},
		{name: "git over https, a commit", req: gitSrv.request(sources.GitRef{Commit: strings.Repeat("a", 40)})},
		{name: "git over ssh", req: sources.Request{Kind: sources.KindGit, URL: "ssh://git@" + sshAddr + "/repo.git",
			Git: sources.GitRef{Branch: "main"}, Path: "channels", Auth: sources.Auth{SSHPrivateKey: clientKey,
				KnownHosts: []byte(knownhosts.Line([]string{knownhosts.Normalize(sshAddr)}, hostKey) + "\n")}}},
		{name: "oci", req: ociTLS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFetcher(t, sources.Limits{})
			req := tc.req
			req.Auth.InsecureLoopback = false
			_, err := f.Fetch(context.Background(), req)
			g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
			g.Expect(sources.IsTransient(err)).To(BeFalse())
			g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to 127.0.0.1: loopback addresses (127.0.0.0/8, ::1) are refused unless the AddonSource sets insecureLoopback")))

			req.Auth.InsecureLoopback = true
			_, err = f.Fetch(context.Background(), req)
			if tc.req.Git.Commit != "" {
				// No such commit; what matters is that the server was reached.
				g.Expect(err).NotTo(MatchError(ContainSubstring("refusing to connect")))
				return
			}
			if tc.name == "oci" {
				// The registry speaks plain HTTP, which only insecure allows.
				g.Expect(err).To(MatchError(ContainSubstring("refusing plain HTTP")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

// TestLoopbackByName: a name is checked by the addresses it resolves to, at dial time.
func TestLoopbackByName(t *testing.T) {
	g := NewWithT(t)
	archive := tarGz(t, writeTree(t, "one"), "")
	srv := newArchiveServer(t, map[string][]byte{"/c.tar.gz": archive}, nil)
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/c.tar.gz"
	_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(),
		sources.Request{Kind: sources.KindHTTPS, URL: url, Digest: sha(archive), Auth: sources.Auth{CA: srv.ca()}})
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
	g.Expect(err).To(MatchError(MatchRegexp(`refusing to connect to (127\.0\.0\.1|::1) \(localhost\): loopback addresses`)))
}

// TestNeverFetchedAddresses: link-local, metadata, unspecified and multicast addresses are
// refused for every kind, insecureLoopback or not, before any byte is sent.
func TestNeverFetchedAddresses(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a", 64)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sshAuth := sources.Auth{SSHPrivateKey: pem.EncodeToMemory(block),
		KnownHosts: []byte(knownhosts.Line([]string{knownhosts.Normalize("169.254.10.10:22")}, signer.PublicKey()) + "\n")}
	cases := []struct {
		name     string
		req      sources.Request
		wantRule string
	}{
		{name: "https to the metadata server", req: sources.Request{Kind: sources.KindHTTPS,
			URL: "https://169.254.169.254/latest/meta-data/c.tar.gz", Digest: digest},
			wantRule: "refusing to connect to 169.254.169.254: cloud metadata addresses"},
		{name: "https to AWS metadata over IPv6", req: sources.Request{Kind: sources.KindHTTPS,
			URL: "https://[fd00:ec2::254]/c.tar.gz", Digest: digest},
			wantRule: "refusing to connect to fd00:ec2::254: cloud metadata addresses"},
		{name: "git to Alibaba's metadata server", req: sources.Request{Kind: sources.KindGit,
			URL: "https://100.100.100.200/repo.git"},
			wantRule: "refusing to connect to 100.100.100.200: cloud metadata addresses"},
		{name: "git to a link-local address", req: sources.Request{Kind: sources.KindGit,
			URL: "https://169.254.10.10/repo.git", Git: sources.GitRef{Commit: strings.Repeat("b", 40)}},
			wantRule: "refusing to connect to 169.254.10.10: link-local addresses (169.254.0.0/16, fe80::/10)"},
		{name: "git over ssh to a link-local address", req: sources.Request{Kind: sources.KindGit,
			URL: "ssh://git@169.254.10.10:22/repo.git", Git: sources.GitRef{Branch: "main"}, Auth: sshAuth},
			wantRule: "refusing to connect to 169.254.10.10: link-local addresses"},
		{name: "oci to the unspecified address", req: sources.Request{Kind: sources.KindOCI, URL: "0.0.0.0:5000/b:v1"},
			wantRule: "refusing to connect to 0.0.0.0: unspecified addresses"},
		{name: "oci to a multicast address", req: sources.Request{Kind: sources.KindOCI, URL: "[ff02::1]:5000/b:v1"},
			wantRule: "refusing to connect to ff02::1: multicast addresses"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := tc.req
			req.Auth.InsecureLoopback = true
			_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
			g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantRule)))
		})
	}
}

// TestInsecureNeedsInsecureLoopback: plain HTTP to a loopback registry needs
// insecureLoopback as well as insecure.
func TestInsecureNeedsInsecureLoopback(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	pushBundle(t, reg, writeTree(t, "one"), "bundles/demo:v1", publish.BuildOptions{})
	req := ociRequest(reg.host() + "/bundles/demo:v1")
	req.Auth.InsecureLoopback = false
	_, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("needs insecureLoopback as well")))

	archive := tarGz(t, writeTree(t, "one"), "")
	_, err = newFetcher(t, sources.Limits{}).Fetch(context.Background(), sources.Request{Kind: sources.KindHTTPS,
		URL: "http://127.0.0.1:1/c.tar.gz", Digest: sha(archive), Auth: sources.Auth{Insecure: true}})
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
	_, err = newFetcher(t, sources.Limits{}).Fetch(context.Background(), sources.Request{Kind: sources.KindGit,
		URL: "http://127.0.0.1:1/repo.git", Auth: sources.Auth{Insecure: true}})
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonInvalidSource), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("with insecure and insecureLoopback set")))
}
