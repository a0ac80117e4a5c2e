package channels

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"
)

func TestChangesFollowsADirectorySource(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stable"), []byte("manifests: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSource(dir, "")
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
	if NewFSSource(fstest.MapFS{}, "builtin", "").Changes(time.Millisecond) != nil {
		t.Error("an embedded source reports changes")
	}
}
