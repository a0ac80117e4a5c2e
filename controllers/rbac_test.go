package controllers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	builtinchannels "github.com/kaddons/kaddons/channels"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
)

// grant is one verb on one resource (or non-resource URL) of one API group.
type grant struct{ group, resource, verb string }

func (g grant) String() string { return g.verb + " " + g.resource + " (" + g.group + ")" }

// grantsOf expands RBAC rules into single grants.
func grantsOf(rules []rbacv1.PolicyRule) []grant {
	var out []grant
	for _, r := range rules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out = append(out, grant{group: "nonResourceURL", resource: u, verb: v})
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					out = append(out, grant{group: g, resource: res, verb: v})
				}
			}
		}
	}
	return out
}

// engineGrants are what the engine and the operator's own controllers need besides the
// add-on kinds and their children, each with its reason (docs/security.md lists them).
var engineGrants = map[grant]string{
	{"", "events", "create"}:                                  "events on add-ons",
	{"", "events", "patch"}:                                   "events on add-ons (series)",
	{"events.k8s.io", "events", "create"}:                     "events on add-ons",
	{"events.k8s.io", "events", "patch"}:                      "events on add-ons (series)",
	{"autoscaling", "horizontalpodautoscalers", "get"}:        "leave spec.replicas of scaled workloads alone",
	{"autoscaling", "horizontalpodautoscalers", "list"}:       "leave spec.replicas of scaled workloads alone",
	{"autoscaling", "horizontalpodautoscalers", "watch"}:      "leave spec.replicas of scaled workloads alone",
	{"", "namespaces", "get"}:                                 "AddonPolicy namespace selectors; a tenant namespace being deleted",
	{"", "namespaces", "list"}:                                "AddonPolicy namespace selectors (a metadata cache)",
	{"", "namespaces", "watch"}:                               "AddonPolicy namespace selectors (a metadata cache)",
	{"config.kaddons.dev", "addonpolicies", "get"}:            "AddonPolicy",
	{"config.kaddons.dev", "addonpolicies", "list"}:           "AddonPolicy",
	{"config.kaddons.dev", "addonpolicies", "watch"}:          "AddonPolicy",
	{"config.kaddons.dev", "addonpolicies/status", "get"}:     "AddonPolicy status",
	{"config.kaddons.dev", "addonpolicies/status", "patch"}:   "AddonPolicy status",
	{"addons.kaddons.dev", "addonsources", "get"}:             "AddonSource",
	{"addons.kaddons.dev", "addonsources", "list"}:            "AddonSource",
	{"addons.kaddons.dev", "addonsources", "watch"}:           "AddonSource",
	{"addons.kaddons.dev", "addonsources/status", "get"}:      "AddonSource status",
	{"addons.kaddons.dev", "addonsources/status", "patch"}:    "AddonSource status",
	{"addons.kaddons.dev", "addonextensions", "get"}:          "AddonExtension",
	{"addons.kaddons.dev", "addonextensions", "list"}:         "AddonExtension",
	{"addons.kaddons.dev", "addonextensions", "watch"}:        "AddonExtension",
	{"addons.kaddons.dev", "addonextensions/status", "get"}:   "AddonExtension status (discovery)",
	{"addons.kaddons.dev", "addonextensions/status", "patch"}: "AddonExtension status (discovery)",
	{"config.kaddons.dev", "operatorconfigs", "get"}:          "OperatorConfig",
	{"config.kaddons.dev", "operatorconfigs", "list"}:         "OperatorConfig",
	{"config.kaddons.dev", "operatorconfigs", "watch"}:        "OperatorConfig",
	{"config.kaddons.dev", "operatorconfigs", "create"}:       "the OperatorConfig default, created when there is none (its status feeds the default-ServiceAccount admission policy)",
	{"config.kaddons.dev", "operatorconfigs/status", "get"}:   "OperatorConfig status",
	{"config.kaddons.dev", "operatorconfigs/status", "patch"}: "OperatorConfig status",
}

// forbiddenVerbs are verbs manager-role never holds: with them a tenant's add-on could
// reach past the API server's escalation checks.
var forbiddenVerbs = []string{"bind", "escalate", "impersonate", "*"}

