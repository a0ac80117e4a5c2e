package channels

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	shipped "github.com/kaddons/kaddons/channels"
)

// writeTree creates files (path -> content) under a temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for path, content := range files {
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const configMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
data:
  key: value
`

func testTree(t *testing.T) string {
	return writeTree(t, map[string]string{
		"stable":                                  "manifests:\n- name: demo\n  version: 1.0.0\n",
		"rapid":                                   "manifests:\n- name: demo\n  version: 2.0.0\n- name: other\n  version: 1.0.0\n",
		"broken":                                  "manifests:\n- version: 1.0.0\n",
		"ranges":                                  "manifests:\n- name: demo\n  version: 1.0.0\n- name: demo\n  version: 2.0.0\n",
		"packages/demo/1.0.0/kustomization.yaml":  "resources:\n- configmap.yaml\n",
		"packages/demo/1.0.0/configmap.yaml":      configMap,
		"packages/demo/2.0.0/kustomization.yaml":  "resources:\n- configmap.yaml\n",
		"packages/demo/2.0.0/configmap.yaml":      strings.Replace(configMap, "value", "two", 1),
		"packages/demo/bad/kustomization.yaml":    "resources:\n- missing.yaml\n",
		"packages/other/9.9.9/kustomization.yaml": "resources: []\n",
	})
}

func TestResolve(t *testing.T) {
	dir := testTree(t)
	for _, tc := range []struct {
		name           string
		addon          string
		defaultChannel string
		spec           addonv1alpha1.CommonSpec
		want           Resolved
		reason         string
		message        string
	}{
		{name: "version wins over channel", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "2.0.0", Channel: "stable"},
			want: Resolved{Addon: "demo", Version: "2.0.0"}},
		{name: "channel", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "rapid"},
			want: Resolved{Addon: "demo", Version: "2.0.0", Channel: "rapid"}},
		{name: "default channel", addon: "demo",
			want: Resolved{Addon: "demo", Version: "1.0.0", Channel: "stable"}},
		{name: "operator default channel", addon: "demo", defaultChannel: "rapid",
			want: Resolved{Addon: "demo", Version: "2.0.0", Channel: "rapid"}},
		{name: "newest of several", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "ranges"},
			want: Resolved{Addon: "demo", Version: "2.0.0", Channel: "ranges"}},
		{name: "unknown version", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "3.0.0"},
			reason: addonsv1alpha1.ReasonVersionNotFound, message: `demo has no version "3.0.0" (available: 1.0.0, 2.0.0, bad)`},
		{name: "path in version", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "../demo/1.0.0"},
			reason: addonsv1alpha1.ReasonInvalidVersion, message: `version "../demo/1.0.0" is not a valid version`},
		{name: "dot dot version", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "1..0"},
			reason: addonsv1alpha1.ReasonInvalidVersion},
		{name: "slash in version", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "1.0.0/sub"},
			reason: addonsv1alpha1.ReasonInvalidVersion, message: `version "1.0.0/sub" is not a valid version`},
		{name: "absolute version", addon: "demo", spec: addonv1alpha1.CommonSpec{Version: "/etc"},
			reason: addonsv1alpha1.ReasonInvalidVersion},
		{name: "unknown channel", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "nightly"},
			reason: addonsv1alpha1.ReasonChannelNotFound, message: `channel "nightly" does not exist (known channels: broken, ranges, rapid, stable)`},
		{name: "packages is not a channel", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "packages"},
			reason: addonsv1alpha1.ReasonChannelNotFound},
		{name: "channel path", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "../stable"},
			reason: addonsv1alpha1.ReasonChannelNotFound, message: `channel "../stable" is not a valid channel name`},
		{name: "channel without the add-on", addon: "missing", spec: addonv1alpha1.CommonSpec{Channel: "rapid"},
			reason: addonsv1alpha1.ReasonChannelNotFound, message: `channel "rapid" does not list missing`},
		{name: "channel listing a missing package", addon: "other", spec: addonv1alpha1.CommonSpec{Channel: "rapid"},
			reason: addonsv1alpha1.ReasonVersionNotFound, message: `other has no version "1.0.0" (available: 9.9.9)`},
		{name: "invalid channel file", addon: "demo", spec: addonv1alpha1.CommonSpec{Channel: "broken"},
			reason: addonsv1alpha1.ReasonChannelNotFound, message: "manifests[0] has no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewCatalog(dir, tc.defaultChannel).Resolve(tc.addon, tc.spec)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if got != tc.want {
					t.Fatalf("Resolve = %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve = %+v, want a %s error", got, tc.reason)
			}
			if r := ReasonOf(err); r != tc.reason {
				t.Errorf("reason = %s, want %s (%v)", r, tc.reason, err)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not contain %q", err, tc.message)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	src := NewCatalog(testTree(t), "")
	got, err := src.Candidates("demo", addonv1alpha1.CommonSpec{Channel: "ranges"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Resolved{{Addon: "demo", Version: "2.0.0", Channel: "ranges"}, {Addon: "demo", Version: "1.0.0", Channel: "ranges"}}
	if !slices.Equal(got, want) {
		t.Errorf("Candidates = %v, want %v (newest first)", got, want)
	}
	got, err = src.Candidates("demo", addonv1alpha1.CommonSpec{Version: "1.0.0", Channel: "ranges"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Resolved{{Addon: "demo", Version: "1.0.0"}}; !slices.Equal(got, want) {
		t.Errorf("Candidates of a pin = %v, want %v", got, want)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.12.1", "1.14.6", -1},
		{"1.14.6", "1.12.1", 1},
		{"1.9.0", "1.10.0", -1},
		{"v1.12.1", "1.12.1", 1}, // equal as versions; then as strings, so that the order is total
		{"1.12.1", "1.12.1", 0},
		{"1.12.1-rc.1", "1.12.1", -1},
		{"1.12.1", "latest", 1},
		{"latest", "1.0.0", -1},
		{"abc", "abd", -1},
	} {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParseChannel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		wantErr string
	}{
		{name: "valid", data: "manifests:\n- name: a\n  version: 1.0.0\n- name: b\n  version: 2.0.0\n"},
		{name: "entry without name", data: "manifests:\n- version: 1.0.0\n", wantErr: "manifests[0] has no name"},
		{name: "entry without version", data: "manifests:\n- name: a\n", wantErr: "manifests[0] (a) has no version"},
		{name: "duplicate entry", data: "manifests:\n- name: a\n  version: 1\n- name: a\n  version: 1\n", wantErr: "manifests[1] lists a 1 a second time"},
		{name: "two versions of one add-on", data: "manifests:\n- name: a\n  version: 1\n- name: a\n  version: 2\n"},
		{name: "unknown field", data: "manifests:\n- name: a\n  release: 1\n", wantErr: `unknown field "release"`},
		{name: "name with a slash", data: "manifests:\n- name: ../coredns\n  version: 1.0.0\n",
			wantErr: `manifests[0] has the name "../coredns", which is not a valid add-on name`},
		{name: "upper-case name", data: "manifests:\n- name: CoreDNS\n  version: 1.0.0\n",
			wantErr: `manifests[0] has the name "CoreDNS"`},
		{name: "name ending in a dash", data: "manifests:\n- name: a\n  version: 1\n- name: coredns-\n  version: 1\n",
			wantErr: `manifests[1] has the name "coredns-"`},
		{name: "version through dot dot", data: "manifests:\n- name: coredns\n  version: ../../etc\n",
			wantErr: `manifests[0] (coredns) has the version "../../etc", which is not a valid version`},
		{name: "version with a slash", data: "manifests:\n- name: coredns\n  version: 1.12/x\n",
			wantErr: `manifests[0] (coredns) has the version "1.12/x"`},
		{name: "version with dot dot inside", data: "manifests:\n- name: coredns\n  version: 1..2\n",
			wantErr: `has the version "1..2"`},
		{name: "version starting with a dot", data: "manifests:\n- name: coredns\n  version: .hidden\n",
			wantErr: `has the version ".hidden"`},
		{name: "version with a space", data: "manifests:\n- name: coredns\n  version: 1.0 beta\n",
			wantErr: `has the version "1.0 beta"`},
		{name: "valid version characters", data: "manifests:\n- name: node-local-dns2\n  version: 1.2.3-rc.1+build_7\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseChannel([]byte(tc.data))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseChannel: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseChannel error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestRenderCachesUntilAFileChanges(t *testing.T) {
	dir := testTree(t)
	s := NewCatalog(dir, "")
	r := Resolved{Addon: "demo", Version: "1.0.0"}
	first, err := s.Render(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first, "key: value") {
		t.Fatalf("rendered manifest lacks the ConfigMap data:\n%s", first)
	}
	// Rewrite the file with different content: the cache must notice.
	path := filepath.Join(dir, "packages/demo/1.0.0/configmap.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(configMap, "value", "changed!", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := s.Render(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(second, "key: changed!") {
		t.Fatalf("render did not pick up the changed file:\n%s", second)
	}
}

func TestRenderReportsBrokenPackage(t *testing.T) {
	_, err := NewCatalog(testTree(t), "").Render(Resolved{Addon: "demo", Version: "bad"})
	if err == nil {
		t.Fatal("Render of a package listing a missing file succeeded")
	}
	if ReasonOf(err) != addonsv1alpha1.ReasonRenderFailed || !strings.Contains(err.Error(), "building package demo/bad") {
		t.Fatalf("Render error = %v (reason %s)", err, ReasonOf(err))
	}
}

func TestRepositoryChannelsResolve(t *testing.T) {
	s := NewCatalog(filepath.Join("..", "..", "channels"), "")
	for _, channel := range s.Channels() {
		data, err := os.ReadFile(filepath.Join(s.Dir(), channel))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := ParseChannel(data)
		if err != nil {
			t.Fatalf("channel %s: %v", channel, err)
		}
		for _, e := range ch.Manifests {
			r, err := s.Resolve(e.Name, addonv1alpha1.CommonSpec{Channel: channel})
			if err != nil {
				t.Errorf("channel %s: %v", channel, err)
				continue
			}
			if _, err := s.Render(r); err != nil {
				t.Errorf("channel %s: %v", channel, err)
			}
		}
	}
}

// TestEmbeddedChannelsMatchTheDirectory renders every entry of every shipped channel from
// the channels embedded in the binary and from the channels folder: both must list the
// same channels and versions and render the same objects.
func TestEmbeddedChannelsMatchTheDirectory(t *testing.T) {
	embedded := NewFSCatalog(shipped.FS, "builtin", "")
	dir := NewCatalog(filepath.Join("..", "..", "channels"), "")
	if got, want := embedded.Channels(), dir.Channels(); strings.Join(got, ",") != strings.Join(want, ",") || len(got) == 0 {
		t.Fatalf("embedded channels %v, directory channels %v", got, want)
	}
	for _, channel := range embedded.Channels() {
		data, err := fs.ReadFile(embedded.FS(), channel)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := ParseChannel(data)
		if err != nil {
			t.Fatalf("channel %s: %v", channel, err)
		}
		for _, e := range ch.Manifests {
			spec := addonv1alpha1.CommonSpec{Channel: channel}
			r, err := embedded.Resolve(e.Name, spec)
			if err != nil {
				t.Fatalf("embedded channel %s: %v", channel, err)
			}
			if want, _ := dir.Resolve(e.Name, spec); r != want {
				t.Errorf("channel %s: embedded resolves %+v, the directory %+v", channel, r, want)
			}
			if got, want := embedded.Versions(e.Name), dir.Versions(e.Name); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("%s: embedded versions %v, directory versions %v", e.Name, got, want)
			}
			got, err := embedded.Render(r)
			if err != nil {
				t.Fatalf("embedded %s: %v", r.Addon, err)
			}
			want, err := dir.Render(r)
			if err != nil {
				t.Fatalf("directory %s: %v", r.Addon, err)
			}
			if got != want || !strings.Contains(got, "kind: ") {
				t.Errorf("%s %s renders differently embedded and from the directory", r.Addon, r.Version)
			}
		}
	}
}

// TestFSSource resolves and renders from an in-memory file system: a package reads none
// of the files beside it, not even another version of its add-on, and the render cache
// notices a changed file.
func TestFSSource(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	fsys := fstest.MapFS{
		"stable":                                 {Data: []byte("manifests:\n- name: demo\n  version: 1.0.0\n"), ModTime: epoch},
		"README.md":                              {Data: []byte("# not a channel\n")},
		"packages/demo/1.0.0/kustomization.yaml": {Data: []byte("resources:\n- configmap.yaml\n"), ModTime: epoch},
		"packages/demo/1.0.0/configmap.yaml":     {Data: []byte(configMap), ModTime: epoch},
		"packages/demo/1.0.0-extra/kustomization.yaml": {Data: []byte(
			"resources:\n- ../1.0.0\nnamePrefix: extra-\n"), ModTime: epoch},
		"packages/demo/escape/kustomization.yaml": {Data: []byte("resources:\n- ../../other/1.0.0/secret.yaml\n")},
		"packages/other/1.0.0/kustomization.yaml": {Data: []byte("resources:\n- secret.yaml\n")},
		"packages/other/1.0.0/secret.yaml":        {Data: []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: other\n")},
	}
	s := NewFSCatalog(fsys, "memory", "")
	if got := s.Channels(); strings.Join(got, ",") != "stable" {
		t.Errorf("Channels() = %v, want [stable]", got)
	}
	if s.Name() != "memory" || s.Dir() != "" {
		t.Errorf("Name() = %q, Dir() = %q", s.Name(), s.Dir())
	}
	r, err := s.Resolve("demo", addonv1alpha1.CommonSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if r != (Resolved{Addon: "demo", Version: "1.0.0", Channel: "stable"}) {
		t.Fatalf("Resolve = %+v", r)
	}
	out, err := s.Render(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "name: demo") || !strings.Contains(out, "key: value") {
		t.Fatalf("rendered:\n%s", out)
	}

	for _, version := range []string{"1.0.0-extra", "escape"} {
		_, err = s.Render(Resolved{Addon: "demo", Version: version})
		if err == nil || ReasonOf(err) != addonsv1alpha1.ReasonPackageRefused || !strings.Contains(err.Error(), "'..'") {
			t.Errorf("package %s reading outside itself: error %v, want a PackageRefused error about '..'", version, err)
		}
	}

	fsys["packages/demo/1.0.0/configmap.yaml"] = &fstest.MapFile{
		Data: []byte(strings.Replace(configMap, "value", "changed!", 1)), ModTime: epoch.Add(time.Second)}
	out, err = s.Render(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "key: changed!") {
		t.Fatalf("render did not pick up the changed file:\n%s", out)
	}
}

// TestDirectorySourceRefusesSymlinks: a package may not contain a symbolic link, not even
// one to a file inside the source (the way a ConfigMap volume lays out its keys), and the
// error names the link. Replacing the link with the file makes the package render again.
// Channel files may still be links inside the directory, but not to a file outside it.
func TestDirectorySourceRefusesSymlinks(t *testing.T) {
	dir := testTree(t)
	pkg := filepath.Join(dir, "packages", "demo", "1.0.0")
	data := filepath.Join(dir, "..data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(pkg, "configmap.yaml"), filepath.Join(data, "configmap.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(data, "configmap.yaml"), filepath.Join(pkg, "configmap.yaml")); err != nil {
		t.Fatal(err)
	}
	s := NewCatalog(dir, "")
	r := Resolved{Addon: "demo", Version: "1.0.0"}
	_, err := s.Render(r)
	if err == nil || ReasonOf(err) != addonsv1alpha1.ReasonPackageRefused ||
		!strings.Contains(err.Error(), "packages/demo/1.0.0/configmap.yaml is a symbolic link") {
		t.Fatalf("Render of a package with a symlink: error %v, want PackageRefused naming the link", err)
	}

	if err := os.Remove(filepath.Join(pkg, "configmap.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(data, "configmap.yaml"), filepath.Join(pkg, "configmap.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err := s.Render(r)
	if err != nil {
		t.Fatalf("Render after the link was replaced by the file: %v", err)
	}
	if !strings.Contains(out, "key: value") {
		t.Fatalf("rendered:\n%s", out)
	}

	// A channel file linked inside the directory is read; one linked outside is not.
	if err := os.Rename(filepath.Join(dir, "rapid"), filepath.Join(data, "rapid")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "rapid"), filepath.Join(dir, "rapid")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Resolve("demo", addonv1alpha1.CommonSpec{Channel: "rapid"}); err != nil || got.Version != "2.0.0" {
		t.Fatalf("Resolve through a channel file linked inside the source = %+v, %v", got, err)
	}
	outside := writeTree(t, map[string]string{"nightly": "manifests:\n- name: demo\n  version: 2.0.0\n"})
	if err := os.Symlink(filepath.Join(outside, "nightly"), filepath.Join(dir, "nightly")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Resolve("demo", addonv1alpha1.CommonSpec{Channel: "nightly"}); err == nil {
		t.Fatalf("Resolve through a channel file linked outside the source = %+v, want an error", got)
	}
}

// BenchmarkRenderCached measures what every reconcile of an add-on pays to render its
// package once it is cached: checking that no file of the package changed.
func BenchmarkRenderCached(b *testing.B) {
	s := NewCatalog(filepath.Join("..", "..", "channels"), "")
	r := Resolved{Addon: "coredns", Version: "1.12.1"}
	if _, err := s.Render(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Render(r); err != nil {
			b.Fatal(err)
		}
	}
}
