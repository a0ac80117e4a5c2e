package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/engine"
)

// inputAddon is one add-on resource read from the input, with its definition.
type inputAddon struct {
	def   engine.Definition
	gvk   schema.GroupVersionKind
	addon addonsv1alpha1.Addon
}

// String names the add-on as messages do: CoreDNS kube-system/coredns.
func (a inputAddon) String() string {
	return fmt.Sprintf("%s %s/%s", a.gvk.Kind, a.addon.GetNamespace(), a.addon.GetName())
}

// definitions maps every add-on kind to its definition.
func definitions() (map[schema.GroupVersionKind]engine.Definition, error) {
	out := map[schema.GroupVersionKind]engine.Definition{}
	for _, def := range controllers.Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
		if err != nil {
			return nil, err
		}
		out[gvk] = def
	}
	return out, nil
}

// addonKinds returns the add-on kinds in the order of controllers.Definitions.
func addonKinds() ([]schema.GroupVersionKind, error) {
	var out []schema.GroupVersionKind
	for _, def := range controllers.Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
		if err != nil {
			return nil, err
		}
		out = append(out, gvk)
	}
	return out, nil
}

// readInputs reads the add-on resources of every file in files ("-" is stdin; a
// directory means its .yaml, .yml and .json files), in order. Objects without a namespace
// go to namespace. Anything but an add-on kind, an unknown field or a duplicate is an error
// that names the file and the document.
func readInputs(files []string, stdin io.Reader, namespace string) ([]inputAddon, error) {
	if len(files) == 0 {
		return nil, errors.New("no input: give add-on files with -f (-f - reads stdin)")
	}
	defs, err := definitions()
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range files {
		expanded, err := expand(f)
		if err != nil {
			return nil, err
		}
		paths = append(paths, expanded...)
	}
	var out []inputAddon
	seen := map[string]bool{}
	for _, path := range paths {
		data, err := readPath(path, stdin)
		if err != nil {
			return nil, err
		}
		addons, err := decodeAddons(data, path, namespace, defs)
		if err != nil {
			return nil, err
		}
		for _, a := range addons {
			if seen[a.String()] {
				return nil, fmt.Errorf("%s: %s is given twice", path, a)
			}
			seen[a.String()] = true
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no add-on resources in %s", strings.Join(files, ", "))
	}
	return out, nil
}

// expand returns path itself, or the manifest files of a directory, sorted.
func expand(path string) ([]string, error) {
	if path == "-" {
		return []string{path}, nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, ext) {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	return out, nil
}

func readPath(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(path)
}

// decodeAddons decodes every document of data (YAML or JSON) strictly into its add-on kind.
func decodeAddons(data []byte, path, namespace string, defs map[schema.GroupVersionKind]engine.Definition) ([]inputAddon, error) {
	name := path
	if path == "-" {
		name = "stdin"
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []inputAddon
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading document %d: %w", name, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		gvk := tm.GroupVersionKind()
		def, ok := defs[gvk]
		if !ok {
			return nil, fmt.Errorf("%s: document %d is %s %s, not an add-on (%s)", name, i, tm.APIVersion, tm.Kind, kindList(defs))
		}
		addon := def.Prototype.DeepCopyObject().(addonsv1alpha1.Addon)
		if err := yaml.UnmarshalStrict(doc, addon); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", name, i, gvk.Kind, err)
		}
		if addon.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d (%s) has no metadata.name", name, i, gvk.Kind)
		}
		if addon.GetNamespace() == "" {
			addon.SetNamespace(namespace)
		}
		addon.GetObjectKind().SetGroupVersionKind(gvk)
		out = append(out, inputAddon{def: def, gvk: gvk, addon: addon})
	}
}

// stripComments drops YAML comment lines, so that a document of comments only is empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func kindList(defs map[schema.GroupVersionKind]engine.Definition) string {
	kinds := make([]string, 0, len(defs))
	for gvk := range defs {
		kinds = append(kinds, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	slices.Sort(kinds)
	return strings.Join(kinds, ", ")
}
