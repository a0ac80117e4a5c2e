package examples

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// capiDir is the Cluster API example: a ClusterResourceSet and the ConfigMaps it applies.
var capiDir = "capi"

// TestClusterAPIExample builds examples/capi as docs/bootstrap/capi.md tells a user to,
// with the installer written into it, and checks what the management cluster would get:
// the ClusterResourceSet names exactly the two generated ConfigMaps (no hash suffix), the
// first carries the installer unchanged, and the second only add-on resources the API
// server accepts. test/e2e/bootstrap_capi_test.go applies the same to Cluster API.
func TestClusterAPIExample(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	for _, name := range []string{"kustomization.yaml", "clusterresourceset.yaml", "addons.yaml"} {
		data, err := os.ReadFile(filepath.Join(capiDir, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(dir, name), data, 0o600)).To(Succeed())
	}
	_, err := os.Stat(filepath.Join(capiDir, "install.yaml"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "examples/capi/install.yaml is the user's installer; it is not committed")
	installer, err := os.ReadFile(filepath.Join("..", "dist", "install.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "install.yaml"), installer, 0o600)).To(Succeed())

	objects := build(t, dir)
	byName := map[string]*unstructured.Unstructured{}
	for _, obj := range objects {
		g.Expect(obj.GetNamespace()).To(BeEmpty(), "%s %s: the namespace is the Clusters', given with -n", obj.GetKind(), obj.GetName())
		byName[obj.GetKind()+"/"+obj.GetName()] = obj
	}
	g.Expect(byName).To(HaveLen(3))
	crs := byName["ClusterResourceSet/kaddons"]
	g.Expect(crs).NotTo(BeNil())
	g.Expect(crs.GetAPIVersion()).To(Equal("addons.cluster.x-k8s.io/v1beta2"))
	labels, _, _ := unstructured.NestedStringMap(crs.Object, "spec", "clusterSelector", "matchLabels")
	g.Expect(labels).To(Equal(map[string]string{"addons.kaddons.dev/install": "true"}))
	page, err := os.ReadFile(filepath.Join("..", "docs", "bootstrap", "capi.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(page)).To(ContainSubstring("addons.kaddons.dev/install=true"), "the page labels Clusters as the selector wants")
	resources, _, _ := unstructured.NestedSlice(crs.Object, "spec", "resources")
	g.Expect(resources).To(Equal([]any{
		map[string]any{"kind": "ConfigMap", "name": "kaddons-install"},
		map[string]any{"kind": "ConfigMap", "name": "kaddons-addons"},
	}), "the installer first, then the add-on resources, by the generated names")

	install := byName["ConfigMap/kaddons-install"]
	g.Expect(install).NotTo(BeNil(), "no ConfigMap kaddons-install (a name hash suffix?)")
	data, _, _ := unstructured.NestedStringMap(install.Object, "data")
	g.Expect(data).To(HaveLen(1))
	g.Expect(data["install.yaml"]).To(Equal(string(installer)))

	addons := byName["ConfigMap/kaddons-addons"]
	g.Expect(addons).NotTo(BeNil(), "no ConfigMap kaddons-addons (a name hash suffix?)")
	data, _, _ = unstructured.NestedStringMap(addons.Object, "data")
	g.Expect(data).To(HaveKey("addons.yaml"))
	resourcesInside := asAPIObjects(t, decodeObjects(t, []byte(data["addons.yaml"])))
	g.Expect(resourcesInside).NotTo(BeEmpty())
	c, _ := startAPIServer(t)
	expectAddonResources(g, c, addonKinds(t), resourcesInside)
}

// asAPIObjects returns objects as an API client reads them: through JSON, with integers
// as int64 (YAML decoding makes them float64).
func asAPIObjects(t *testing.T, objects []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, 0, len(objects))
	for _, obj := range objects {
		data, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}
