package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTheArchitectureDiagramListsThePhases reads the phases diagram of
// docs/architecture.md (the first mermaid block) and checks that its phase nodes are the
// reconcile's phases, in the order Reconciler.phases runs them.
func TestTheArchitectureDiagramListsThePhases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "```mermaid\n")
	if !ok {
		t.Fatal("docs/architecture.md has no mermaid diagram")
	}
	block, _, _ = strings.Cut(block, "```")
	nodes := regexp.MustCompile(`\w+\["([a-z-]+)"\]`).FindAllStringSubmatch(block, -1)
	drawn := make([]string, 0, len(nodes))
	for _, m := range nodes {
		drawn = append(drawn, m[1])
	}
	all := (&Reconciler{}).phases()
	phases := make([]string, 0, len(all))
	for _, p := range all {
		phases = append(phases, p.name)
	}
	if !slices.Equal(drawn, phases) {
		t.Errorf("the diagram draws the phases %v, the engine runs %v", drawn, phases)
	}
}
