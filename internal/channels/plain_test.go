package channels

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// packageFiles turns a map of package files into the sorted slice readPackage returns.
func packageFiles(files map[string]string) []packageFile {
	out := make([]packageFile, 0, len(files))
	for name, data := range files {
		out = append(out, packageFile{name: name, data: []byte(data)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// kustomizeBuild builds files with kustomize, as Render did for every package before the
// plain path, and returns its YAML stream or its error.
func kustomizeBuild(t *testing.T, files []packageFile) (string, error) {
	t.Helper()
	mem, err := memoryFS("pkg", files)
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(renderOptions()).Run(mem, "/pkg")
	if err != nil {
		return "", err
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return string(out), nil
}

// plainBuild builds files on the plain path, failing the test if the package is not
// plain.
func plainBuild(t *testing.T, files []packageFile) (string, error) {
	t.Helper()
	resources, ok := plainResources(files)
	if !ok {
		t.Fatal("the package does not take the plain path")
	}
	objects, err := renderPlain("demo/1.0.0", files, resources)
	if err != nil {
		return "", err
	}
	out, err := encodeResources(objects)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), nil
}

// TestPlainPathBuildsWhatKustomizeBuilds: for plain packages, the plain path's stream is
// byte for byte kustomize's, and a duplicate id fails on both.
func TestPlainPathBuildsWhatKustomizeBuilds(t *testing.T) {
	namespaced := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: kube-system\n" +
		"  labels: {app: demo}\ndata:\n  # a comment kustomize drops\n  zeta: \"1\"\n  alpha: 'yes'\n  on: \"true\"\n"
	clusterScoped := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: demo\n" +
		"rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		// objects is how many objects the stream holds.
		objects int
		// duplicate is the id both builds must refuse, if any.
		duplicate string
	}{
		{name: "single file", objects: 1, files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- configmap.yaml\n",
			"configmap.yaml":     namespaced,
		}},
		{name: "no apiVersion or kind", objects: 1, files: map[string]string{
			"kustomization.yaml": "resources:\n- configmap.yaml\n",
			"configmap.yaml":     configMap,
		}},
		{name: "multiple files in list order, in folders", objects: 4, files: map[string]string{
			"kustomization.yaml":     kustomization + "resources:\n- z.yaml\n- ./sub/a.yaml\n- m.json\n- namespace.yaml\n",
			"z.yaml":                 namespaced,
			"sub/a.yaml":             clusterScoped,
			"m.json":                 `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "kube-system"}, "spec": {"ports": [{"port": 53, "protocol": "UDP"}]}}`,
			"namespace.yaml":         "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: addons\n",
			"unlisted.yaml":          configMap,
			"docs/notes.md":          "not listed",
			"sub/kustomization.yaml": kustomization + "resources:\n- a.yaml\n",
		}},
		{name: "List kinds", objects: 6, files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- lists.yaml\n",
			"lists.yaml": "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n" +
				"- apiVersion: v1\n  kind: List\n  items:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: nested}}\n" +
				"- apiVersion: v1\n  kind: ServiceAccount\n  metadata: {name: sa, namespace: kube-system}\n" +
				"---\napiVersion: v1\nkind: ConfigMapList\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}, data: {k: v}}\n" +
				"---\napiVersion: v1\nkind: List\nitems: []\n" +
				"---\napiVersion: v1\nkind: List\nitems:\n" +
				"---\napiVersion: example.com/v1\nkind: PlayList\nmetadata: {name: not-a-collection}\nspec: {songs: 3}\n" +
				"---\n" + clusterScoped,
		}},
		{name: "multi-document files with empty documents", objects: 4, files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- stream.yaml\n- trailing.yaml\n",
			"stream.yaml": "---\n# only a comment\n---\n---\n" + namespaced + "---\n\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: other\n--- # a comment after the separator\n" +
				clusterScoped,
			"trailing.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  key: |\n    line one\n    line two\n---\n",
		}},
		{name: "cluster-scoped and namespaced objects of one name", objects: 5, files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- objects.yaml\n",
			"objects.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo, namespace: kube-system}\n---\n" +
				"apiVersion: v1\nkind: Secret\nmetadata: {name: demo}\n---\n" + clusterScoped,
		}},
		{name: "local-config objects dropped", objects: 1, files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- objects.yaml\n",
			"objects.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations:\n    config.kubernetes.io/local-config: \"false\"\n" +
				"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dropped\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
		}},
		{name: "duplicate across files", duplicate: "ConfigMap.v1.[noGrp]/settings.kube-system", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- a.yaml\n- b.yaml\n",
			"a.yaml":             namespaced,
			"b.yaml":             namespaced,
		}},
		{name: "duplicate in the default namespace", duplicate: "ConfigMap.v1.[noGrp]/demo.default", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- a.yaml\n",
			"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\n---\n" +
				"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: demo, namespace: default}}\n",
		}},
		{name: "a file listed twice", duplicate: "ClusterRole.v1.rbac.authorization.k8s.io/demo.[noNs]", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- role.yaml\n- ./role.yaml\n",
			"role.yaml":          clusterScoped,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := packageFiles(tc.files)
			want, kerr := kustomizeBuild(t, files)
			got, perr := plainBuild(t, files)
			if tc.duplicate != "" {
				if kerr == nil || !strings.Contains(kerr.Error(), "already registered id") {
					t.Fatalf("kustomize: got %v, want a duplicate id error", kerr)
				}
				if perr == nil || ReasonOf(perr) != addonsv1alpha1.ReasonRenderFailed ||
					!strings.Contains(perr.Error(), "may not add resource with an already registered id: "+tc.duplicate) {
					t.Fatalf("plain path: got %v, want a %s error naming %s", perr, addonsv1alpha1.ReasonRenderFailed, tc.duplicate)
				}
				return
			}
			if kerr != nil || perr != nil {
				t.Fatalf("kustomize: %v; plain path: %v", kerr, perr)
			}
			if got != want {
				t.Errorf("plain path:\n%s\nkustomize:\n%s", got, want)
			}
			if n := strings.Count(got, "\n---\n") + 1; n != tc.objects {
				t.Errorf("rendered %d objects, want %d:\n%s", n, tc.objects, got)
			}
		})
	}
}

