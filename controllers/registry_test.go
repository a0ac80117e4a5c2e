package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
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
	// crdFiles maps each kind of config/crd/bases to its file name, and plurals to its
	// resource name: the RESTMapper's answer, without an API server.
	crdFiles, plurals map[string]string
	// role is the manager's ClusterRole; editor and viewer are the roles for people.
	role, editor, viewer rbacv1.ClusterRole
	// argoCD is the ConfigMap of Argo CD health checks.
	argoCD corev1.ConfigMap
	// readme is the README; e2e is TestAllAddons, of test/e2e/addons_test.go.
	readme, e2e string
}

func readRegistryLists(t *testing.T) *registryLists {
	t.Helper()
	l := &registryLists{crdFiles: map[string]string{}, plurals: map[string]string{}, channels: map[string]struct {
		Manifests []struct{ Name, Version string } `json:"manifests"`
	}{}}
	decodeYAML(t, "PROJECT", &l.project)
	decodeYAML(t, "config/crd/kustomization.yaml", &l.crdKustomization)
	decodeYAML(t, "config/samples/kustomization.yaml", &l.sampleKustomization)
	decodeYAML(t, "config/rbac/role.yaml", &l.role)
	decodeYAML(t, "config/rbac/addons_editor_role.yaml", &l.editor)
	decodeYAML(t, "config/rbac/addons_viewer_role.yaml", &l.viewer)
	decodeYAML(t, "examples/argocd/argocd-cm.yaml", &l.argoCD)
	l.readme = string(repoFile(t, "README.md"))
	e2e := string(repoFile(t, "test/e2e/addons_test.go"))
	if start := strings.Index(e2e, "\nfunc TestAllAddons("); start >= 0 {
		l.e2e = e2e[start:]
		if end := strings.Index(l.e2e[1:], "\nfunc "); end >= 0 {
			l.e2e = l.e2e[:end+1]
		}
	}
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
		l.plurals[crd.Spec.Names.Kind] = crd.Spec.Names.Plural
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

// registryCheck is one list that must name an add-on.
type registryCheck struct {
	list string
	ok   func() bool
}

// TestRegistryMatchesTheSharedLists checks every add-on of Definitions() (controllers/
// setup.go) against every list that must name it, the ones make addon (hack/addon)
// writes: PROJECT, the CRD and sample kustomizations and the sample, both channel files,
// its docs page and the README's catalogue, the Argo CD health checks, the manager's
// ClusterRole (its kind and every child kind) and the roles for people, a golden file
// for each shipped version, the envtest and adoption case lists, and the e2e suite's
// TestAllAddons. It needs no API server: the plurals come from config/crd/bases, a
// child's from its kind, as the API server's own types spell it. And every add-on kind
// the API registers must be in Definitions().
func TestRegistryMatchesTheSharedLists(t *testing.T) {
	lists := readRegistryLists(t)
	shipped := channels.NewCatalog(filepath.Join("..", "channels"), "")
	lifecycle, adoption := addonCases(), adoptionCases()
	defined := map[string]bool{}
	for _, def := range Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		defined[gvk.Kind] = true
		checks := registryChecks(lists, gvk, def)
		for _, version := range shipped.Versions(def.Prototype.ComponentName()) {
			golden := def.Prototype.ComponentName() + "-" + version + "-defaults.yaml"
			checks = append(checks, registryCheck{"controllers/testdata/golden (" + golden + ")", func() bool {
				_, err := os.Stat(filepath.Join("testdata", "golden", golden))
				return err == nil
			}})
		}
		if gvk.Kind != "CoreDNS" { // CoreDNS has lifecycle and adoption tests of its own.
			checks = append(checks,
				registryCheck{"addonCases() (controllers/addons_controller_test.go)", func() bool { _, ok := lifecycle[gvk.Kind]; return ok }},
				registryCheck{"adoptionCases() (controllers/adoption_catalogue_test.go)", func() bool { _, ok := adoption[gvk.Kind]; return ok }})
		}
		for _, c := range checks {
			if !c.ok() {
				t.Errorf("%s: %s does not list it (every add-on in Definitions() must be in each shared list; make addon writes them)", gvk.Kind, c.list)
			}
		}
	}
	for kind := range testScheme.KnownTypes(addonsv1alpha1.GroupVersion) {
		obj, err := testScheme.New(addonsv1alpha1.GroupVersion.WithKind(kind))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := obj.(addonsv1alpha1.Addon); ok && !defined[kind] {
			t.Errorf("%s is an add-on kind of the API, but Definitions() (controllers/setup.go) does not list it", kind)
		}
	}
	if len(defined) == 0 {
		t.Fatal("Definitions() lists no add-on")
	}
}

