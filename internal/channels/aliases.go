package channels

import (
	"bytes"
	"fmt"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// MaxAliasNodes caps the YAML nodes that aliases (*name, and merge keys <<: *name) add
// to a package once expanded, over all its files. kustomize replaces every alias with a
// copy of its anchor's value before it builds (kyaml's DeAnchor, which counts nothing),
// so nine levels of nine aliases each, under a kilobyte of YAML, would become 387 million
// nodes: tens of gigabytes. A package's own nodes are bounded by MaxPackageBytes; this
// bounds what aliases add to them. Real manifests that use anchors repeat a few blocks
// (resources, tolerations, an env list) and add a few thousand nodes at most.
const MaxAliasNodes = 100000

// maxAliasNesting bounds how deep checkAliases looks for YAML inside string values (an
// inline patch in a kustomization, which kustomize parses again, holds YAML in a string).
const maxAliasNesting = 2

// checkAliases refuses, with PackageTooLarge naming the file, a package whose aliases
// expand to more than MaxAliasNodes nodes. It reads each file as kustomize's reader does
// (go-yaml v3 nodes, one document at a time), without expanding anything: each anchor's
// expanded size is counted once and reused by every alias to it. Strings that hold YAML
// with aliases count too. A document that does not parse is left to the build, which
// fails on it with its own message before expanding anything.
func checkAliases(key string, files []packageFile) error {
	budget := int64(MaxAliasNodes)
	for _, f := range files {
		if err := aliasBudget(f.data, &budget, 0); err != nil {
			return tooLargef(key, "%s: %v", f.name, err)
		}
	}
	return nil
}

// errTooManyAliases is what aliasBudget returns once the budget is spent.
var errTooManyAliases = fmt.Errorf("YAML aliases expand to more than %d nodes "+
	"(the cap on what aliases may add to a package, which kustomize expands in memory)", MaxAliasNodes)

// aliasBudget takes from budget the nodes that the aliases in the YAML stream data add
// once expanded, and fails when it runs out. nesting counts the strings data was found in.
func aliasBudget(data []byte, budget *int64, nesting int) error {
	decoder := kyaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc kyaml.Node
		if err := decoder.Decode(&doc); err != nil {
			// The end of the stream, or a document the build refuses with its own
			// message, before it expands anything.
			return nil
		}
		c := aliasCounter{sizes: map[*kyaml.Node]int64{}, budget: budget, nesting: nesting}
		if err := c.walk(&doc); err != nil {
			return err
		}
	}
}

// aliasCounter walks one document.
type aliasCounter struct {
	// sizes memoises the expanded size of each anchored node an alias points to; a
	// negative size marks a node being measured (an alias inside its own anchor).
	sizes   map[*kyaml.Node]int64
	budget  *int64
	nesting int
}

// walk visits every node of the document as written and charges each alias the expanded
// size of its anchor.
func (c *aliasCounter) walk(n *kyaml.Node) error {
	switch n.Kind {
	case kyaml.AliasNode:
		size, err := c.size(n.Alias)
		if err != nil {
			return err
		}
		if *c.budget -= size; *c.budget < 0 {
			return errTooManyAliases
		}
		return nil
	case kyaml.ScalarNode:
		if c.nesting < maxAliasNesting && strings.Contains(n.Value, "*") && strings.Contains(n.Value, "&") {
			return aliasBudget([]byte(n.Value), c.budget, c.nesting+1)
		}
		return nil
	}
	for _, child := range n.Content {
		if err := c.walk(child); err != nil {
			return err
		}
	}
	return nil
}

// size returns how many nodes n stands for once every alias in it is expanded. Sizes
// saturate just above the budget left, so that no count overflows.
func (c *aliasCounter) size(n *kyaml.Node) (int64, error) {
	if n == nil {
		return 0, nil
	}
	if s, ok := c.sizes[n]; ok {
		if s < 0 {
			return 0, fmt.Errorf("the YAML anchor %q contains an alias to itself", n.Anchor)
		}
		return s, nil
	}
	c.sizes[n] = -1
	total := int64(1)
	if n.Kind == kyaml.AliasNode {
		s, err := c.size(n.Alias)
		if err != nil {
			return 0, err
		}
		total = s
	}
	for _, child := range n.Content {
		s, err := c.size(child)
		if err != nil {
			return 0, err
		}
		if total += s; total > *c.budget {
			total = *c.budget + 1
			break
		}
	}
	c.sizes[n] = total
	return total, nil
}