// TestPlainResources: only a kustomization that lists resource files and holds nothing
// else takes the plain path; anything else goes to kustomize.
func TestPlainResources(t *testing.T) {
	withFiles := func(k string) map[string]string {
		return map[string]string{
			"kustomization.yaml": k, "a.yaml": configMap, "sub/b.yaml": configMap,
			"base/kustomization.yaml": kustomization + "resources:\n- ../a.yaml\n",
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // nil: kustomize builds the package
	}{
		{name: "resources only", files: withFiles(kustomization + "resources:\n- a.yaml\n- ./sub/b.yaml\n"),
			want: []string{"a.yaml", "sub/b.yaml"}},
		{name: "no header", files: withFiles("resources: [a.yaml]\n"), want: []string{"a.yaml"}},
		{name: "namespace", files: withFiles(kustomization + "namespace: demo\nresources:\n- a.yaml\n")},
		{name: "labels", files: withFiles(kustomization + "labels:\n- pairs: {app: demo}\nresources:\n- a.yaml\n")},
		{name: "commonLabels", files: withFiles(kustomization + "commonLabels: {app: demo}\nresources:\n- a.yaml\n")},
		{name: "patches", files: withFiles(kustomization + "resources:\n- a.yaml\npatches:\n- path: sub/b.yaml\n")},
		{name: "generator", files: withFiles(kustomization + "resources:\n- a.yaml\nconfigMapGenerator:\n- name: g\n  literals: [k=v]\n")},
		{name: "images", files: withFiles(kustomization + "resources:\n- a.yaml\nimages:\n- name: app\n  newTag: v2\n")},
		{name: "empty field", files: withFiles(kustomization + "resources:\n- a.yaml\nnamePrefix: \"\"\n")},
		{name: "a folder", files: withFiles(kustomization + "resources:\n- a.yaml\n- base\n")},
		{name: "a kustomization file", files: withFiles(kustomization + "resources:\n- base/kustomization.yaml\n")},
		{name: "a missing file", files: withFiles(kustomization + "resources:\n- missing.yaml\n")},
		{name: "a path out of the package", files: withFiles(kustomization + "resources:\n- ../0.9.0/configmap.yaml\n")},
		{name: "no resources", files: withFiles(kustomization)},
		{name: "a Component", files: withFiles("apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n- a.yaml\n")},
		{name: "another apiVersion", files: withFiles("apiVersion: kustomize.config.k8s.io/v1\nkind: Kustomization\nresources:\n- a.yaml\n")},
		{name: "not YAML", files: withFiles("resources: [a.yaml\n")},
		{name: "a resource that is not a string", files: withFiles(kustomization + "resources:\n- {path: a.yaml}\n")},
		{name: "two kustomization files", files: map[string]string{
			"kustomization.yaml": kustomization + "resources:\n- a.yaml\n", "kustomization.yml": kustomization + "resources:\n- a.yaml\n",
			"a.yaml": configMap}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := plainResources(packageFiles(tc.files))
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Errorf("plainResources = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// TestShippedPackagesArePlain: every shipped package takes the plain path, and its
// stream is byte for byte what kustomize builds, so the golden files did not change.
func TestShippedPackagesArePlain(t *testing.T) {
	s, packages := shippedPackages(t)
	for _, p := range packages {
		addon, version := filepath.Base(filepath.Dir(p)), filepath.Base(p)
		t.Run(addon+"/"+version, func(t *testing.T) {
			files, err := readPackage(s.FS(), packageDir(addon, version), addon+"/"+version)
			if err != nil {
				t.Fatal(err)
			}
			want, err := kustomizeBuild(t, files)
			if err != nil {
				t.Fatal(err)
			}
			got, err := plainBuild(t, files)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("plain path:\n%s\nkustomize:\n%s", got, want)
			}
			rendered, err := s.Render(Resolved{Addon: addon, Version: version})
			if err != nil || rendered != want {
				t.Errorf("Render = %v, differs from kustomize's build: %t", err, rendered != want)
			}
		})
	}
}

// TestRenderPlainPackageBeyondTheKustomizeCap: a plain package of 5000 ConfigMaps, five
// times the cap of a kustomize build, renders all of them in order.
func TestRenderPlainPackageBeyondTheKustomizeCap(t *testing.T) {
	const n = 5 * MaxPackageObjects
	out, err := NewCatalog(packageTree(t, map[string]string{
		"kustomization.yaml": kustomization + "resources:\n- configmaps.yaml\n- configmap.yaml\n",
		"configmaps.yaml":    configMaps(n),
		"configmap.yaml":     configMap,
	}), "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, "kind: ConfigMap"); got != n+1 {
		t.Errorf("rendered %d ConfigMaps, want %d", got, n+1)
	}
	first, last := strings.Index(out, "name: demo-0\n"), strings.Index(out, fmt.Sprintf("name: demo-%d\n", n-1))
	if first < 0 || last < first || !strings.HasSuffix(out, "name: demo\n") {
		t.Errorf("objects out of order or missing: first at %d, last at %d, ends %q", first, last, out[len(out)-40:])
	}
}
