package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// fencedBlocks returns the contents of the Markdown code blocks fenced as lang.
func fencedBlocks(markdown, lang string) []string {
	var blocks []string
	var block strings.Builder
	in := false
	for line := range strings.Lines(markdown) {
		switch {
		case !in && strings.TrimSpace(line) == "```"+lang:
			in = true
			block.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, block.String())
		case in:
			block.WriteString(line)
		}
	}
	return blocks
}

func TestArgoCDHealthCheckCopies(t *testing.T) {
	g := NewWithT(t)
	script, err := os.ReadFile(filepath.Join("argocd", "health.lua"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(script))).NotTo(BeEmpty())

	// The page shows the script as shipped.
	page, err := os.ReadFile(filepath.Join("..", "docs", "bootstrap", "argocd.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fencedBlocks(string(page), "lua")).To(ConsistOf(string(script)), "docs/bootstrap/argocd.md shows another script than examples/argocd/health.lua")

	// The ConfigMap carries it, unchanged, for every add-on kind and nothing else.
	raw, err := os.ReadFile(filepath.Join("argocd", "argocd-cm.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{}
	g.Expect(yaml.UnmarshalStrict(raw, cm)).To(Succeed())
	g.Expect(cm.Kind).To(Equal("ConfigMap"))
	g.Expect(cm.Name).To(Equal("argocd-cm"))
	want := map[string]string{}
	for _, kind := range addonKinds(t) {
		want["resource.customizations.health."+addonsv1alpha1.GroupVersion.Group+"_"+kind] = string(script)
	}
	g.Expect(cm.Data).To(Equal(want), "regenerate examples/argocd/argocd-cm.yaml from health.lua")
}