// registryChecks returns the checks of the lists that name an add-on by its kind,
// plural or component.
func registryChecks(lists *registryLists, gvk schema.GroupVersionKind, def engine.Definition) []registryCheck {
	component := def.Prototype.ComponentName()
	page := component
	if page == "" {
		page = strings.ToLower(gvk.Kind)
	}
	sample := fmt.Sprintf("addons_%s_%s.yaml", gvk.Version, strings.ToLower(gvk.Kind))
	plural := lists.plurals[gvk.Kind]
	checks := make([]registryCheck, 0, 16+len(def.Children))
	checks = append(checks, []registryCheck{
		{"PROJECT resources", func() bool {
			return slices.ContainsFunc(lists.project.Resources, func(r struct{ Group, Kind, Version string }) bool {
				return r.Kind == gvk.Kind && r.Group == "addons" && r.Version == gvk.Version
			})
		}},
		{"config/crd/bases (a CRD with a plural)", func() bool { return plural != "" }},
		{"config/crd/kustomization.yaml", func() bool {
			file, ok := lists.crdFiles[gvk.Kind]
			return ok && slices.Contains(lists.crdKustomization.Resources, "bases/"+file)
		}},
		{"config/samples/kustomization.yaml (" + sample + ")", func() bool {
			data, err := os.ReadFile(filepath.Join("..", "config", "samples", sample))
			return err == nil && strings.Contains(string(data), "kind: "+gvk.Kind) &&
				slices.Contains(lists.sampleKustomization.Resources, sample)
		}},
		// A kind whose Prototype names no package (Package, which installs any) is in no
		// channel file.
		{"channels/stable", func() bool { return component == "" || listed(lists.channels["stable"].Manifests, component) }},
		{"channels/rapid", func() bool { return component == "" || listed(lists.channels["rapid"].Manifests, component) }},
		{"docs/addons/" + page + ".md", func() bool {
			data, err := os.ReadFile(filepath.Join("..", "docs", "addons", page+".md"))
			return err == nil && strings.Contains(string(data), "kind: "+gvk.Kind)
		}},
		{"the README's catalogue", func() bool { return strings.Contains(lists.readme, "| `"+gvk.Kind+"` |") }},
		{"examples/argocd/argocd-cm.yaml (a health check)", func() bool {
			return lists.argoCD.Data["resource.customizations.health."+gvk.Group+"_"+gvk.Kind] != ""
		}},
		{"test/e2e/addons_test.go (TestAllAddons applies every kind)", func() bool {
			// CoreDNS comes from the suite's coreDNSManifest, every other kind is in
			// the manifest TestAllAddons writes out.
			return strings.Contains(lists.e2e, "kind: "+gvk.Kind+"\n") ||
				gvk.Kind == "CoreDNS" && strings.Contains(lists.e2e, "coreDNSManifest(")
		}},
		{"config/rbac/role.yaml for the add-on kind", func() bool {
			return plural != "" && allows(lists.role, gvk.Group, plural, "get", "list", "watch", "patch") &&
				allows(lists.role, gvk.Group, plural+"/status", "get", "patch") &&
				allows(lists.role, gvk.Group, plural+"/finalizers", "update")
		}},
		{"config/rbac/addons_editor_role.yaml", func() bool {
			return plural != "" && allows(lists.editor, gvk.Group, plural, peopleEditVerbs...) &&
				allows(lists.editor, gvk.Group, plural+"/status", "get")
		}},
		{"config/rbac/addons_viewer_role.yaml", func() bool {
			return plural != "" && allows(lists.viewer, gvk.Group, plural, peopleViewVerbs...) &&
				allows(lists.viewer, gvk.Group, plural+"/status", "get")
		}},
	}...)
	for _, child := range def.Children {
		resource := childResource(child)
		checks = append(checks, registryCheck{"config/rbac/role.yaml for child " + child.Kind + " (" + resource + ")", func() bool {
			return allows(lists.role, child.Group, resource, engine.ChildVerbs...)
		}})
	}
	return checks
}

// peopleEditVerbs and peopleViewVerbs are what the roles for people grant on every add-on kind.
var (
	peopleEditVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	peopleViewVerbs = []string{"get", "list", "watch"}
)

// childResource returns the resource name of a child kind. Children are built-in kinds
// (and APIService), whose resource names follow the rule the API server's RESTMapper
// guesses with, so no API server is needed.
func childResource(child schema.GroupVersionKind) string {
	resource, _ := meta.UnsafeGuessKindToResource(child)
	return resource.Resource
}

// listed reports whether a channel's manifests name component.
func listed(manifests []struct{ Name, Version string }, component string) bool {
	return slices.ContainsFunc(manifests, func(m struct{ Name, Version string }) bool {
		return m.Name == component && m.Version != ""
	})
}
