package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// Every image that the CoreDNS and metrics-server packages name has a recipe, under
// exactly that reference.
func TestRecipesCoverThePackages(t *testing.T) {
	refs := map[string]bool{}
	for _, r := range packageRecipes() {
		if refs[r.ref] {
			t.Errorf("two recipes for %s", r.ref)
		}
		refs[r.ref] = true
		if !strings.HasSuffix(r.ref, ":"+r.version) {
			t.Errorf("%s: tag is not the version %s", r.ref, r.version)
		}
	}
	image := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)
	for _, pkg := range []string{"coredns", "metrics-server"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "channels", "packages", pkg, "*", "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no manifests of %s: %v", pkg, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range image.FindAllSubmatch(data, -1) {
				if !refs[string(m[1])] {
					t.Errorf("%s names %s, which no recipe builds", f, m[1])
				}
			}
		}
	}
}

func TestSelectRecipes(t *testing.T) {
	all := packageRecipes()
	got, err := selectRecipes(all, []string{"coredns", "metrics-server:v0.8.0"})
	if err != nil {
		t.Fatal(err)
	}
	refs := make([]string, 0, len(got))
	for _, r := range got {
		refs = append(refs, r.ref)
	}
	want := "registry.k8s.io/coredns/coredns:v1.11.3 registry.k8s.io/coredns/coredns:v1.12.1 " +
		"registry.k8s.io/coredns/coredns:v1.14.6 registry.k8s.io/metrics-server/metrics-server:v0.8.0"
	if strings.Join(refs, " ") != want {
		t.Errorf("selected %q, want %s", refs, want)
	}
	if _, err := selectRecipes(all, []string{"coredns:v0.0.1"}); err == nil {
		t.Error("an unknown version was selected")
	}
}

func TestCheckLinked(t *testing.T) {
	self, err := os.ReadFile("/bin/true") // a dynamically linked Debian program
	if err != nil {
		t.Fatalf("reading a dynamically linked program of the machine: %v", err)
	}
	files := append(usrMergeLinks(), ociimage.File{Name: "/usr/bin/true", Mode: 0o755, Data: self})
	err = checkLinked(files)
	if err == nil || !strings.Contains(err.Error(), "libc.so.6") || !strings.Contains(err.Error(), "no interpreter") {
		t.Fatalf("a program without its libc passed: %v", err)
	}
	libc, err1 := os.ReadFile("/lib/x86_64-linux-gnu/libc.so.6")
	ld, err2 := os.ReadFile("/lib64/ld-linux-x86-64.so.2")
	if err1 != nil || err2 != nil {
		t.Fatalf("reading the machine's glibc: %v %v", err1, err2)
	}
	files = append(files,
		ociimage.File{Name: "/usr/lib/x86_64-linux-gnu/libc.so.6", Mode: 0o755, Data: libc},
		ociimage.File{Name: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", Mode: 0o755, Data: ld},
		ociimage.File{Name: "/usr/lib64/ld-linux-x86-64.so.2", Symlink: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"})
	if err := checkLinked(files); err != nil {
		t.Errorf("a complete root file system failed: %v", err)
	}
}

func TestMergedUsr(t *testing.T) {
	for in, want := range map[string]string{"/bin/sh": "/usr/bin/sh", "/lib64/ld.so": "/usr/lib64/ld.so",
		"/sbin": "/usr/sbin", "/binary": "/binary", "/etc/x": "/etc/x", "/usr/lib/a": "/usr/lib/a"} {
		if got := mergedUsr(in); got != want {
			t.Errorf("mergedUsr(%s) = %s, want %s", in, got, want)
		}
	}
}

// A .deb's data archive comes out merged into /usr, documentation left out but for the
// copyright file, links and modes kept.
func TestDebFiles(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatalf("dpkg-deb, which the image builds need, is not on PATH: %v", err)
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "pkg")
	for name, data := range map[string]string{
		"DEBIAN/control": "Package: kaddons-test\nVersion: 1\nArchitecture: amd64\nMaintainer: x <x@example.com>\nDescription: test\n",
		"sbin/tool":      "#!/bin/sh\n", "usr/share/doc/kaddons-test/copyright": "c", "usr/share/doc/kaddons-test/README": "r",
		"usr/share/man/man8/tool.8": "m",
	} {
		p := filepath.Join(pkg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("tool", filepath.Join(pkg, "sbin/alias")); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, filepath.Join(dir, "p.deb"))
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, stderr.String())
	}
	files, err := debFiles(filepath.Join(dir, "p.deb"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ociimage.File{}
	for _, f := range files {
		got[f.Name] = f
	}
	if f := got["/usr/sbin/tool"]; f.Mode != 0o755 || string(f.Data) != "#!/bin/sh\n" {
		t.Errorf("/usr/sbin/tool: %+v", f)
	}
	if got["/usr/sbin/alias"].Symlink != "tool" {
		t.Errorf("/usr/sbin/alias: %+v", got["/usr/sbin/alias"])
	}
	for _, n := range []string{"/sbin/tool", "/usr/share/doc/kaddons-test/README", "/usr/share/man/man8/tool.8"} {
		if _, ok := got[n]; ok {
			t.Errorf("%s is in the image", n)
		}
	}
	if _, ok := got["/usr/share/doc/kaddons-test/copyright"]; !ok {
		t.Error("the copyright file is missing")
	}
}
