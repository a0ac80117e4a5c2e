package channels

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// shippedDir is the repository's channels directory, whose files seed the fuzz targets.
const shippedDir = "../../channels"

// FuzzParseChannel feeds arbitrary channel files to ParseChannel. A file is either refused
// or parsed into entries that all have a valid name and version (so that no entry can
// name a folder outside its add-on's packages), each name once (KDP would match an
// unnamed entry to every add-on), and that read back unchanged once written.
func FuzzParseChannel(f *testing.F) {
	for _, name := range []string{"stable", "rapid"} {
		data, err := os.ReadFile(filepath.Join(shippedDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"manifests:\n- version: 1.0.0\n",
		"manifests:\n- name: coredns\n",
		"manifests:\n- name: coredns\n  version: 1.0.0\n- name: coredns\n  version: 2.0.0\n",
		"manifests:\n- name: coredns\n  version: 1.0.0\n  image: x\n",
		"manifests:\n- name: coredns\n  version: ../../etc\n",
		"manifests:\n- name: CoreDNS\n  version: 1.0.0\n",
		"manifests:\n- name: coredns\n  version: 1.0/x\n",
		"manifests: []\n",
		"{}",
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := ParseChannel(data)
		if err != nil {
			if ch != nil {
				t.Fatalf("ParseChannel returned a channel with the error %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for i, e := range ch.Manifests {
			if e.Name == "" || e.Version == "" {
				t.Fatalf("manifests[%d] = %+v was accepted without a name or a version", i, e)
			}
			if !validAddon.MatchString(e.Name) || !validVersion(e.Version) ||
				strings.ContainsAny(e.Name+e.Version, "/\\") || strings.Contains(e.Version, "..") {
				t.Fatalf("manifests[%d] = %+v was accepted with an invalid name or version", i, e)
			}
			if seen[e.Name+"/"+e.Version] {
				t.Fatalf("manifests[%d] lists %s %s a second time and was accepted", i, e.Name, e.Version)
			}
			seen[e.Name+"/"+e.Version] = true
		}

		out, err := yaml.Marshal(ch)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseChannel(out)
		if err != nil {
			t.Fatalf("the channel written back is refused: %v\n%s", err, out)
		}
		if diff := cmp.Diff(ch, again); diff != "" {
			t.Fatalf("the channel changed through writing it back (-parsed +reparsed):\n%s", diff)
		}
	})
}

// outsideMarker is the content of files that lie outside the fuzzed package; no render
// may ever show it.
const outsideMarker = "read-from-outside-the-package"

// renderHeader starts a kustomization, and listManifests is one that lists manifests.yaml.
const (
	renderHeader  = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	listManifests = renderHeader + "resources:\n- manifests.yaml\n"
)

// FuzzRender builds a package made of a fuzzed kustomization.yaml and a fuzzed manifests.yaml
// (which the kustomization may list). The package's add-on has a second version beside it,
// and other files lie outside the add-on's folder. A build either fails with a channels
// Error that carries a reason, or yields Kubernetes objects, the same ones on every build,
// and nothing of the files outside.
func FuzzRender(f *testing.F) {
	// Fuzzing must never reach the network, whatever the package names as a remote base:
	// git may use no transport, and HTTP goes to a proxy that refuses connections.
	f.Setenv("GIT_ALLOW_PROTOCOL", "none")
	f.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	f.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	f.Setenv("NO_PROXY", "")

	addShippedPackages(f)
	const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\ndata:\n  key: value\n"
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo\n  namespace: kube-system\n" +
		"spec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: demo\n        image: registry.k8s.io/demo:1.0\n"
	for _, seed := range []struct{ kustomization, manifests string }{
		{listManifests + "namespace: addons\nnamePrefix: k-\nlabels:\n- pairs:\n    app: demo\n", configMap},
		{listManifests + "images:\n- name: registry.k8s.io/demo\n  newTag: \"2.0\"\nreplicas:\n- name: demo\n  count: 3\n", deployment},
		{listManifests + "patches:\n- patch: |\n    - op: replace\n      path: /spec/replicas\n      value: 2\n  target:\n    kind: Deployment\n", deployment},
		{listManifests + "patches:\n- patch: |\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: demo\n    spec:\n      replicas: 5\n", deployment},
		{renderHeader + "configMapGenerator:\n- name: generated\n  literals:\n  - key=value\n", ""},
		{renderHeader + "resources:\n- manifests.yaml\n- ../0.9.0\n", deployment},
		{renderHeader + "resources:\n- ../../other/1.0.0\n", ""},
		{renderHeader + "resources:\n- ../../../outside.yaml\n", ""},
		{renderHeader + "resources:\n- /etc/passwd\n", ""},
		{renderHeader + "resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0\n", ""},
		{renderHeader + "resources:\n- https://example.com/manifests.yaml\n", ""},
		{renderHeader + "resources:\n- git@github.com:org/repo.git\n", ""},
		{renderHeader + "transformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata:\n    name: p\n  path: https://example.com/p.yaml\n", ""},
		{renderHeader + "configMapGenerator:\n- name: g\n  files:\n  - manifests.yaml\n", "data"},
		{renderHeader + "resources:\n- missing.yaml\n", ""},
		{listManifests, "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(configMap, "\n", "\n  ")},
		{"resources: [manifests.yaml]\n", "kind: ConfigMap\n"},
	} {
		f.Add([]byte(seed.kustomization), []byte(seed.manifests))
	}

	f.Fuzz(func(t *testing.T, kustomization, manifests []byte) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string][]byte{
			"packages/fuzz/1.0.0/kustomization.yaml":  kustomization,
			"packages/fuzz/1.0.0/manifests.yaml":      manifests,
			"packages/fuzz/0.9.0/kustomization.yaml":  []byte("resources:\n- configmap.yaml\n"),
			"packages/fuzz/0.9.0/configmap.yaml":      []byte(strings.Replace(configMap, "demo", "base", 1)),
			"packages/other/1.0.0/kustomization.yaml": []byte("resources:\n- configmap.yaml\n"),
			"packages/other/1.0.0/configmap.yaml":     []byte(strings.Replace(configMap, "value", outsideMarker, 1)),
			"outside.yaml":                            []byte(strings.Replace(configMap, "value", outsideMarker, 1)),
		})
		r := Resolved{Addon: "fuzz", Version: "1.0.0"}

		out, err := NewCatalog(dir, "").Render(r)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.Reason == "" || ce.Message == "" {
				t.Fatalf("Render failed with %T %v, want a channels Error with a reason and a message", err, err)
			}
			return
		}
		if strings.Contains(out, outsideMarker) {
			t.Fatalf("Render read a file outside packages/fuzz:\n%s", out)
		}
		checkObjectStream(t, out)

		again, err := NewCatalog(dir, "").Render(r)
		if err != nil {
			t.Fatalf("a second build of the same package failed: %v", err)
		}
		if again != out {
			t.Fatalf("two builds of the same package differ:\n%s", cmp.Diff(out, again))
		}
	})
}

