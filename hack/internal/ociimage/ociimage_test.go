package ociimage

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestImageLayersAndArchive(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/sbin/tool"), []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool", filepath.Join(dir, "usr/sbin/alias")); err != nil {
		t.Fatal(err)
	}
	tree, err := TreeFiles(dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	files := Sorted(append(tree,
		File{Name: "/bin", Symlink: "usr/bin", Mode: 0o777},
		File{Name: "/opt/app/run", Mode: 0o755, Data: []byte("x"),
			Xattrs: map[string]string{"security.capability": "\x01\x00\x00\x02"}}))
	created := time.Unix(7, 0).UTC()
	l, err := Layer(created, files)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(v1.Platform{OS: "linux", Architecture: "amd64"}, created,
		v1.Config{Entrypoint: []string{"/opt/app/run"}, User: "65532:65532"}, Addendum{Layer: l, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		switch h.Name {
		case "usr/sbin/alias":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "tool" {
				t.Errorf("alias: type %c -> %q, want a link to tool", h.Typeflag, h.Linkname)
			}
		case "opt/app/run":
			if h.PAXRecords["SCHILY.xattr.security.capability"] != "\x01\x00\x00\x02" {
				t.Errorf("run: PAX records %q, want the capability", h.PAXRecords)
			}
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: time %s, want %s", h.Name, h.ModTime, created)
		}
	}
	want := []string{"bin", "opt", "opt/app", "opt/app/run", "usr", "usr/sbin", "usr/sbin/alias", "usr/sbin/tool"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}

}

func TestWriteDockerArchive(t *testing.T) {
	l, err := Layer(time.Unix(0, 0).UTC(), []File{{Name: "/x", Mode: 0o644, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(v1.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(0, 0).UTC(), v1.Config{}, Addendum{Layer: l})
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "a", "img.tar")
	if err := WriteDockerArchive(out, "registry.k8s.io/x/y:v1", img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A docker archive carries the same config (and so the same layers' diff IDs).
	c1, _ := img.ConfigName()
	c2, _ := back.ConfigName()
	if c1 != c2 {
		t.Errorf("archive holds config %s, want %s", c2, c1)
	}
	if err := WriteDockerArchive(out, "y:v1", img); err == nil {
		t.Error("a reference without a registry was accepted")
	}
}

func TestParents(t *testing.T) {
	if got := Parents("/a/b/c"); !reflect.DeepEqual(got, []string{"/a", "/a/b"}) {
		t.Errorf("Parents(/a/b/c) = %q", got)
	}
}
