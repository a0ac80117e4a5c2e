package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testMeta = metadata{version: "v1.2.3", revision: "0123abcd", source: "https://example.com/kaddons", created: time.Unix(1700000000, 0).UTC()}

// testIndex assembles an index for two platforms from the test binary, which has Go
// build information as the manager does.
func testIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	binary, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	images := make([]platformImage, 0, 2)
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		img, err := newImage(p, binary, []byte("-----BEGIN CERTIFICATE-----\n"), testMeta)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, platformImage{platform: p, image: img})
	}
	return newIndex(images, testMeta)
}

// files lists the entries of the image's flattened file system by path.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
}

func TestImage(t *testing.T) {
	// Validate what lands on disk: the raw manifests, configs and blobs, read back.
	dir := filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dir, "v1", testIndex(t)); err != nil {
		t.Fatal(err)
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	rootManifest, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := root.ImageIndex(rootManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the index is not valid: %v", err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(manifest.Manifests))
	}
	for _, desc := range manifest.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != desc.Platform.OS || cfg.Architecture != desc.Platform.Architecture {
			t.Errorf("config says %s/%s, the index %s", cfg.OS, cfg.Architecture, desc.Platform)
		}
		if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/manager" {
			t.Errorf("user %q, entrypoint %q", cfg.Config.User, cfg.Config.Entrypoint)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.source":   testMeta.source,
			"org.opencontainers.image.version":  testMeta.version,
			"org.opencontainers.image.revision": testMeta.revision,
		} {
			if got := cfg.Config.Labels[k]; got != want {
				t.Errorf("label %s = %q, want %q", k, got, want)
			}
		}
		if !cfg.Created.Equal(testMeta.created) {
			t.Errorf("created %s, want %s", cfg.Created, testMeta.created)
		}

		checkFiles(t, img)
	}
}

// checkFiles checks the owner, mode and time of the image's files.
func checkFiles(t *testing.T, img v1.Image) {
	t.Helper()
	fs := files(t, img)
	for name, want := range map[string]struct {
		mode     int64
		uid, gid int
	}{
		"/manager":                           {0o755, 0, 0},
		"/etc/passwd":                        {0o644, 0, 0},
		"/etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0},
		"/home/nonroot":                      {0o700, 65532, 65532},
		"/tmp":                               {0o1777, 0, 0},
		sbomPath:                             {0o644, 0, 0},
	} {
		h, ok := fs[name]
		if !ok {
			t.Errorf("%s is missing from the image", name)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.gid || !h.ModTime.Equal(testMeta.created) {
			t.Errorf("%s: mode %o uid %d gid %d mtime %s", name, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
	}
}

func TestSBOMListsTheBinarysModules(t *testing.T) {
	binary, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := spdxSBOM(binary, v1.Platform{OS: "linux", Architecture: "amd64"}, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdx
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Relationships) != len(doc.Packages) {
		t.Fatalf("version %s, %d packages, %d relationships", doc.SPDXVersion, len(doc.Packages), len(doc.Relationships))
	}
	found := false
	for _, p := range doc.Packages {
		if p.Name == "github.com/google/go-containerregistry" {
			found = len(p.ExternalRefs) == 1 && strings.HasPrefix(p.ExternalRefs[0].ReferenceLocator, "pkg:golang/github.com/google/go-containerregistry@v") &&
				len(p.Checksums) == 1 && len(p.Checksums[0].ChecksumValue) == 64
		}
	}
	if !found {
		t.Errorf("the SBOM lacks go-containerregistry with its purl and checksum:\n%s", data)
	}
}

func TestImageIsReproducible(t *testing.T) {
	a, err := testIndex(t).Digest()
	if err != nil {
		t.Fatal(err)
	}
	b, err := testIndex(t).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("two builds of the same input: %s and %s", a, b)
	}
}

func TestWriteLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "image")
	idx := testIndex(t)
	for range 2 { // the second run replaces the first layout
		if err := writeLayout(dir, "v1", idx); err != nil {
			t.Fatal(err)
		}
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("index.json lists %+v, want the index %s named v1", m.Manifests, want)
	}

	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(other, "v1", idx); err == nil {
		t.Fatal("writeLayout replaced a folder that is not an OCI layout")
	}
}

func TestOCILayout(t *testing.T) {
	for _, tc := range []struct {
		in, dir, tag string
		ok           bool
	}{
		{in: "oci:bin/image", dir: "bin/image", tag: "latest", ok: true},
		{in: "oci:bin/image:v1", dir: "bin/image", tag: "v1", ok: true},
		{in: "oci:/tmp/a:b/c", dir: "/tmp/a:b/c", tag: "latest", ok: true},
		{in: "127.0.0.1:5000/kaddons:v1"},
	} {
		dir, tag, ok := ociLayout(tc.in)
		if dir != tc.dir || tag != tc.tag || ok != tc.ok {
			t.Errorf("ociLayout(%q) = %q, %q, %v", tc.in, dir, tag, ok)
		}
	}
}
