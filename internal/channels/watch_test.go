package channels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestChangesFollowsADirectorySource(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stable"), []byte("manifests: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewCatalog(dir, "")
	changes := s.Changes(20 * time.Millisecond)
	select {
	case <-changes:
		t.Fatal("a change was reported before any file changed")
	case <-time.After(100 * time.Millisecond):
	}
	// A fixed channel file: a new size and modification time.
	if err := os.WriteFile(filepath.Join(dir, "stable"), []byte("manifests:\n- name: coredns\n  version: 1.12.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatal("the change of channels/stable was not reported")
	}
	if NewFSCatalog(fstest.MapFS{}, "builtin", "").Changes(time.Millisecond) != nil {
		t.Error("an embedded source reports changes")
	}
}

// TestFingerprint: every change a package or channel file can go through moves the
// fingerprint, through the symbolic links of a ConfigMap volume too, and only a folder
// that cannot be opened fails it.
func TestFingerprint(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(t *testing.T, target, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(path)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		// setup lays out dir; change changes it. Both run on the source's directory.
		setup, change func(t *testing.T, dir string)
	}{
		{name: "a file rewritten with other content",
			setup:  func(t *testing.T, dir string) { write(t, filepath.Join(dir, "pkg", "a.yaml"), "a: 1\n") },
			change: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "pkg", "a.yaml"), "a: 22\n") }},
		{name: "a file added in a subfolder",
			setup:  func(t *testing.T, dir string) { write(t, filepath.Join(dir, "pkg", "sub", "a.yaml"), "a: 1\n") },
			change: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "pkg", "sub", "b.yaml"), "b: 1\n") }},
		{name: "a ConfigMap volume's ..data link moved to a new folder",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "pkg", "..2026_01", "a.yaml"), "a: 1\n")
				link(t, "..2026_01", filepath.Join(dir, "pkg", "..data"))
				link(t, filepath.Join("..data", "a.yaml"), filepath.Join(dir, "pkg", "a.yaml"))
			},
			change: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "pkg", "..2026_02", "a.yaml"), "a: 2\n")
				link(t, "..2026_02", filepath.Join(dir, "pkg", "..data"))
				if err := os.RemoveAll(filepath.Join(dir, "pkg", "..2026_01")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a file behind a link rewritten",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "pkg", "real", "a.yaml"), "a: 1\n")
				link(t, "real", filepath.Join(dir, "pkg", "linked"))
			},
			change: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "pkg", "real", "a.yaml"), "a: 333\n") }},
		{name: "a broken link fixed",
			setup: func(t *testing.T, dir string) { link(t, "missing.yaml", filepath.Join(dir, "pkg", "a.yaml")) },
			change: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "pkg", "missing.yaml"), "a: 1\n")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			fsys := rootFS(dir)
			before, err := fingerprint(fsys, "pkg")
			if err != nil {
				t.Fatalf("fingerprint: %v", err)
			}
			if again, err := fingerprint(fsys, "pkg"); err != nil || again != before {
				t.Fatalf("fingerprint of an unchanged folder moved: %q, then %q (%v)", before, again, err)
			}
			tc.change(t, dir)
			after, err := fingerprint(fsys, "pkg")
			if err != nil {
				t.Fatalf("fingerprint after the change: %v", err)
			}
			if after == before {
				t.Fatalf("fingerprint did not move: %q", after)
			}
			whole, err := fingerprint(fsys, ".")
			if err != nil || !strings.Contains(whole, "pkg:") {
				t.Fatalf("fingerprint of the whole source = %q, %v", whole, err)
			}
		})
	}

	t.Run("a folder that cannot be opened", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "file"), "x\n")
		outside := t.TempDir()
		link(t, outside, filepath.Join(dir, "out"))
		for _, name := range []string{"missing", "file", "out"} {
			if fp, err := fingerprint(rootFS(dir), name); err == nil {
				t.Errorf("fingerprint(%q) = %q, want an error", name, fp)
			}
		}
		if fp, err := fingerprint(fstest.MapFS{"pkg/a.yaml": {Data: []byte("a")}}, "none"); err == nil {
			t.Errorf("fingerprint of a missing folder of an embedded source = %q, want an error", fp)
		}
	})
}
