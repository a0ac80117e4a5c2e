// Command addon scaffolds a new add-on kind: `make addon NAME=<Kind>` runs it, then the
// generators (CRDs, deep copies, RBAC, dist/, examples/kops) and the golden test that
// writes the new kind's golden file.
//
// It writes every file a new add-on needs (types, controller, a first working package,
// sample, docs page) and adds the kind to every list that must name it, the ones
// TestRegistryMatchesTheSharedLists (controllers/registry_test.go) checks: setup.go's
// Definitions, PROJECT, the CRD and sample kustomizations, the roles for people, both
// channel files, the README's catalogue, the Argo CD health checks, and the golden,
// envtest and e2e case lists. Everything is worked out before anything is written, so a
// refused name or a missing anchor leaves the tree as it was.
//
// A name that is not an exported Go identifier and a valid Kubernetes kind, or that any
// file or list already holds, is refused with exit status 2.
package main

import (
	"bytes"
	"embed"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
)

//go:embed templates
var templates embed.FS

// firstVersion is the version of the first package, and image is what it runs: the
// pause container does nothing, needs no configuration, runs as non-root on a read-only
// file system and becomes Ready on any cluster, so the first package is a real workload
// the engine can apply, watch and report on until the author puts the add-on in.
const (
	firstVersion = "0.1.0"
	image        = "registry.k8s.io/pause:3.10"
)

// kindPattern is an exported Go identifier that is also a Kubernetes kind: an upper-case
// ASCII letter, then ASCII letters and digits.
var kindPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// names are the spellings of the new kind that files and lists use.
type names struct {
	// Kind is the Go type and the Kubernetes kind (NodeLocalDNS).
	Kind string
	// Lower is the kind in lower case: the CRD's singular, the file names (nodelocaldns).
	Lower string
	// Plural is the CRD's resource name (nodelocaldnses).
	Plural string
	// Component names the packages under channels/packages and the docs page; it is Lower.
	Component string
	// Recv is the receiver name of the Addon methods.
	Recv string
	// Version and Image describe the first package.
	Version, Image string
}

func newNames(kind string) (names, error) {
	if !kindPattern.MatchString(kind) {
		return names{}, fmt.Errorf("NAME %q is not a kind: it must start with an upper-case letter and hold only letters and digits (ExternalDNS)", kind)
	}
	// The lower-case name is a label value, a DNS label and part of the CRD name.
	if len(kind) > 50 {
		return names{}, fmt.Errorf("NAME %q is longer than 50 characters", kind)
	}
	lower := strings.ToLower(kind)
	return names{Kind: kind, Lower: lower, Plural: plural(lower), Component: lower,
		Recv: lower[:1], Version: firstVersion, Image: image}, nil
}

// plural returns the resource name of a lower-case kind by the English rules that
// controller-gen's default (flect) applies to such names; the types file sets it
// explicitly, so the CRD and every list agree whatever the rule.
func plural(lower string) string {
	switch {
	case strings.HasSuffix(lower, "s"), strings.HasSuffix(lower, "x"), strings.HasSuffix(lower, "z"),
		strings.HasSuffix(lower, "ch"), strings.HasSuffix(lower, "sh"):
		return lower + "es"
	case strings.HasSuffix(lower, "y") && len(lower) > 1 && !strings.ContainsAny(lower[len(lower)-2:len(lower)-1], "aeiou"):
		return lower[:len(lower)-1] + "ies"
	default:
		return lower + "s"
	}
}

// file is a file to create.
type file struct {
	path, template string
}

// edit adds the new kind to a shared list. apply returns the file with the entry added,
// and the file unchanged when the entry is there already.
type edit struct {
	path  string
	apply func(content string, n names) (string, error)
}

func files(n names) []file {
	pkg := filepath.Join("channels", "packages", n.Component, n.Version)
	return []file{
		{filepath.Join("api", "v1alpha1", n.Lower+"_types.go"), "types.go.tmpl"},
		{filepath.Join("controllers", n.Lower+"_controller.go"), "controller.go.tmpl"},
		{filepath.Join(pkg, "kustomization.yaml"), "package/kustomization.yaml.tmpl"},
		{filepath.Join(pkg, "serviceaccount.yaml"), "package/serviceaccount.yaml.tmpl"},
		{filepath.Join(pkg, "deployment.yaml"), "package/deployment.yaml.tmpl"},
		{filepath.Join("config", "samples", "addons_v1alpha1_"+n.Lower+".yaml"), "sample.yaml.tmpl"},
		{filepath.Join("docs", "addons", n.Component+".md"), "doc.md.tmpl"},
	}
}

// anchorComment marks where make addon writes a new kind's test case in a Go list.
const anchorComment = "// make addon (hack/addon) writes each new kind's"

