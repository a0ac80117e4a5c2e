package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

const testVersion = "v1.2.3-rc.1"

// testKey returns a new ECDSA P-256 signer, as `cosign generate-key-pair` makes, and its
// public key in PEM.
func testKey(t *testing.T) (signature.Signer, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signature.LoadSigner(key, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return signer, pub
}

// fakeRelease writes a release folder as Build does, from a random image and a minimal
// chart instead of compiled ones: Verify reads the same files either way.
func fakeRelease(t *testing.T, signer signature.Signer) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), testVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := BuildOptions{Version: testVersion, Dir: dir, ImageRepository: "registry.example/kaddons", DownloadURL: DefaultDownloadURL}

	index, err := random.Index(256, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		refNameAnnotation: testVersion, containerdNameAnnotation: o.ImageRepository + ":" + testVersion,
	})); err != nil {
		t.Fatal(err)
	}
	if err := tarFolder(layoutDir, filepath.Join(dir, ImageArchiveFile(testVersion))); err != nil {
		t.Fatal(err)
	}
	image := o.ImageRepository + ":" + testVersion + "@" + digest.String()
	write(t, filepath.Join(dir, InstallerFile), "kind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n      - name: manager\n        image: "+image+"\n")

	chartDir := filepath.Join(t.TempDir(), "kaddons")
	write(t, filepath.Join(chartDir, "Chart.yaml"), "apiVersion: v2\nname: kaddons\nversion: 1.2.3-rc.1\nappVersion: \""+testVersion+"\"\n")
	write(t, filepath.Join(chartDir, "values.yaml"), fmt.Sprintf("manager:\n  image:\n    repository: %s\n    tag: %q\n    digest: %q\n",
		o.ImageRepository, testVersion, digest))
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chartutil.Save(ch, dir); err != nil {
		t.Fatal(err)
	}

	archives := map[string]string{}
	for _, platform := range DefaultPluginPlatforms {
		data, err := tarGz(time.Unix(0, 0), []archiveFile{{pluginBinary, []byte("binary for " + platform)}, {completionScript, []byte("#!/bin/sh\n")}})
		if err != nil {
			t.Fatal(err)
		}
		archives[platform] = PluginArchiveFile(testVersion, platform)
		write(t, filepath.Join(dir, archives[platform]), string(data))
	}
	manifest, err := krewManifest(o, archives)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, KrewManifestFile), string(manifest))
	if err := writeChecksums(dir, signer); err != nil {
		t.Fatal(err)
	}
	return dir
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func edit(t *testing.T, path, old, replacement string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	write(t, path, strings.Replace(string(data), old, replacement, 1))
}

