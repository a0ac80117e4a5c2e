package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestFluxExample checks examples/flux/sync.yaml against the layout it applies
// (examples/gitops) and the page: the install first, the add-ons after it, both waited
// for and pruned. test/e2e/bootstrap_flux_test.go runs the same objects in Flux.
func TestFluxExample(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join("flux", "sync.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	byName := map[string]*unstructured.Unstructured{}
	for _, obj := range decodeObjects(t, data) {
		byName[obj.GetKind()+"/"+obj.GetName()] = obj
	}
	g.Expect(byName).To(HaveLen(3))
	source := byName["GitRepository/platform"]
	g.Expect(source).NotTo(BeNil())
	g.Expect(source.GetAPIVersion()).To(Equal("source.toolkit.fluxcd.io/v1"))

	paths := map[string]string{}
	for _, name := range []string{"kaddons", "addons"} {
		k := byName["Kustomization/"+name]
		g.Expect(k).NotTo(BeNil(), "no Kustomization %s", name)
		g.Expect(k.GetAPIVersion()).To(Equal("kustomize.toolkit.fluxcd.io/v1"))
		g.Expect(k.GetNamespace()).To(Equal(source.GetNamespace()))
		ref, _, _ := unstructured.NestedStringMap(k.Object, "spec", "sourceRef")
		g.Expect(ref).To(Equal(map[string]string{"kind": "GitRepository", "name": "platform"}))
		for _, field := range []string{"wait", "prune"} {
			v, _, _ := unstructured.NestedBool(k.Object, "spec", field)
			g.Expect(v).To(BeTrue(), "Kustomization %s: spec.%s", name, field)
		}
		paths[name], _, _ = unstructured.NestedString(k.Object, "spec", "path")
	}
	dependsOn, _, _ := unstructured.NestedSlice(byName["Kustomization/addons"].Object, "spec", "dependsOn")
	g.Expect(dependsOn).To(Equal([]any{map[string]any{"name": "kaddons"}}), "the add-ons wait for the CRDs")

	// The paths are the GitOps layout's: the install, and a cluster overlay of add-on
	// resources only.
	g.Expect(paths["kaddons"]).To(Equal("./install"))
	g.Expect(filepath.Join(gitopsDir, paths["kaddons"], "kustomization.yaml")).To(BeARegularFile())
	g.Expect(paths["addons"]).To(HavePrefix("./clusters/"))
	overlay := filepath.Join(gitopsDir, strings.TrimPrefix(paths["addons"], "./"))
	c, _ := startAPIServer(t)
	expectAddonResources(g, c, addonKinds(t), build(t, overlay))

	page, err := os.ReadFile(filepath.Join("..", "docs", "bootstrap", "flux.md"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{"examples/flux/sync.yaml", paths["addons"], "dependsOn: kaddons"} {
		g.Expect(string(page)).To(ContainSubstring(want))
	}
}