func edits() []edit {
	return []edit{
		{"controllers/setup.go", func(s string, n names) (string, error) {
			return insertBefore(s, n.Kind+"Definition(),", "\t}\n}", "\t\t"+n.Kind+"Definition(),\n",
				"return []engine.Definition{")
		}},
		{"PROJECT", func(s string, n names) (string, error) {
			return insertBefore(s, "  kind: "+n.Kind+"\n", "version: \"3\"\n", render("lists/project.yaml.tmpl", n), "")
		}},
		{"config/crd/kustomization.yaml", func(s string, n names) (string, error) {
			entry := "- bases/addons.kaddons.dev_" + n.Plural + ".yaml\n"
			return insertBefore(s, entry, "- bases/addons.kaddons.dev_addonsources.yaml\n", entry, "")
		}},
		{"config/samples/kustomization.yaml", func(s string, n names) (string, error) {
			entry := "- addons_v1alpha1_" + n.Lower + ".yaml\n"
			return insertBefore(s, entry, "- addons_v1alpha1_package.yaml\n", entry, "")
		}},
		{"config/rbac/addons_editor_role.yaml", addToRoleLists},
		{"config/rbac/addons_viewer_role.yaml", addToRoleLists},
		{"channels/stable", addToChannel},
		{"channels/rapid", addToChannel},
		{"README.md", addToCatalogue},
		{"examples/argocd/argocd-cm.yaml", addHealthCheck},
		{"controllers/addons_golden_test.go", func(s string, n names) (string, error) {
			return insertAtAnchor(s, n.Kind+"Definition(), newCR", render("lists/golden_case.go.tmpl", n))
		}},
		{"controllers/addons_controller_test.go", func(s string, n names) (string, error) {
			return insertAtAnchor(s, "\""+n.Kind+"\": {", render("lists/addon_case.go.tmpl", n))
		}},
		{"controllers/adoption_catalogue_test.go", func(s string, n names) (string, error) {
			return insertAtAnchor(s, "\""+n.Kind+"\": {", render("lists/adoption_case.go.tmpl", n))
		}},
		{"test/e2e/addons_test.go", func(s string, n names) (string, error) {
			// The manifest TestAllAddons applies: its first subtest fails without every kind.
			return insertBefore(s, "kind: "+n.Kind+"\n", "`, nsA, ui, pkgNS, oldVersion))", render("lists/e2e_manifest.yaml.tmpl", n),
				"func TestAllAddons(")
		}},
	}
}

// insertBefore inserts text before the first anchor after the first after (from the
// start when after is empty), unless s already contains present.
func insertBefore(s, present, anchor, text, after string) (string, error) {
	if strings.Contains(s, present) {
		return s, nil
	}
	from := 0
	if after != "" {
		from = strings.Index(s, after)
		if from < 0 {
			return "", fmt.Errorf("%q is missing", after)
		}
	}
	i := strings.Index(s[from:], anchor)
	if i < 0 {
		return "", fmt.Errorf("the anchor %q is missing", anchor)
	}
	i += from
	return s[:i] + text + s[i:], nil
}

// insertAtAnchor inserts text on the line before anchorComment, which sits in a Go
// list of test cases.
func insertAtAnchor(s, present, text string) (string, error) {
	if strings.Contains(s, present) {
		return s, nil
	}
	if strings.Count(s, anchorComment) != 1 {
		return "", fmt.Errorf("the anchor comment %q must be there once", anchorComment)
	}
	i := strings.Index(s, anchorComment)
	i = strings.LastIndex(s[:i], "\n") + 1
	return s[:i] + text + s[i:], nil
}

