package channels

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// kustomization starts a kustomization file.
const kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"

// packageTree returns a source directory with a channel and the add-on demo at 0.9.0 (a
// valid package, for sibling loads to aim at) and files at version 1.0.0.
func packageTree(t *testing.T, files map[string]string) string {
	t.Helper()
	tree := map[string]string{
		"stable":                                 "manifests:\n- name: demo\n  version: 1.0.0\n",
		"packages/demo/0.9.0/kustomization.yaml": kustomization + "resources:\n- configmap.yaml\n",
		"packages/demo/0.9.0/configmap.yaml":     configMap,
		"outside.yaml":                           configMap,
	}
	for name, content := range files {
		tree["packages/demo/1.0.0/"+name] = content
	}
	return writeTree(t, tree)
}

// configMaps returns n ConfigMaps named demo-<i> as one YAML stream.
func configMaps(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-%d\n", i)
	}
	return b.String()
}

// TestRenderRefusals builds packages that break each rule of hardened rendering. Each is
// refused with its reason and a message that names the file or reference, before
// kustomize reads anything outside the package.
func TestRenderRefusals(t *testing.T) {
	withConfigMap := func(k string) map[string]string {
		return map[string]string{"kustomization.yaml": kustomization + k, "configmap.yaml": configMap}
	}
	for _, tc := range []struct {
		name string
		// files are the package's files (path inside packages/demo/1.0.0 -> content).
		files map[string]string
		// setup changes the tree after it was written; pkg is the package folder.
		setup   func(t *testing.T, dir, pkg string)
		reason  string
		message string
	}{
		{name: "symlink to a file", files: withConfigMap("resources:\n- configmap.yaml\n- link.yaml\n"),
			setup: func(t *testing.T, dir, pkg string) {
				symlink(t, filepath.Join(dir, "outside.yaml"), filepath.Join(pkg, "link.yaml"))
			},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "packages/demo/1.0.0/link.yaml is a symbolic link"},
		{name: "symlink to a folder", files: withConfigMap("resources:\n- configmap.yaml\n"),
			setup: func(t *testing.T, dir, pkg string) {
				symlink(t, filepath.Join(dir, "packages", "demo", "0.9.0"), filepath.Join(pkg, "base"))
			},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "packages/demo/1.0.0/base is a symbolic link"},
		{name: "symlinked package folder", files: map[string]string{},
			setup: func(t *testing.T, dir, pkg string) {
				if err := os.Remove(pkg); err != nil {
					t.Fatal(err)
				}
				symlink(t, filepath.Join(dir, "packages", "demo", "0.9.0"), pkg)
			},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "packages/demo/1.0.0 is a symbolic link"},
		{name: "named pipe", files: withConfigMap("resources:\n- configmap.yaml\n"),
			setup: func(t *testing.T, _, pkg string) {
				if err := syscall.Mkfifo(filepath.Join(pkg, "pipe"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "packages/demo/1.0.0/pipe is not a regular file"},
		{name: "sibling version", files: withConfigMap("resources:\n- ../0.9.0\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `resources entry "../0.9.0" contains '..'`},
		{name: "dot dot inside a path", files: withConfigMap("resources:\n- sub/../../0.9.0/configmap.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "contains '..'"},
		{name: "file outside the source", files: withConfigMap("resources:\n- ../../../outside.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "contains '..'"},
		{name: "absolute path", files: withConfigMap("resources:\n- /etc/passwd\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `resources entry "/etc/passwd" is an absolute path`},
		{name: "generator file outside", files: withConfigMap("configMapGenerator:\n- name: x\n  files:\n  - key=../../../outside.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `configMapGenerator entry "../../../outside.yaml" contains '..'`},
		{name: "secret env file absolute", files: withConfigMap("secretGenerator:\n- name: x\n  envs:\n  - /proc/self/environ\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `secretGenerator entry "/proc/self/environ" is an absolute path`},
		{name: "https resource", files: withConfigMap("resources:\n- https://example.com/manifests.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `resources entry "https://example.com/manifests.yaml" is a remote reference`},
		{name: "upper-case scheme", files: withConfigMap("resources:\n- HTTP://example.com/manifests.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "is a remote reference"},
		{name: "git over https", files: withConfigMap("resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "is a remote reference"},
		{name: "go-getter git", files: withConfigMap("resources:\n- git::https://example.com/org/repo.git//base?ref=main\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "is a remote reference"},
		{name: "github without scheme", files: withConfigMap("resources:\n- github.com/kubernetes-sigs/kustomize/examples/helloWorld\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `"github.com/kubernetes-sigs/kustomize/examples/helloWorld" is a remote reference`},
		{name: "scp-style git", files: withConfigMap("resources:\n- git@github.com:org/repo.git\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "is a remote reference"},
		{name: "ssh", files: withConfigMap("components:\n- ssh://git@example.com/org/repo.git\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `components entry "ssh://git@example.com/org/repo.git" is a remote reference`},
		{name: "file URL", files: withConfigMap("bases:\n- file:///etc\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `bases entry "file:///etc" is a remote reference`},
		{name: "colon in a path", files: withConfigMap("resources:\n- example.com:8080/manifests.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "contains ':'"},
		{name: "remote patch", files: withConfigMap("resources:\n- configmap.yaml\npatches:\n- path: https://example.com/patch.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `patches entry "https://example.com/patch.yaml"`},
		{name: "remote json patch", files: withConfigMap("resources:\n- configmap.yaml\npatchesJson6902:\n- target:\n    kind: ConfigMap\n    name: demo\n  path: http://example.com/p.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "patchesJson6902 entry"},
		{name: "remote strategic merge patch", files: withConfigMap("resources:\n- configmap.yaml\npatchesStrategicMerge:\n- https://example.com/p.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "patchesStrategicMerge entry"},
		{name: "remote replacements", files: withConfigMap("resources:\n- configmap.yaml\nreplacements:\n- path: https://example.com/r.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "replacements entry"},
		{name: "remote openapi", files: withConfigMap("resources:\n- configmap.yaml\nopenapi:\n  path: https://example.com/schema.json\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "openapi entry"},
		{name: "remote crds", files: withConfigMap("resources:\n- configmap.yaml\ncrds:\n- https://example.com/crd.json\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "crds entry"},
		{name: "remote configurations", files: withConfigMap("resources:\n- configmap.yaml\nconfigurations:\n- https://example.com/c.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "configurations entry"},
		{name: "remote transformer file", files: withConfigMap("resources:\n- configmap.yaml\ntransformers:\n- https://example.com/t.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "transformers entry"},
		{name: "inline transformer with a remote patch", files: withConfigMap("resources:\n- configmap.yaml\ntransformers:\n- |\n" +
			"  apiVersion: builtin\n  kind: PatchTransformer\n  metadata:\n    name: p\n  path: https://example.com/patch.yaml\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: `kustomization.yaml: path "https://example.com/patch.yaml" is a remote reference`},
		{name: "transformer file with a remote replacement", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- configmap.yaml\ntransformers:\n- transformers/replace.yaml\n",
			"configmap.yaml":     configMap,
			"transformers/replace.yaml": "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata:\n  name: r\n" +
				"replacements:\n- path: https://example.com/r.yaml\n"},
			reason: addonsv1alpha1.ReasonPackageRefused, message: `transformers/replace.yaml: path "https://example.com/r.yaml"`},
		{name: "generator file reading outside", files: map[string]string{
			"kustomization.yaml": kustomization + "generators:\n- gen.yaml\n",
			"gen.yaml": "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata:\n  name: g\n" +
				"files:\n- key=../../../outside.yaml\n"},
			reason: addonsv1alpha1.ReasonPackageRefused, message: `gen.yaml: files "../../../outside.yaml" contains '..'`},
		{name: "nested kustomization with a remote base", files: map[string]string{
			"kustomization.yaml":      kustomization + "resources:\n- base\n",
			"base/kustomization.yaml": kustomization + "resources:\n- https://example.com/base.yaml\n"},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "base/kustomization.yaml: resources entry"},
		{name: "helm chart", files: withConfigMap("helmCharts:\n- name: app\n  repo: https://example.com/charts\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "uses a Helm chart"},
		{name: "helm generator", files: withConfigMap("generators:\n- |\n  apiVersion: builtin\n  kind: HelmChartInflationGenerator\n" +
			"  metadata:\n    name: h\n  repo: https://example.com/charts\n"),
			reason: addonsv1alpha1.ReasonPackageRefused, message: "runs Helm"},
		{name: "bytes cap", files: withConfigMap("resources:\n- configmap.yaml\n"),
			setup: func(t *testing.T, _, pkg string) {
				if err := os.WriteFile(filepath.Join(pkg, "big.bin"), make([]byte, MaxPackageBytes), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			reason: addonsv1alpha1.ReasonPackageTooLarge, message: fmt.Sprintf("more than %d bytes", MaxPackageBytes)},
		{name: "files cap", files: withConfigMap("resources:\n- configmap.yaml\n"),
			setup: func(t *testing.T, _, pkg string) {
				for i := range MaxPackageFiles {
					if err := os.WriteFile(filepath.Join(pkg, fmt.Sprintf("doc-%03d.md", i)), []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			reason: addonsv1alpha1.ReasonPackageTooLarge, message: fmt.Sprintf("more than %d files", MaxPackageFiles)},
		{name: "objects cap of a kustomize build", files: map[string]string{
			"kustomization.yaml": kustomization + "namespace: demo\nresources:\n- configmaps.yaml\n",
			"configmaps.yaml":    configMaps(MaxPackageObjects + 1)},
			reason: addonsv1alpha1.ReasonPackageTooLarge,
			message: fmt.Sprintf("holds %d YAML documents, more than %d (the cap on the objects of a package that kustomize builds",
				MaxPackageObjects+1, MaxPackageObjects)},
		{name: "objects cap of a kustomize build in a List", files: map[string]string{
			"kustomization.yaml": kustomization + "commonLabels:\n  app: demo\nresources:\n- list.yaml\n",
			"list.yaml":          "apiVersion: v1\nkind: List\nitems:\n" + strings.Repeat("- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n", MaxPackageObjects+1)},
			reason:  addonsv1alpha1.ReasonPackageTooLarge,
			message: fmt.Sprintf("holds %d YAML documents", MaxPackageObjects+1)},
		{name: "objects cap of a plain package", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- configmaps.yaml\n",
			"configmaps.yaml":    configMaps(MaxPlainPackageObjects + 1)},
			reason: addonsv1alpha1.ReasonPackageTooLarge,
			message: fmt.Sprintf("holds %d YAML documents, more than %d (the cap on the objects of a plain package",
				MaxPlainPackageObjects+1, MaxPlainPackageObjects)},
		{name: "objects cap after generators", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- configmaps.yaml\nconfigMapGenerator:\n- name: a\n  literals: [k=v]\n- name: b\n  literals: [k=v]\n",
			"configmaps.yaml":    configMaps(MaxPackageObjects - 1)},
			reason:  addonsv1alpha1.ReasonPackageTooLarge,
			message: fmt.Sprintf("renders %d objects, more than %d", MaxPackageObjects+1, MaxPackageObjects)},
		{name: "folders too deep", files: map[string]string{
			"kustomization.yaml": kustomization,
			strings.Repeat("d/", maxPackageDepth+1) + "file.yaml": configMap},
			reason: addonsv1alpha1.ReasonPackageRefused, message: "levels deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := packageTree(t, tc.files)
			pkg := filepath.Join(dir, "packages", "demo", "1.0.0")
			if err := os.MkdirAll(pkg, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, dir, pkg)
			}
			out, err := NewCatalog(dir, "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
			if err == nil {
				t.Fatalf("Render succeeded, want a %s error:\n%s", tc.reason, out)
			}
			if got := ReasonOf(err); got != tc.reason {
				t.Errorf("reason = %s, want %s (%v)", got, tc.reason, err)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not contain %q", err, tc.message)
			}
		})
	}
}

// TestRenderAcceptsPackagesAtTheCaps: a package exactly at the file and object caps, with
// nested folders, inline patches and generators reading its own files, builds.
func TestRenderAcceptsPackagesAtTheCaps(t *testing.T) {
	files := map[string]string{
		"kustomization.yaml": kustomization + "resources:\n- configmaps.yaml\n- base\n" +
			"configMapGenerator:\n- name: generated\n  files:\n  - key=data/value.txt\n" +
			"patches:\n- path: patches/label.yaml\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n" +
			"    metadata:\n      name: demo-0\n      annotations:\n        docs: https://example.com/docs\n",
		"configmaps.yaml":         configMaps(MaxPackageObjects - 2),
		"base/kustomization.yaml": kustomization + "resources:\n- configmap.yaml\n",
		"base/configmap.yaml":     configMap,
		"data/value.txt":          "value",
		"patches/label.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  labels:\n    patched: \"true\"\n",
	}
	for i := len(files); i < MaxPackageFiles; i++ {
		files[fmt.Sprintf("docs/%03d.md", i)] = "notes"
	}
	out, err := NewCatalog(packageTree(t, files), "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
	if err != nil {
		t.Fatalf("Render of a package at the caps: %v", err)
	}
	for _, want := range []string{"name: demo-0", "docs: https://example.com/docs", "patched: \"true\"", "key: value"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered package lacks %q", want)
		}
	}
	if n := strings.Count(out, "kind: ConfigMap"); n != MaxPackageObjects {
		t.Errorf("rendered %d ConfigMaps, want %d", n, MaxPackageObjects)
	}
}

// TestShippedPackagesFitTheCaps: every shipped package stays far below each cap, so a
// real add-on's growth does not run into one.
func TestShippedPackagesFitTheCaps(t *testing.T) {
	s, packages := shippedPackages(t)
	for _, p := range packages {
		addon, version := filepath.Base(filepath.Dir(p)), filepath.Base(p)
		key := addon + "/" + version
		files, err := readPackage(s.FS(), packageDir(addon, version), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		var size int
		for _, f := range files {
			size += len(f.data)
		}
		out, err := s.Render(Resolved{Addon: addon, Version: version})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		objects := strings.Count(out, "\n---\n") + 1
		if size > MaxPackageBytes/16 || len(files) > MaxPackageFiles/16 || objects > MaxPackageObjects/16 {
			t.Errorf("%s: %d bytes, %d files, %d objects: within 1/16 of a cap (%d, %d, %d)", key, size, len(files),
				objects, MaxPackageBytes, MaxPackageFiles, MaxPackageObjects)
		}
	}
}

// TestPackageFileSystemHoldsOnlyThePackage: the file system kustomize builds on holds the
// package's files and nothing else, so that even without the reference checks a load of
// another version or of the rest of the source fails.
func TestPackageFileSystemHoldsOnlyThePackage(t *testing.T) {
	dir := packageTree(t, map[string]string{
		"kustomization.yaml": kustomization + "resources:\n- ../0.9.0\n",
		"sub/configmap.yaml": configMap,
	})
	s := NewCatalog(dir, "")
	files, err := readPackage(s.FS(), "packages/demo/1.0.0", "demo/1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memoryFS("packages/demo/1.0.0", files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := mem.Walk("/", func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			got = append(got, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := "/packages/demo/1.0.0/kustomization.yaml,/packages/demo/1.0.0/sub/configmap.yaml"
	if strings.Join(got, ",") != want {
		t.Fatalf("in-memory files = %v, want %s", got, want)
	}
	if _, err := krusty.MakeKustomizer(renderOptions()).Run(mem, "/packages/demo/1.0.0"); err == nil {
		t.Fatal("kustomize built a package whose base is another version, on the package's file system")
	}
}

// remoteServer starts an HTTP server on loopback that counts its requests and answers
// every one with a ConfigMap.
func remoteServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(strings.Replace(configMap, "demo", "remote", 1)))
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// TestRenderMakesNoRequestForARemoteBase points a package's resources at a server on
// loopback, as a plain URL and as git-style URLs: the render is refused with
// PackageRefused naming the reference, and the server receives no request.
func TestRenderMakesNoRequestForARemoteBase(t *testing.T) {
	srv, requests := remoteServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, ref := range []string{
		srv.URL + "/manifests.yaml",
		srv.URL + "/org/repo.git//base?ref=main",
		"git::" + srv.URL + "/org/repo//base?ref=main",
		"ssh://git@" + host + "/org/repo.git",
	} {
		t.Run(ref, func(t *testing.T) {
			dir := packageTree(t, map[string]string{
				"kustomization.yaml": kustomization + "resources:\n- configmap.yaml\n- " + ref + "\n",
				"configmap.yaml":     configMap,
			})
			_, err := NewCatalog(dir, "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
			if ReasonOf(err) != addonsv1alpha1.ReasonPackageRefused || !strings.Contains(err.Error(), ref) {
				t.Errorf("Render error = %v, want PackageRefused naming %s", err, ref)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the server received %d requests, want 0", n)
	}
}

// TestKustomizeAloneFetchesRemoteResources shows why checkReferences exists: kustomize,
// with the options Render uses and on the package's in-memory file system, does fetch an
// http resource. If kustomize stops doing that, this test fails, and the comment on
// renderOptions must change.
func TestKustomizeAloneFetchesRemoteResources(t *testing.T) {
	srv, requests := remoteServer(t)
	files := []packageFile{{name: "kustomization.yaml", data: []byte(kustomization + "resources:\n- " + srv.URL + "/cm.yaml\n")}}
	mem, err := memoryFS("packages/demo/1.0.0", files)
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(renderOptions()).Run(mem, "/packages/demo/1.0.0")
	if err != nil {
		t.Fatalf("kustomize: %v", err)
	}
	if requests.Load() == 0 || resMap.Size() != 1 || resMap.Resources()[0].GetName() != "remote" {
		t.Fatalf("kustomize made %d requests and built %d objects; it was expected to fetch the remote ConfigMap",
			requests.Load(), resMap.Size())
	}
	if err := checkReferences("demo/1.0.0", files); ReasonOf(err) != addonsv1alpha1.ReasonPackageRefused {
		t.Fatalf("checkReferences = %v, want PackageRefused", err)
	}
}

// TestLooksRemote covers the reference forms kustomize fetches or clones.
func TestLooksRemote(t *testing.T) {
	for ref, want := range map[string]bool{
		"https://example.com/x.yaml":            true,
		"HTTPS://example.com/x.yaml":            true,
		" http://example.com/x.yaml":            true,
		"git::https://example.com/r.git":        true,
		"ssh://git@example.com/r.git":           true,
		"git@github.com:org/repo":               true,
		"github.com/org/repo":                   true,
		"GitHub.com:org/repo":                   true,
		"file:///etc":                           true,
		"s3://bucket/key":                       true,
		"configmap.yaml":                        false,
		"base":                                  false,
		"sub/dir/file.yaml":                     false,
		"github.com.yaml":                       false,
		"apiVersion: v1\nkind: ConfigMap\n":     false,
		"https-config.yaml":                     false,
		"a-b/c@d.yaml":                          false,
		"docs/https://example.com/not-a-scheme": false,
	} {
		if got := looksRemote(ref); got != want {
			t.Errorf("looksRemote(%q) = %v, want %v", ref, got, want)
		}
	}
}

// symlink creates link pointing at target, by a relative path as a ConfigMap volume does
// (os.Root refuses an absolute link even when it leads inside the source).
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(filepath.Dir(link), target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, link); err != nil {
		t.Fatal(err)
	}
}

// shippedPackages returns a source of the shipped channels and the folder of each of its
// packages.
func shippedPackages(t *testing.T) (*Catalog, []string) {
	t.Helper()
	packages, err := filepath.Glob(filepath.Join(shippedDir, "packages", "*", "*"))
	if err != nil || len(packages) == 0 {
		t.Fatalf("no shipped packages: %v", err)
	}
	return NewCatalog(shippedDir, ""), packages
}
