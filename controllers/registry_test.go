package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/kaddons/kaddons/internal/engine"
)

// repoFile reads a file of the repository, relative to its root.
func repoFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return data
}

// decodeYAML decodes a YAML file of the repository into out.
func decodeYAML(t *testing.T, path string, out any) {
	t.Helper()
	if err := yaml.Unmarshal(repoFile(t, path), out); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
}

// registryLists is what the shared lists of the repository hold, read once.
type registryLists struct {
	project struct {
		Resources []struct{ Group, Kind, Version string } `json:"resources"`
	}
	crdKustomization, sampleKustomization struct {
		Resources []string `json:"resources"`
	}
	channels map[string]struct {
		Manifests []struct{ Name, Version string } `json:"manifests"`
	}
	// crdFiles maps each kind of config/crd/bases to its file name.
	crdFiles map[string]string
	role     rbacv1.ClusterRole
}

func readRegistryLists(t *testing.T) *registryLists {
	t.Helper()
	l := &registryLists{crdFiles: map[string]string{}, channels: map[string]struct {
		Manifests []struct{ Name, Version string } `json:"manifests"`
	}{}}
	decodeYAML(t, "PROJECT", &l.project)
	decodeYAML(t, "config/crd/kustomization.yaml", &l.crdKustomization)
	decodeYAML(t, "config/samples/kustomization.yaml", &l.sampleKustomization)
	decodeYAML(t, "config/rbac/role.yaml", &l.role)
	for _, name := range []string{"stable", "rapid"} {
		c := l.channels[name]
		decodeYAML(t, filepath.Join("channels", name), &c)
		l.channels[name] = c
	}
	files, err := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("listing config/crd/bases: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		decodeYAML(t, filepath.Join("config", "crd", "bases", filepath.Base(f)), crd)
		l.crdFiles[crd.Spec.Names.Kind] = filepath.Base(f)
	}
	return l
}

// allows reports whether the role grants verbs on resource of group.
func allows(role rbacv1.ClusterRole, group, resource string, verbs ...string) bool {
	granted := map[string]bool{}
	for _, rule := range role.Rules {
		if !slices.Contains(rule.APIGroups, group) || !slices.Contains(rule.Resources, resource) {
			continue
		}
		for _, v := range rule.Verbs {
			granted[v] = true
		}
	}
	for _, v := range verbs {
		if !granted[v] && !granted["*"] {
			return false
		}
	}
	return true
}

// TestRegistryMatchesTheSharedLists checks every add-on definition against every list
// that must name it: PROJECT, the CRD and sample kustomizations, both channel files, its
// docs page and the README's catalogue, and that the manager's ClusterRole covers its own
// kind and every kind of its children.
func TestRegistryMatchesTheSharedLists(t *testing.T) {
	lists := readRegistryLists(t)
	readme := string(repoFile(t, "README.md"))
	mapper := testMgr.GetRESTMapper()
	for _, def := range Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		component := def.Prototype.ComponentName()
		sample := fmt.Sprintf("addons_%s_%s.yaml", gvk.Version, strings.ToLower(gvk.Kind))
		plural := ""
		if mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			plural = mapping.Resource.Resource
		}
		checks := []struct {
			list string
			ok   func() bool
		}{
			{"PROJECT resources", func() bool {
				return slices.ContainsFunc(lists.project.Resources, func(r struct{ Group, Kind, Version string }) bool {
					return r.Kind == gvk.Kind && r.Group == "addons" && r.Version == gvk.Version
				})
			}},
			{"config/crd/kustomization.yaml", func() bool {
				file, ok := lists.crdFiles[gvk.Kind]
				return ok && slices.Contains(lists.crdKustomization.Resources, "bases/"+file)
			}},
			{"config/samples/kustomization.yaml (" + sample + ")", func() bool {
				data, err := os.ReadFile(filepath.Join("..", "config", "samples", sample))
				return err == nil && strings.Contains(string(data), "kind: "+gvk.Kind) &&
					slices.Contains(lists.sampleKustomization.Resources, sample)
			}},
			{"channels/stable", func() bool { return listed(lists.channels["stable"].Manifests, component) }},
			{"channels/rapid", func() bool { return listed(lists.channels["rapid"].Manifests, component) }},
			{"docs/addons/" + component + ".md", func() bool {
				data, err := os.ReadFile(filepath.Join("..", "docs", "addons", component+".md"))
				return err == nil && strings.Contains(string(data), "kind: "+gvk.Kind)
			}},
			{"the README's catalogue", func() bool { return strings.Contains(readme, "| `"+gvk.Kind+"` |") }},
			{"config/rbac/role.yaml for the add-on kind", func() bool {
				return plural != "" && allows(lists.role, gvk.Group, plural, "get", "list", "watch", "patch") &&
					allows(lists.role, gvk.Group, plural+"/status", "get", "patch") &&
					allows(lists.role, gvk.Group, plural+"/finalizers", "update")
			}},
		}
		for _, child := range def.Children {
			checks = append(checks, struct {
				list string
				ok   func() bool
			}{"config/rbac/role.yaml for child " + child.Kind, func() bool { return roleCoversChild(t, lists.role, child) }})
		}
		for _, c := range checks {
			if !c.ok() {
				t.Errorf("%s: %s does not list it (every add-on in Definitions() must be in each shared list)", gvk.Kind, c.list)
			}
		}
	}
}

// roleCoversChild reports whether the role lets the engine manage child objects.
func roleCoversChild(t *testing.T, role rbacv1.ClusterRole, child schema.GroupVersionKind) bool {
	t.Helper()
	mapping, err := testMgr.GetRESTMapper().RESTMapping(child.GroupKind(), child.Version)
	if err != nil {
		t.Errorf("the API server does not serve child kind %s: %v", child, err)
		return false
	}
	return allows(role, child.Group, mapping.Resource.Resource, engine.ChildVerbs...)
}

// listed reports whether a channel's manifests name component.
func listed(manifests []struct{ Name, Version string }, component string) bool {
	return slices.ContainsFunc(manifests, func(m struct{ Name, Version string }) bool {
		return m.Name == component && m.Version != ""
	})
}
