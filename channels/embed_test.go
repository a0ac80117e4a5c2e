package channels

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"testing"

	"github.com/kaddons/kaddons/internal/sources"
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

// TestEveryPackageDeclaresItsKubernetesVersions checks that every built-in package has a
// metadata.yaml whose Kubernetes range is valid and admits the Kubernetes version this
// repository tests on (hack/toolchain.sh builds it), so that no channel resolves to
// nothing on the clusters of the test suites.
func TestEveryPackageDeclaresItsKubernetesVersions(t *testing.T) {
	const tested = "v1.37.2"
	addons, err := fs.ReadDir(FS, "packages")
	if err != nil {
		t.Fatal(err)
	}
	for _, addon := range addons {
		versions, err := fs.ReadDir(FS, path.Join("packages", addon.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range versions {
			m, err := sources.ReadPackageMetadata(FS, addon.Name(), v.Name())
			if err != nil {
				t.Errorf("%s %s: %v", addon.Name(), v.Name(), err)
				continue
			}
			if m.KubernetesVersions == "" {
				t.Errorf("%s %s declares no Kubernetes range in metadata.yaml", addon.Name(), v.Name())
				continue
			}
			if ok, err := m.SupportsKubernetes(tested); err != nil || !ok {
				t.Errorf("%s %s supports Kubernetes %s, which leaves out %s (%v)", addon.Name(), v.Name(), m.KubernetesVersions, tested, err)
			}
		}
	}
}