// TestManagerRoleIsLeastPrivilege derives what the operator needs from the add-on
// definitions and the shipped packages, and compares it with config/rbac/role.yaml
// (generated from the controllers' RBAC markers): every grant of the role is needed, and
// every need is granted. The operator needs, for each add-on kind, to read and patch it,
// its status and its finalizers; for each child kind, the engine's ChildVerbs; every
// permission a package's Role or ClusterRole grants, and every permission of a role a
// package binds (the API server lets it grant only what it holds, as it has no bind or
// escalate); and the engine's own needs (engineGrants).
func TestManagerRoleIsLeastPrivilege(t *testing.T) {
	role := readRegistryLists(t).role
	need := map[grant]string{}
	for g, why := range engineGrants {
		need[g] = why
	}
	mapper := testMgr.GetRESTMapper()
	source := channels.NewFSCatalog(builtinchannels.FS, "builtin", channels.DefaultChannel)
	for _, def := range Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk.Kind, err)
		}
		plural := mapping.Resource.Resource
		for _, v := range []string{"get", "list", "watch", "patch"} {
			need[grant{gvk.Group, plural, v}] = gvk.Kind + " resources (finalizer by JSON patch)"
		}
		need[grant{gvk.Group, plural + "/status", "get"}] = gvk.Kind + " status"
		need[grant{gvk.Group, plural + "/status", "patch"}] = gvk.Kind + " status"
		need[grant{gvk.Group, plural + "/finalizers", "update"}] = gvk.Kind + " children's blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"
		for _, child := range def.Children {
			m, err := mapper.RESTMapping(child.GroupKind(), child.Version)
			if err != nil {
				t.Fatalf("%s child %s: %v", gvk.Kind, child, err)
			}
			for _, v := range engine.ChildVerbs {
				need[grant{child.Group, m.Resource.Resource, v}] = gvk.Kind + " child " + child.Kind
			}
		}
		component := def.Prototype.ComponentName()
		for _, version := range source.Versions(component) {
			for g, why := range packageGrants(t, source, component, version) {
				need[g] = why
			}
		}
	}

	var extra, missing []string
	granted := map[grant]bool{}
	for _, g := range grantsOf(role.Rules) {
		granted[g] = true
		if slices.Contains(forbiddenVerbs, g.verb) || g.resource == "*" || g.group == "*" {
			t.Errorf("manager-role grants %s", g)
		}
		if _, ok := need[g]; !ok {
			extra = append(extra, g.String())
		}
	}
	for g, why := range need {
		if !granted[g] {
			missing = append(missing, g.String()+": "+why)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 {
		t.Errorf("config/rbac/role.yaml grants what nothing needs (remove the markers):\n  %s", strings.Join(extra, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("config/rbac/role.yaml lacks what is needed (add RBAC markers):\n  %s", strings.Join(missing, "\n  "))
	}
}

// packageGrants returns what the operator must hold to create the package's Roles and
// ClusterRoles and its bindings to roles of the cluster (system:auth-delegator, ...),
// whose rules it reads from the API server.
func packageGrants(t *testing.T, source *channels.Catalog, component, version string) map[grant]string {
	t.Helper()
	manifest, err := source.Render(channels.Resolved{Addon: component, Version: version})
	if err != nil {
		t.Fatalf("rendering %s %s: %v", component, version, err)
	}
	out := map[grant]string{}
	own := map[string]bool{}
	var bound []rbacv1.RoleRef
	var boundIn []string
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); err != nil {
			break
		}
		why := component + " " + version + " " + u.GetKind() + " " + u.GetName()
		switch u.GetKind() {
		case "ClusterRole", "Role":
			r := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
				t.Fatal(err)
			}
			own[u.GetKind()+"/"+u.GetName()] = true
			for _, g := range grantsOf(r.Rules) {
				out[g] = "to grant it in " + why
			}
		case "ClusterRoleBinding", "RoleBinding":
			b := &rbacv1.RoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
				t.Fatal(err)
			}
			bound = append(bound, b.RoleRef)
			boundIn = append(boundIn, u.GetNamespace())
		}
	}
	for i, ref := range bound {
		if own[ref.Kind+"/"+ref.Name] {
			continue
		}
		var rules []rbacv1.PolicyRule
		if ref.Kind == "ClusterRole" {
			r := &rbacv1.ClusterRole{}
			if err := k8sClient.Get(context.Background(), types.NamespacedName{Name: ref.Name}, r); err != nil {
				t.Fatalf("%s %s binds ClusterRole %s: %v", component, version, ref.Name, err)
			}
			rules = r.Rules
		} else {
			r := &rbacv1.Role{}
			if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: boundIn[i], Name: ref.Name}, r); err != nil {
				t.Fatalf("%s %s binds Role %s/%s: %v", component, version, boundIn[i], ref.Name, err)
			}
			rules = r.Rules
		}
		for _, g := range grantsOf(rules) {
			out[g] = "to bind " + ref.Kind + " " + ref.Name + " in " + component + " " + version
		}
	}
	return out
}

// TestPeopleRolesCoverEveryAddonKind checks the roles for people against the add-on
// definitions: kaddons-addons-editor-role lets its holder edit every add-on kind and read
// its status, and kaddons-addons-viewer-role (aggregated into view) lets its holder read
// every add-on kind, so that no kind is left out when one is added.
func TestPeopleRolesCoverEveryAddonKind(t *testing.T) {
	read := func(file string) map[grant]bool {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("..", "config", "rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.ClusterRole{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(role); err != nil {
			t.Fatal(err)
		}
		grants := map[grant]bool{}
		for _, g := range grantsOf(role.Rules) {
			grants[g] = true
		}
		return grants
	}
	editor, viewer := read("addons_editor_role.yaml"), read("addons_viewer_role.yaml")
	plurals := readRegistryLists(t).plurals
	for _, def := range Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		plural := plurals[gvk.Kind]
		if plural == "" {
			t.Fatalf("config/crd/bases has no CRD of %s", gvk.Kind)
		}
		for _, verb := range peopleEditVerbs {
			if !editor[grant{gvk.Group, plural, verb}] {
				t.Errorf("the editor role may not %s %s", verb, plural)
			}
		}
		for _, verb := range peopleViewVerbs {
			if !viewer[grant{gvk.Group, plural, verb}] {
				t.Errorf("the viewer role may not %s %s", verb, plural)
			}
		}
		for _, role := range []map[grant]bool{editor, viewer} {
			if !role[grant{gvk.Group, plural + "/status", "get"}] {
				t.Errorf("a role for people may not get %s/status", plural)
			}
		}
	}
}