// addShippedPackages seeds f with every package of the repository's channels, its
// manifests joined into one file.
func addShippedPackages(f *testing.F) {
	packages, err := filepath.Glob(filepath.Join(shippedDir, "packages", "*", "*", "kustomization.yaml"))
	if err != nil || len(packages) == 0 {
		f.Fatalf("no shipped packages under %s: %v", shippedDir, err)
	}
	for _, kustomization := range packages {
		var k struct {
			Resources []string `json:"resources"`
		}
		data, err := os.ReadFile(kustomization)
		if err != nil {
			f.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			f.Fatal(err)
		}
		manifests := make([]string, 0, len(k.Resources))
		for _, r := range k.Resources {
			m, err := os.ReadFile(filepath.Join(filepath.Dir(kustomization), r))
			if err != nil {
				f.Fatal(err)
			}
			manifests = append(manifests, string(m))
		}
		f.Add([]byte(listManifests), []byte(strings.Join(manifests, "---\n")))
	}
}

// writeFiles creates files (path under dir -> content).
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, content := range files {
		full := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkObjectStream fails t unless out is a YAML stream of objects that each have an
// apiVersion, a kind and a name, as the engine needs to apply them.
func checkObjectStream(t *testing.T, out string) {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var obj unstructured.Unstructured
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("Render returned YAML that does not decode: %v\n%s", err, out)
		}
		if obj.Object == nil {
			continue
		}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			t.Fatalf("Render returned an object without apiVersion, kind or name: %v\n%s", obj.Object, out)
		}
	}
}
