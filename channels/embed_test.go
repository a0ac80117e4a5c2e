package channels

import (
	"bytes"
	"io/fs"
	"os"
	"testing"
)

// TestEmbedded checks that FS holds exactly the files of this folder that are channel
// files or packages, byte for byte: a channel file missing from the go:embed line, or
// a file the embed pattern leaves out (a name starting with . or _), fails here.
func TestEmbedded(t *testing.T) {
	onDisk := map[string]bool{}
	err := fs.WalkDir(os.DirFS("."), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch name {
		case "README.md", "embed.go", "embed_test.go":
			return nil
		}
		onDisk[name] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string]bool{}
	err = fs.WalkDir(FS, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		embedded[name] = true
		want, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s is embedded but not on disk: %v", name, err)
			return nil
		}
		got, err := fs.ReadFile(FS, name)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: embedded content differs from the file", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range onDisk {
		if !embedded[name] {
			t.Errorf("%s is not embedded: add it to the go:embed line of embed.go", name)
		}
	}
	if len(embedded) == 0 {
		t.Fatal("nothing is embedded")
	}
}
