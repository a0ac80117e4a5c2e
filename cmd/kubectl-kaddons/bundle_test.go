package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources/sourcestest"
)

func TestBundleBuildPushVerify(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	signKey, pubKey := sourcestest.WriteKeyPair(t)
	_, otherPub := sourcestest.WriteKeyPair(t)
	channelsDir := filepath.Join("..", "..", "channels")

	// build: an OCI layout whose index names the image.
	layoutDir := filepath.Join(t.TempDir(), "layout")
	code, out, errOut := runPlugin(t, "", "bundle", "build", channelsDir, "-o", layoutDir, "--min-operator-version", "v0.2.0")
	g.Expect(code).To(Equal(0), errOut)
	built := strings.TrimSpace(out)
	g.Expect(built).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	index, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var idx struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	g.Expect(json.Unmarshal(index, &idx)).To(Succeed())
	g.Expect(idx.Manifests).To(HaveLen(1))
	g.Expect(idx.Manifests[0].Digest).To(Equal(built))

	code, _, errOut = runPlugin(t, "", "bundle", "build", channelsDir, "-o", filepath.Join(t.TempDir(), "bundle.tar"))
	g.Expect(code).To(Equal(0), errOut)

	// push: signed; prints the reference by digest, the same digest build wrote.
	code, out, errOut = runPlugin(t, "", "bundle", "push", channelsDir, host+"/kaddons/channels:v1",
		"--sign-key", signKey, "--insecure", "--min-operator-version", "v0.2.0")
	g.Expect(code).To(Equal(0), errOut)
	pushed := strings.TrimSpace(out)
	g.Expect(pushed).To(Equal(host + "/kaddons/channels@" + built))

	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "verified", args: []string{host + "/kaddons/channels:v1", "--key", pubKey}, wantOut: "Signature:           verified (1 key(s))"},
		{name: "by digest, with a passing pre-flight", args: []string{pushed, "--key", pubKey, "--operator-version", "v0.2.1",
			"--kubernetes-version", "v1.33.0", "--digest", built}, wantOut: "passed for operator v0.2.1, Kubernetes v1.33.0"},
		{name: "wrong key", args: []string{pushed, "--key", otherPub}, wantCode: 1, wantErr: "error: VerificationFailed: "},
		{name: "operator too old", args: []string{pushed, "--key", pubKey, "--operator-version", "v0.1.0"}, wantCode: 1,
			wantErr: "error: OperatorTooOld: the bundle needs operator v0.2.0 or newer, this operator is v0.1.0"},
		{name: "wrong digest", args: []string{host + "/kaddons/channels:v1", "--digest", "sha256:" + strings.Repeat("0", 64)},
			wantCode: 1, wantErr: "error: DigestMismatch: "},
		{name: "missing", args: []string{host + "/kaddons/none:v1"}, wantCode: 1, wantErr: "error: FetchFailed: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, out, errOut := runPlugin(t, "", append([]string{"bundle", "verify", "--insecure"}, tc.args...)...)
			g.Expect(code).To(Equal(tc.wantCode), errOut)
			g.Expect(out).To(ContainSubstring(tc.wantOut))
			g.Expect(errOut).To(ContainSubstring(tc.wantErr))
		})
	}

	// An unsigned push verifies only without a key.
	code, out, errOut = runPlugin(t, "", "bundle", "push", channelsDir, host+"/kaddons/unsigned:v1", "--insecure")
	g.Expect(code).To(Equal(0), errOut)
	code, _, errOut = runPlugin(t, "", "bundle", "verify", "--insecure", strings.TrimSpace(out), "--key", pubKey)
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("error: VerificationFailed: "))
	g.Expect(errOut).To(ContainSubstring("is not signed"))
}

func TestBundleBuildRefusesInvalidTrees(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{name: "no channel", files: map[string]string{"packages/demo/1.0.0/kustomization.yaml": "resources: []\n"}, wantErr: "no channel file"},
		{name: "an unnamed channel entry", files: map[string]string{"stable": "manifests:\n- version: 1.0.0\n"}, wantErr: "has no name"},
		{name: "a missing package", files: map[string]string{"stable": "manifests:\n- name: demo\n  version: 1.0.0\n"},
			wantErr: "demo 1.0.0, which has no package"},
		{name: "a package that does not render", files: map[string]string{
			"stable":                                 "manifests:\n- name: demo\n  version: 1.0.0\n",
			"packages/demo/1.0.0/kustomization.yaml": "resources:\n- missing.yaml\n"}, wantErr: "package demo 1.0.0"},
		{name: "bad package metadata", files: map[string]string{
			"stable":                                 "manifests:\n- name: demo\n  version: 1.0.0\n",
			"packages/demo/1.0.0/kustomization.yaml": "resources: []\n",
			"packages/demo/1.0.0/metadata.yaml":      "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=one'\n"}, wantErr: "not a version range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(dir, filepath.FromSlash(name))
				g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(p, []byte(body), 0o644)).To(Succeed())
			}
			code, _, errOut := runPlugin(t, "", "bundle", "build", dir, "-o", filepath.Join(t.TempDir(), "out"))
			g.Expect(code).To(Equal(1))
			g.Expect(errOut).To(ContainSubstring(tc.wantErr))
		})
	}
}