// TestVerify checks that Verify accepts a release as Build writes it and refuses every
// way one can differ from what was signed, each with an error that names the file.
func TestVerify(t *testing.T) {
	signer, pub := testKey(t)
	_, otherPub := testKey(t)
	tests := []struct {
		name string
		// change alters the release folder; resign signs the checksums again after it, as
		// a release made wrongly (not a tampered one) would be.
		change  func(t *testing.T, dir string)
		resign  bool
		key     []byte
		wantErr string
	}{
		{name: "as built", key: pub},
		{name: "another key", key: otherPub, wantErr: "checksums.txt.sig does not verify with the key"},
		{
			name: "a changed plugin archive",
			change: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, PluginArchiveFile(testVersion, "darwin/arm64")), "evil")
			},
			key:     pub,
			wantErr: PluginArchiveFile(testVersion, "darwin/arm64") + ": sha256 ",
		},
		{
			name: "a file nobody signed",
			change: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "extra.yaml"), "kind: ClusterRoleBinding\n")
			},
			key:     pub,
			wantErr: "extra.yaml is in the release folder but not in checksums.txt: it is not signed",
		},
		{
			name: "a changed checksums file",
			change: func(t *testing.T, dir string) {
				edit(t, filepath.Join(dir, ChecksumsFile), "  install.yaml", "  install.yaml\n")
			},
			key:     pub,
			wantErr: "checksums.txt.sig does not verify",
		},
		{
			name: "an installer that runs another image",
			change: func(t *testing.T, dir string) {
				edit(t, filepath.Join(dir, InstallerFile), "image: registry.example/kaddons:", "image: registry.example/other:")
			},
			resign:  true,
			key:     pub,
			wantErr: "install.yaml runs the image registry.example/other:" + testVersion + "@sha256:",
		},
		{
			name: "a krew manifest with a wrong checksum",
			change: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, PluginArchiveFile(testVersion, "linux/arm64")), "rebuilt")
			},
			resign:  true,
			key:     pub,
			wantErr: "kaddons.yaml: " + PluginArchiveFile(testVersion, "linux/arm64") + "'s sha256 is ",
		},
		{
			name: "an image tarball with a changed blob",
			change: func(t *testing.T, dir string) {
				archive := filepath.Join(dir, ImageArchiveFile(testVersion))
				tmp := t.TempDir()
				if err := untar(archive, tmp); err != nil {
					t.Fatal(err)
				}
				blobs, err := filepath.Glob(filepath.Join(tmp, "blobs", "sha256", "*"))
				if err != nil || len(blobs) == 0 {
					t.Fatalf("no blobs: %v", err)
				}
				// The largest blob: a manifest or a layer; either must be caught.
				largest := blobs[0]
				for _, b := range blobs {
					if a, c := fileSize(t, b), fileSize(t, largest); a > c {
						largest = b
					}
				}
				write(t, largest, "not the layer")
				if err := tarFolder(tmp, archive); err != nil {
					t.Fatal(err)
				}
			},
			resign:  true,
			key:     pub,
			wantErr: "kaddons-image-" + testVersion + ".oci.tar: ",
		},
		{
			name:    "a missing chart",
			change:  func(t *testing.T, dir string) { _ = os.Remove(filepath.Join(dir, ChartFile(testVersion))) },
			resign:  true,
			key:     pub,
			wantErr: "the release has no kaddons-1.2.3-rc.1.tgz",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeRelease(t, signer)
			if tc.change != nil {
				tc.change(t, dir)
			}
			if tc.resign {
				if err := writeChecksums(dir, signer); err != nil {
					t.Fatal(err)
				}
			}
			v, err := Verify(dir, tc.key)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if v.Version != testVersion || !strings.HasPrefix(v.Image, "registry.example/kaddons:"+testVersion+"@sha256:") {
					t.Errorf("Verify read version %q, image %q", v.Version, v.Image)
				}
				if len(v.Files) != 3+len(DefaultPluginPlatforms)+1 {
					t.Errorf("Verify checked %d files: %v", len(v.Files), v.Files)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Verify: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestKrewManifest checks the krew manifest of every default platform: its URL under the
// download URL of the version and the sha256 of each archive.
func TestKrewManifest(t *testing.T) {
	signer, _ := testKey(t)
	dir := fakeRelease(t, signer)
	p, err := readKrewManifest(filepath.Join(dir, KrewManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.Version != testVersion || len(p.Spec.Platforms) != 4 {
		t.Fatalf("manifest version %s, %d platforms", p.Spec.Version, len(p.Spec.Platforms))
	}
	for _, pl := range p.Spec.Platforms {
		platform := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		want := "https://github.com/kaddons/kaddons/releases/download/" + testVersion + "/" + PluginArchiveFile(testVersion, platform)
		if pl.URI != want {
			t.Errorf("%s: uri %s, want %s", platform, pl.URI, want)
		}
		sum, err := fileSHA256(filepath.Join(dir, PluginArchiveFile(testVersion, platform)))
		if err != nil {
			t.Fatal(err)
		}
		if pl.Sha256 != sum || pl.Bin != pluginBinary {
			t.Errorf("%s: sha256 %s bin %s, want %s and %s", platform, pl.Sha256, pl.Bin, sum, pluginBinary)
		}
	}
}

// TestBuildRefusesWhatIsNoRelease checks the version check that comes before any build.
func TestBuildRefusesWhatIsNoRelease(t *testing.T) {
	for _, v := range []string{"", "dev", "fdb05d8", "1.2.3", "v1.2", "v1.2.3-dirty+x"} {
		err := Build(t.Context(), BuildOptions{Version: v, Dir: t.TempDir(), ImagePlatforms: []string{"linux/amd64"}, PluginPlatforms: []string{"linux/amd64"}})
		if err == nil || !strings.Contains(err.Error(), "is not a release version") {
			t.Errorf("Build(%q): %v", v, err)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