// addToRoleLists adds the plural and its status to the resource lists of a role for
// people: each list of add-on resources, and each list of their status subresources,
// kept sorted.
func addToRoleLists(s string, n names) (string, error) {
	lines := strings.SplitAfter(s, "\n")
	var out []string
	added := 0
	for i := 0; i < len(lines); {
		out = append(out, lines[i])
		if strings.TrimSpace(lines[i]) != "resources:" {
			i++
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		j := i + 1
		var items []string
		for ; j < len(lines) && strings.HasPrefix(lines[j], indent+"- "); j++ {
			items = append(items, strings.TrimSpace(strings.TrimPrefix(lines[j], indent+"- ")))
		}
		entry := n.Plural
		if len(items) > 0 && strings.HasSuffix(items[0], "/status") {
			entry += "/status"
		}
		if len(items) > 0 && !slices.Contains(items, entry) {
			items = append(items, entry)
			slices.Sort(items)
			added++
		}
		for _, item := range items {
			out = append(out, indent+"- "+item+"\n")
		}
		i = j
	}
	if added == 0 && !strings.Contains(s, "- "+n.Plural+"\n") {
		return "", errors.New("no resources list to add the kind to")
	}
	return strings.Join(out, ""), nil
}

// addToChannel offers the first package in a channel file.
func addToChannel(s string, n names) (string, error) {
	if regexp.MustCompile(`(?m)^- name: ` + regexp.QuoteMeta(n.Component) + `$`).MatchString(s) {
		return s, nil
	}
	if !strings.Contains(s, "manifests:\n") {
		return "", errors.New("no manifests: list")
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + "- name: " + n.Component + "\n  version: " + n.Version + "\n", nil
}

// addToCatalogue adds a row after the last row of the README's catalogue table.
func addToCatalogue(s string, n names) (string, error) {
	if strings.Contains(s, "| `"+n.Kind+"` |") {
		return s, nil
	}
	const header = "| Kind | Installs | Docs |\n|---|---|---|\n"
	start := strings.Index(s, header)
	if start < 0 {
		return "", fmt.Errorf("the catalogue header %q is missing", header)
	}
	end := start + len(header)
	for strings.HasPrefix(s[end:], "| `") {
		end += strings.Index(s[end:], "\n") + 1
	}
	return s[:end] + render("lists/readme_row.md.tmpl", n) + s[end:], nil
}

// addHealthCheck gives the kind the Argo CD health check every add-on kind has: the
// script of health.lua next to the ConfigMap, unchanged.
func addHealthCheck(s string, n names) (string, error) {
	key := "  resource.customizations.health.addons.kaddons.dev_" + n.Kind + ": |\n"
	if strings.Contains(s, key) {
		return s, nil
	}
	script, err := os.ReadFile(filepath.Join("examples", "argocd", "health.lua"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(key)
	for line := range strings.Lines(string(script)) {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("    " + line)
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + b.String(), nil
}

// render executes a template; the templates are the program's own, so an error is a bug.
func render(name string, n names) string {
	t, err := template.ParseFS(templates, "templates/"+name)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, n); err != nil {
		panic(err)
	}
	return b.String()
}

// declaredTypes returns the type names the API package declares.
func declaredTypes(dir string) (map[string]bool, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	types := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				types[spec.(*ast.TypeSpec).Name.Name] = true
			}
		}
	}
	return types, nil
}

// refuse returns why kind cannot be added: it, or a file or list entry it needs, exists.
func refuse(n names) error {
	declared, err := declaredTypes(filepath.Join("api", "v1alpha1"))
	if err != nil {
		return err
	}
	for _, t := range []string{n.Kind, n.Kind + "Spec", n.Kind + "Status", n.Kind + "List"} {
		if declared[t] {
			return fmt.Errorf("api/v1alpha1 already declares %s", t)
		}
	}
	for _, f := range files(n) {
		if _, err := os.Stat(f.path); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s already exists", f.path)
		}
	}
	if _, err := os.Stat(filepath.Join("channels", "packages", n.Component)); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("channels/packages/%s already exists", n.Component)
	}
	for _, e := range edits() {
		data, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		if changed, err := e.apply(string(data), n); err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		} else if changed == string(data) {
			return fmt.Errorf("%s already lists %s", e.path, n.Kind)
		}
	}
	return nil
}

// scaffold works out every file and edit, then writes them all.
func scaffold(n names) ([]string, error) {
	out := map[string][]byte{}
	var order []string
	for _, f := range files(n) {
		content := []byte(render(f.template, n))
		if strings.HasSuffix(f.path, ".go") {
			formatted, err := format.Source(content)
			if err != nil {
				return nil, fmt.Errorf("formatting %s: %w", f.path, err)
			}
			content = formatted
		}
		out[f.path] = content
		order = append(order, f.path)
	}
	for _, e := range edits() {
		data, err := os.ReadFile(e.path)
		if err != nil {
			return nil, err
		}
		changed, err := e.apply(string(data), n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.path, err)
		}
		content := []byte(changed)
		if strings.HasSuffix(e.path, ".go") {
			if content, err = format.Source(content); err != nil {
				return nil, fmt.Errorf("formatting %s: %w", e.path, err)
			}
		}
		out[e.path] = content
		order = append(order, e.path)
	}
	for _, path := range order {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, out[path], 0o644); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func main() {
	name := flag.String("name", "", "the new add-on's kind, for example ExternalDNS")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := os.Chdir(*root); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	n, err := newNames(*name)
	if err == nil {
		err = refuse(n)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "make addon: refusing NAME=%s: %v\n", *name, err)
		os.Exit(2)
	}
	written, err := scaffold(n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "make addon: %v\n", err)
		os.Exit(1)
	}
	for _, path := range written {
		fmt.Println("wrote", path)
	}
}
