//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/gomega"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// releaseImageRepository is the repository a test release names; nothing pulls from it.
const releaseImageRepository = "ghcr.io/kaddons/kaddons"

// testRelease is a release a test made with make release.
type testRelease struct {
	version string
	dir     string // the release folder, RELEASE_DIR/VERSION
	image   string // the image install.yaml runs, repository:version@digest
}

// verifiedLine is what make release-verify prints of a release that verifies.
var verifiedLine = regexp.MustCompile(`verified \S+: \d+ files, image (\S+)`)

// makeRelease makes the release version under workDir/releases with make release, for
// linux/amd64 and the plugin's pluginPlatforms, signed with a key made for it, and checks
// it with make release-verify and the key's public half, as a user does before trusting it.
func makeRelease(g Gomega, version string, pluginPlatforms ...string) testRelease {
	run := func(args ...string) string {
		cmd := exec.Command("make", args...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "make %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	keyDir := filepath.Join(workDir, "release-keys", version)
	g.Expect(os.MkdirAll(keyDir, 0o700)).To(Succeed())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	private, err := cryptoutils.MarshalPrivateKeyToPEM(key)
	g.Expect(err).NotTo(HaveOccurred())
	public, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(keyDir, "release.key"), private, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(keyDir, "release.pub"), public, 0o600)).To(Succeed())

	releases := filepath.Join(workDir, "releases")
	run("release", "VERSION="+version, "RELEASE_DIR="+releases, "RELEASE_IMAGE="+releaseImageRepository,
		"IMAGE_PLATFORMS=linux/amd64", "PLUGIN_PLATFORMS="+strings.Join(pluginPlatforms, ","),
		"SIGNING_KEY="+filepath.Join(keyDir, "release.key"))
	verified := run("release-verify", "VERSION="+version, "RELEASE_DIR="+releases,
		"SIGNING_PUBLIC_KEY="+filepath.Join(keyDir, "release.pub"))
	m := verifiedLine.FindStringSubmatch(verified)
	g.Expect(m).NotTo(BeNil(), "make release-verify printed:\n%s", verified)
	r := testRelease{version: version, dir: filepath.Join(releases, version), image: m[1]}
	g.Expect(r.image).To(HavePrefix(releaseImageRepository + ":" + version + "@sha256:"))
	return r
}
