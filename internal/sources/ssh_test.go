package sources_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kaddons/kaddons/internal/sources"
)

// sshGitServer serves the repositories under root over SSH on 127.0.0.1: it accepts the
// client key given and runs git upload-pack for an exec request.
func sshGitServer(t *testing.T, root string, clientKey ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != string(clientKey.Marshal()) {
			return nil, fmt.Errorf("unknown key")
		}
		return &ssh.Permissions{}, nil
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(conn, cfg, root)
		}
	}()
	return ln.Addr().String(), signer.PublicKey()
}

func serveSSH(conn net.Conn, cfg *ssh.ServerConfig, root string) {
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close() //nolint:errcheck
			for req := range requests {
				if req.Type != "exec" || len(req.Payload) < 4 {
					_ = req.Reply(false, nil)
					continue
				}
				n := binary.BigEndian.Uint32(req.Payload)
				command := string(req.Payload[4 : 4+n])
				name, arg, _ := strings.Cut(command, " ")
				if name != "git-upload-pack" {
					_ = req.Reply(false, nil)
					return
				}
				_ = req.Reply(true, nil)
				cmd := exec.Command("git", "upload-pack", filepath.Join(root, strings.Trim(arg, "'")))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
				}
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
				return
			}
		}()
	}
}

// sshClientKey returns a new ed25519 client key: its public key, for the server's
// authorized keys, and its private key in PEM, as a source's Secret holds it.
func sshClientKey(t *testing.T) (ssh.PublicKey, []byte) {
	t.Helper()
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	return pub, pem.EncodeToMemory(block)
}

func TestGitSSH(t *testing.T) {
	srv := newGitServer(t)
	srv.commit(t, "one")
	sshClientPub, clientKey := sshClientKey(t)
	addr, hostKey := sshGitServer(t, filepath.Dir(srv.bare), sshClientPub)
	_, otherHostPriv, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := ssh.NewSignerFromKey(otherHostPriv)

	knownHosts := func(k ssh.PublicKey) []byte {
		return []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, k) + "\n")
	}
	url := "ssh://git@" + addr + "/repo.git"
	cases := []struct {
		name       string
		knownHosts []byte
		wantReason string
		wantError  string
	}{
		{name: "the host key in known_hosts", knownHosts: knownHosts(hostKey)},
		{name: "another host key", knownHosts: knownHosts(otherSigner.PublicKey()), wantReason: sources.ReasonFetchFailed, wantError: "key mismatch"},
		{name: "no known_hosts", wantReason: sources.ReasonInvalidSource, wantError: "needs known_hosts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := sources.Request{Kind: sources.KindGit, URL: url, Git: sources.GitRef{Branch: "main"}, Path: "channels",
				Auth: sources.Auth{SSHPrivateKey: clientKey, KnownHosts: tc.knownHosts, InsecureLoopback: true}}
			a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
			if tc.wantReason != "" {
				g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(configValue(t, a)).To(Equal("one"))
		})
	}
}
