package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

const operatorNamespace = "kaddons-system"

// policy returns an AddonPolicy named name in the operator's namespace.
func policy(name string, rules ...configv1alpha1.AddonPolicyRule) configv1alpha1.AddonPolicy {
	return configv1alpha1.AddonPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
		Spec:       configv1alpha1.AddonPolicySpec{Rules: rules},
	}
}

// tenants selects the namespaces labelled tenant=true.
func tenants() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}}
}

// request is a CoreDNS from stable at 1.12.1 in the tenant namespace team-a; change
// adjusts it per case.
func request(change func(*Request)) Request {
	req := Request{
		Namespace:       "team-a",
		NamespaceLabels: map[string]string{"tenant": "true", "team": "dns"},
		PolicyNamespace: operatorNamespace,
		Kind:            "CoreDNS",
		Channel:         "stable",
		Version:         "1.12.1",
	}
	if change != nil {
		change(&req)
	}
	return req
}

func TestEvaluate(t *testing.T) {
	teamDNS := configv1alpha1.AddonPolicyRule{
		Name:              "team-dns",
		NamespaceSelector: tenants(),
		Kinds:             []string{"CoreDNS"},
		Channels:          []string{"stable"},
		Versions:          ">=1.11.0, <1.13.0",
		AllowPatches:      ptr.To(false),
	}
	withRule := func(change func(*configv1alpha1.AddonPolicyRule)) configv1alpha1.AddonPolicyRule {
		r := *teamDNS.DeepCopy()
		change(&r)
		return r
	}
	deploymentPatches := withRule(func(r *configv1alpha1.AddonPolicyRule) {
		r.AllowPatches, r.PatchKinds = ptr.To(true), []string{"Deployment", "ConfigMap"}
	})
	selecting := func(sel *metav1.LabelSelector) configv1alpha1.AddonPolicyRule {
		return configv1alpha1.AddonPolicyRule{Name: "team-dns", NamespaceSelector: sel}
	}
	const (
		allowedByTeamDNS = "AddonPolicy kaddons-system/tenants rules[0] (team-dns) allows CoreDNS in namespace team-a"
		noRule           = "no AddonPolicy rule allows CoreDNS in namespace team-a"
		deniedByTeamDNS  = "AddonPolicy kaddons-system/tenants rules[0] (team-dns) does not allow "
		teamDNSRule      = "kaddons-system/tenants rules[0] (team-dns)"
		noPolicy         = "no AddonPolicy permits add-ons in namespace team-a, which the operator does not trust: " +
			"to permit them, create an AddonPolicy in namespace kaddons-system whose namespaceSelector selects " +
			"namespace team-a (kubernetes.io/metadata.name: team-a)"
	)
	permitted := Decision{Permitted: true, Rule: teamDNSRule, Message: allowedByTeamDNS}
	noRuleApplies := Decision{Message: noRule}

	tests := []struct {
		name     string
		policies []configv1alpha1.AddonPolicy
		req      Request
		want     Decision
	}{
		// Default deny: no policy at all.
		{
			name: "no policies permit a trusted namespace",
			req:  request(func(r *Request) { r.Trusted = true }),
			want: Decision{Permitted: true, Message: "no AddonPolicy: namespace team-a is trusted"},
		},
		{
			name: "no policies permit everything in a trusted namespace",
			req: request(func(r *Request) {
				r.Trusted, r.Kind, r.Channel, r.TargetNamespace, r.HasPatches, r.PatchKinds, r.FreeFormFields =
					true, "Dashboard", "rapid", "kubernetes-dashboard", true, []string{"ClusterRole"}, []string{"spec.corefile"}
			}),
			want: Decision{Permitted: true, Message: "no AddonPolicy: namespace team-a is trusted"},
		},
		{
			name: "no policies refuse an untrusted namespace and say how to permit it",
			req:  request(nil),
			want: Decision{Message: noPolicy},
		},
		{
			name:     "an empty list is no policy",
			policies: []configv1alpha1.AddonPolicy{},
			req:      request(func(r *Request) { r.Kind, r.Channel, r.HasPatches = "Dashboard", "rapid", true }),
			want:     Decision{Message: noPolicy},
		},
		{
			name:     "with a policy, a trusted namespace needs a rule too",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Namespace, r.NamespaceLabels, r.Trusted = "kube-system", nil, true }),
			want:     Decision{Message: "no AddonPolicy rule allows CoreDNS in namespace kube-system"},
		},
		{
			name:     "every field allowed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(nil),
			want:     permitted,
		},

		// Namespace selector.
		{
			name:     "matchLabels miss",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.NamespaceLabels = map[string]string{"tenant": "false"} }),
			want:     noRuleApplies,
		},
		{
			name:     "matchLabels against a namespace without labels",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.NamespaceLabels = nil }),
			want:     noRuleApplies,
		},
		{
			name: "matchExpressions In match",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"dns", "net"}},
				},
			}))},
			req:  request(nil),
			want: permitted,
		},
		{
			name: "matchExpressions NotIn miss",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dns"}},
				},
			}))},
			req:  request(nil),
			want: noRuleApplies,
		},
		{
			name: "matchExpressions Exists and DoesNotExist are ANDed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "tenant", Operator: metav1.LabelSelectorOpExists},
					{Key: "frozen", Operator: metav1.LabelSelectorOpDoesNotExist},
				},
			}))},
			req:  request(nil),
			want: permitted,
		},
		{
			name: "matchExpressions DoesNotExist miss",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "frozen", Operator: metav1.LabelSelectorOpDoesNotExist},
				},
			}))},
			req:  request(func(r *Request) { r.NamespaceLabels["frozen"] = "" }),
			want: noRuleApplies,
		},
		{
			name: "matchLabels and matchExpressions are ANDed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchLabels: map[string]string{"tenant": "true"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"net"}},
				},
			}))},
			req:  request(nil),
			want: noRuleApplies,
		},
		{
			name: "implicit metadata.name label selects a namespace by name",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team-a"},
			}))},
			req:  request(func(r *Request) { r.NamespaceLabels = nil }),
			want: permitted,
		},
		{
			name: "implicit metadata.name label of another namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team-a"},
			}))},
			req:  request(func(r *Request) { r.Namespace = "team-b" }),
			want: Decision{Message: "no AddonPolicy rule allows CoreDNS in namespace team-b"},
		},
		{
			name: "an existing metadata.name label is kept",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}},
				},
			}))},
			req:  request(func(r *Request) { r.NamespaceLabels = map[string]string{"kubernetes.io/metadata.name": "team-a"} }),
			want: permitted,
		},
		{
			name:     "empty selector selects every namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", selecting(&metav1.LabelSelector{}))},
			req:      request(func(r *Request) { r.Namespace, r.NamespaceLabels = "kube-system", nil }),
			want: Decision{
				Permitted: true,
				Rule:      teamDNSRule,
				Message:   "AddonPolicy kaddons-system/tenants rules[0] (team-dns) allows CoreDNS in namespace kube-system",
			},
		},

		// Kinds.
		{
			name: "kinds without the add-on's kind",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Kinds = []string{"MetricsServer", "Dashboard"} }))},
			req:  request(nil),
			want: noRuleApplies,
		},
		{
			name: "kinds with the add-on's kind among others",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Kinds = []string{"MetricsServer", "CoreDNS"} }))},
			req:  request(nil),
			want: permitted,
		},
		{
			name: "kinds match exactly, not case-insensitively",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Kinds = []string{"Coredns"} }))},
			req:  request(nil),
			want: noRuleApplies,
		},
		{
			name: "empty kinds apply to every kind",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Kinds = nil; r.Versions = "" }))},
			req: request(func(r *Request) { r.Kind, r.Version = "NodeLocalDNS", "1.25.0" }),
			want: Decision{
				Permitted: true,
				Rule:      teamDNSRule,
				Message:   "AddonPolicy kaddons-system/tenants rules[0] (team-dns) allows NodeLocalDNS in namespace team-a",
			},
		},

		// Channels.
		{
			name: "channel among several allowed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Channels = []string{"regular", "stable"} }))},
			req:  request(nil),
			want: permitted,
		},
		{
			name:     "channel denied",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Channel = "rapid" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "channel rapid (allowed: stable)"},
		},
		{
			name: "channel denied lists every allowed channel",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Channels = []string{"stable", "regular"} }))},
			req:  request(func(r *Request) { r.Channel = "rapid" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "channel rapid (allowed: stable, regular)"},
		},
		{
			name:     "pinned version without a channel when channels are listed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Channel = "" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.version without spec.channel (allowed channels: stable)"},
		},
		{
			name: "any channel when channels are empty",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Channels = nil }))},
			req:  request(func(r *Request) { r.Channel = "" }),
			want: permitted,
		},

		{
			name:     "a pinned version with spec.channel set is judged without a channel, on the version it resolves to",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			// The engine passes no channel when spec.version is set, whatever spec.channel says.
			req: request(func(r *Request) { r.Channel, r.Version = "", "1.14.0" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"spec.version without spec.channel (allowed channels: stable) or version 1.14.0 (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name: "a pinned version outside a versions-only rule",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Channels = nil }))},
			req:  request(func(r *Request) { r.Channel, r.Version = "", "1.10.1" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version 1.10.1 (allowed: >=1.11.0, <1.13.0)"},
		},

		// Versions.
		{
			name:     "version in range",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "1.11.0" }),
			want:     permitted,
		},
		{
			name: "version above range",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = ">=1.11.0, <1.12.0" }))},
			req:  request(nil),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version 1.12.1 (allowed: >=1.11.0, <1.12.0)"},
		},
		{
			name:     "version below range",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "1.10.1" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version 1.10.1 (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name:     "upper bound is exclusive",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "1.13.0" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version 1.13.0 (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name:     "v prefix in range",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "v1.12.1" }),
			want:     permitted,
		},
		{
			name:     "v prefix out of range is reported as written",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "v1.13.2" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version v1.13.2 (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name: "v prefix in the constraint",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = "~v1.12" }))},
			req:  request(nil),
			want: permitted,
		},
		{
			name: "or constraint",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = "1.10.1 || >=1.12.0" }))},
			req:  request(nil),
			want: permitted,
		},
		{
			name:     "pre-release outside a constraint without pre-release",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "1.12.0-rc.1" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "version 1.12.0-rc.1 (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name:     "invalid version",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "latest" }),
			want: Decision{
				Rule:    teamDNSRule,
				Message: deniedByTeamDNS + "version latest, which is not a semantic version (allowed: >=1.11.0, <1.13.0)",
			},
		},
		{
			name:     "unknown version",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version = "" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "an unknown version (allowed: >=1.11.0, <1.13.0)"},
		},
		{
			name: "any version, even an invalid one, when versions is empty",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = "" }))},
			req:  request(func(r *Request) { r.Version = "latest" }),
			want: permitted,
		},

		// Patches.
		{
			name:     "patches denied",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.HasPatches = true }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.patches"},
		},
		{
			name: "patches allowed explicitly",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.AllowPatches = ptr.To(true) }))},
			req:  request(func(r *Request) { r.HasPatches = true }),
			want: permitted,
		},
		{
			name: "patches allowed when allowPatches is unset",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.AllowPatches = nil }))},
			req:  request(func(r *Request) { r.HasPatches = true }),
			want: permitted,
		},
		{
			name:     "every violation of the rule is named",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Channel, r.Version, r.HasPatches = "rapid", "1.14.0", true }),
			want: Decision{
				Rule:    teamDNSRule,
				Message: deniedByTeamDNS + "channel rapid (allowed: stable), version 1.14.0 (allowed: >=1.11.0, <1.13.0) or spec.patches",
			},
		},
		{
			name:     "two violations",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Version, r.HasPatches = "1.14.0", true }),
			want: Decision{
				Rule:    teamDNSRule,
				Message: deniedByTeamDNS + "version 1.14.0 (allowed: >=1.11.0, <1.13.0) or spec.patches",
			},
		},

		{
			name:     "patches on an allowed kind",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req:      request(func(r *Request) { r.HasPatches, r.PatchKinds = true, []string{"Deployment", "ConfigMap", "Deployment"} }),
			want:     permitted,
		},
		{
			name:     "patches on a kind outside patchKinds",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req: request(func(r *Request) {
				r.HasPatches, r.PatchKinds = true, []string{"Deployment", "ClusterRoleBinding", "ClusterRole", "ClusterRoleBinding"}
			}),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"spec.patches on ClusterRoleBinding, ClusterRole (allowed kinds: Deployment, ConfigMap)"},
		},
		{
			name:     "patchKinds match exactly, not case-insensitively",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req:      request(func(r *Request) { r.HasPatches, r.PatchKinds = true, []string{"deployment"} }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.patches on deployment (allowed kinds: Deployment, ConfigMap)"},
		},
		{
			name:     "a patch whose kind cannot be read is outside patchKinds",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req:      request(func(r *Request) { r.HasPatches, r.PatchKinds = true, []string{""} }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"spec.patches on an object of unknown kind (allowed kinds: Deployment, ConfigMap)"},
		},
		{
			name: "patchKinds do not permit patches that allowPatches forbids",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.PatchKinds = []string{"Deployment"} }))},
			req:  request(func(r *Request) { r.HasPatches, r.PatchKinds = true, []string{"Deployment"} }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.patches"},
		},
		{
			name:     "patchKinds do not matter without patches",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req:      request(nil),
			want:     permitted,
		},

		// Target namespaces.
		{
			name:     "the add-on's own namespace as target",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.TargetNamespace = "team-a" }),
			want:     permitted,
		},
		{
			name:     "another target namespace without targetNamespaces",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.TargetNamespace = "kube-system" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"target namespace kube-system (allowed: only the add-on's own namespace, team-a)"},
		},
		{
			name: "a listed target namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"team-a-dns", "team-a-edge"} }))},
			req:  request(func(r *Request) { r.TargetNamespace = "team-a-edge" }),
			want: permitted,
		},
		{
			name: "the own namespace stays allowed when targetNamespaces lists others",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"team-a-dns"} }))},
			req:  request(nil),
			want: permitted,
		},
		{
			name: "a target namespace outside the list",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"team-a-dns", "team-a-edge"} }))},
			req: request(func(r *Request) { r.TargetNamespace = "kube-system" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"target namespace kube-system (allowed: team-a-dns, team-a-edge and the add-on's own namespace, team-a)"},
		},
		{
			name: "* allows every target namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"*"} }))},
			req:  request(func(r *Request) { r.TargetNamespace = "kube-system" }),
			want: permitted,
		},
		{
			name:     "a rendered object pinned to another namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.ObjectNamespaces = []string{"kube-system", "team-a"} }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"objects in namespace kube-system (allowed: only the add-on's own namespace, team-a)"},
		},
		{
			name: "a target namespace and rendered objects outside the list",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"team-a-dns"} }))},
			req: request(func(r *Request) {
				r.TargetNamespace, r.ObjectNamespaces = "team-a-edge", []string{"kube-system", "team-a-dns", "team-a-edge"}
			}),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"target namespace team-a-edge and objects in namespace kube-system (allowed: team-a-dns and the add-on's own namespace, team-a)"},
		},
		{
			name: "rendered objects in listed namespaces",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"team-a-dns"} }))},
			req:  request(func(r *Request) { r.ObjectNamespaces = []string{"team-a", "team-a-dns"} }),
			want: permitted,
		},
		{
			name: "* allows rendered objects in every namespace",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{"*"} }))},
			req:  request(func(r *Request) { r.ObjectNamespaces = []string{"kube-system"} }),
			want: permitted,
		},

		// Free-form fields.
		{
			name:     "a free-form field without freeFormFields",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile"} }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.corefile (allowed free-form fields: none)"},
		},
		{
			name: "a free-form field without freeFormFields, patches allowed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.AllowPatches = nil }))},
			req:  request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile"} }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "spec.corefile (allowed free-form fields: none)"},
		},
		{
			name: "a listed free-form field",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.FreeFormFields = []string{"spec.corefile"} }))},
			req:  request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile"} }),
			want: permitted,
		},
		{
			name: "free-form fields outside the list",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.FreeFormFields = []string{"spec.corefile"} }))},
			req: request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile", "spec.config", "spec.values"} }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"spec.config, spec.values (allowed free-form fields: spec.corefile)"},
		},
		{
			name: "* allows every free-form field",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.FreeFormFields = []string{"*"} }))},
			req:  request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile", "spec.config"} }),
			want: permitted,
		},

		// Sources.
		{
			name:     "the built-in packages are always allowed",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Source = "" }),
			want:     permitted,
		},
		{
			name:     "an AddonSource without sources",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", teamDNS)},
			req:      request(func(r *Request) { r.Source = "platform" }),
			want:     Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "AddonSource platform (allowed: only the built-in packages)"},
		},
		{
			name: "a listed AddonSource",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Sources = []string{"mirror", "platform"} }))},
			req:  request(func(r *Request) { r.Source = "platform" }),
			want: permitted,
		},
		{
			name: "an AddonSource outside the list",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Sources = []string{"platform"} }))},
			req: request(func(r *Request) { r.Source = "someone-elses" }),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS +
				"AddonSource someone-elses (allowed: platform and the built-in packages)"},
		},
		{
			name: "* allows every AddonSource",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Sources = []string{"*"} }))},
			req:  request(func(r *Request) { r.Source = "anything" }),
			want: permitted,
		},
		{
			name:     "every input at once",
			policies: []configv1alpha1.AddonPolicy{policy("tenants", deploymentPatches)},
			req: request(func(r *Request) {
				r.Channel, r.Version, r.TargetNamespace, r.HasPatches, r.PatchKinds, r.FreeFormFields =
					"rapid", "1.14.0", "kube-system", true, []string{"Secret"}, []string{"spec.corefile"}
			}),
			want: Decision{Rule: teamDNSRule, Message: deniedByTeamDNS + "channel rapid (allowed: stable), " +
				"version 1.14.0 (allowed: >=1.11.0, <1.13.0), " +
				"target namespace kube-system (allowed: only the add-on's own namespace, team-a), " +
				"spec.patches on Secret (allowed kinds: Deployment, ConfigMap) or " +
				"spec.corefile (allowed free-form fields: none)"},
		},

		// Several rules and policies.
		{
			name: "a later rule permits",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				teamDNS,
				configv1alpha1.AddonPolicyRule{
					Name:              "team-dns-next",
					NamespaceSelector: tenants(),
					Kinds:             []string{"CoreDNS"},
					Versions:          ">=1.13.0",
				},
			)},
			req: request(func(r *Request) { r.Version = "1.13.1" }),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[1] (team-dns-next)",
				Message:   "AddonPolicy kaddons-system/tenants rules[1] (team-dns-next) allows CoreDNS in namespace team-a",
			},
		},
		{
			name: "the first applying rule is named when all deny",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name, r.Kinds = "metrics", []string{"MetricsServer"} }),
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name = "" }),
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name, r.Channels = "rapid", []string{"rapid"} }),
			)},
			req: request(func(r *Request) { r.Version = "1.14.0" }),
			want: Decision{
				Rule:    "kaddons-system/tenants rules[1]",
				Message: "AddonPolicy kaddons-system/tenants rules[1] does not allow version 1.14.0 (allowed: >=1.11.0, <1.13.0)",
			},
		},
		{
			name: "a rule of another policy permits",
			policies: []configv1alpha1.AddonPolicy{
				policy("tenants", teamDNS),
				policy("platform", configv1alpha1.AddonPolicyRule{Name: "everything", NamespaceSelector: &metav1.LabelSelector{}}),
			},
			req: request(func(r *Request) { r.Channel = "rapid" }),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/platform rules[0] (everything)",
				Message:   "AddonPolicy kaddons-system/platform rules[0] (everything) allows CoreDNS in namespace team-a",
			},
		},
		{
			name: "policies are visited in name order, not list order",
			policies: []configv1alpha1.AddonPolicy{
				policy("zeta", teamDNS),
				policy("alpha", withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name = "alpha-dns" })),
			},
			req: request(func(r *Request) { r.HasPatches = true }),
			want: Decision{
				Rule:    "kaddons-system/alpha rules[0] (alpha-dns)",
				Message: "AddonPolicy kaddons-system/alpha rules[0] (alpha-dns) does not allow spec.patches",
			},
		},
		{
			name: "policies are sorted by namespace before name",
			policies: []configv1alpha1.AddonPolicy{
				policy("alpha", teamDNS),
				func() configv1alpha1.AddonPolicy {
					p := policy("zeta", withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name = "" }))
					p.Namespace = "a-first"
					return p
				}(),
			},
			req:  request(func(r *Request) { r.Channel = "rapid" }),
			want: Decision{Rule: "a-first/zeta rules[0]", Message: "AddonPolicy a-first/zeta rules[0] does not allow channel rapid (allowed: stable)"},
		},
		{
			name: "a policy for other namespaces leaves the add-on without an applying rule",
			policies: []configv1alpha1.AddonPolicy{
				policy("tenants", teamDNS),
				policy("system", configv1alpha1.AddonPolicyRule{NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"},
				}}),
			},
			req:  request(func(r *Request) { r.Namespace, r.NamespaceLabels = "team-b", nil }),
			want: Decision{Message: "no AddonPolicy rule allows CoreDNS in namespace team-b"},
		},

		// Invalid rules.
		{
			name: "an applying rule with an invalid constraint denies and says why",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = ">=1.x.y" }))},
			req: request(nil),
			want: Decision{
				Rule: teamDNSRule,
				Message: "AddonPolicy kaddons-system/tenants rules[0] (team-dns) is invalid: " +
					`versions: Invalid value: ">=1.x.y": not a semantic version constraint: improper constraint: ">=1.x.y"`,
			},
		},
		{
			name: "a later valid rule permits despite an invalid one",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = ">=1.x.y" }),
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name = "fixed" }),
			)},
			req: request(nil),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[1] (fixed)",
				Message:   "AddonPolicy kaddons-system/tenants rules[1] (fixed) allows CoreDNS in namespace team-a",
			},
		},
		{
			name: "an invalid selector applies nowhere but is named when no rule applies",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) {
					r.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tenant", Operator: "Among", Values: []string{"true"}},
					}}
				}))},
			req: request(nil),
			want: Decision{Message: noRule + "; AddonPolicy kaddons-system/tenants rules[0] (team-dns) is invalid: " +
				`namespaceSelector.matchExpressions[0].operator: Invalid value: "Among": not a valid selector operator`},
		},
		{
			name: "a missing selector is invalid",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.NamespaceSelector = nil }))},
			req: request(nil),
			want: Decision{Message: noRule + "; AddonPolicy kaddons-system/tenants rules[0] (team-dns) is invalid: " +
				"namespaceSelector: Required value: use {} to select every namespace"},
		},
		{
			name: "an applying rule's denial is reported before an invalid selector",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.NamespaceSelector = nil }),
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Name = "" }),
			)},
			req:  request(func(r *Request) { r.Channel = "rapid" }),
			want: Decision{Rule: "kaddons-system/tenants rules[1]", Message: "AddonPolicy kaddons-system/tenants rules[1] does not allow channel rapid (allowed: stable)"},
		},
		{
			name: "an invalid rule for another kind is not named",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.NamespaceSelector, r.Kinds = nil, []string{"Dashboard"} }))},
			req:  request(nil),
			want: noRuleApplies,
		},
		{
			name: "an invalid constraint in a rule for other namespaces is not named",
			policies: []configv1alpha1.AddonPolicy{policy("tenants",
				withRule(func(r *configv1alpha1.AddonPolicyRule) { r.Versions = "nonsense" }))},
			req:  request(func(r *Request) { r.NamespaceLabels = nil }),
			want: noRuleApplies,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Evaluate(tt.policies, tt.req)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Evaluate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateKeepsTheCallersOrder(t *testing.T) {
	policies := []configv1alpha1.AddonPolicy{
		policy("zeta", configv1alpha1.AddonPolicyRule{NamespaceSelector: tenants()}),
		policy("alpha", configv1alpha1.AddonPolicyRule{NamespaceSelector: tenants()}),
	}
	got := Evaluate(policies, request(nil))
	if got.Rule != "kaddons-system/alpha rules[0]" {
		t.Errorf("Evaluate().Rule = %q, want the rule of alpha", got.Rule)
	}
	if policies[0].Name != "zeta" || policies[1].Name != "alpha" {
		t.Errorf("Evaluate reordered its argument: %s, %s", policies[0].Name, policies[1].Name)
	}
}

// TestDocumentedExample checks the example of docs/configuration.md.
func TestDocumentedExample(t *testing.T) {
	policies := []configv1alpha1.AddonPolicy{policy("tenants",
		configv1alpha1.AddonPolicyRule{
			Name:              "tenant-dns",
			NamespaceSelector: tenants(),
			Kinds:             []string{"CoreDNS"},
			Channels:          []string{"stable"},
			Versions:          ">=1.11.0, <1.13.0",
			AllowPatches:      ptr.To(false),
		},
		configv1alpha1.AddonPolicyRule{
			Name: "platform",
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-system", "kaddons-system"},
			}}},
			AllowPatches:     ptr.To(true), // the schema's default
			TargetNamespaces: []string{"*"},
			FreeFormFields:   []string{"*"},
		},
	)}
	tests := []struct {
		name string
		req  Request
		want Decision
	}{
		{
			name: "tenant CoreDNS on stable",
			req:  request(nil),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[0] (tenant-dns)",
				Message:   "AddonPolicy kaddons-system/tenants rules[0] (tenant-dns) allows CoreDNS in namespace team-a",
			},
		},
		{
			name: "tenant CoreDNS on rapid",
			req:  request(func(r *Request) { r.Channel = "rapid" }),
			want: Decision{
				Rule:    "kaddons-system/tenants rules[0] (tenant-dns)",
				Message: "AddonPolicy kaddons-system/tenants rules[0] (tenant-dns) does not allow channel rapid (allowed: stable)",
			},
		},
		{
			name: "tenant CoreDNS at 1.13.1",
			req:  request(func(r *Request) { r.Version = "1.13.1" }),
			want: Decision{
				Rule:    "kaddons-system/tenants rules[0] (tenant-dns)",
				Message: "AddonPolicy kaddons-system/tenants rules[0] (tenant-dns) does not allow version 1.13.1 (allowed: >=1.11.0, <1.13.0)",
			},
		},
		{
			name: "tenant CoreDNS with a Corefile",
			req:  request(func(r *Request) { r.FreeFormFields = []string{"spec.corefile"} }),
			want: Decision{
				Rule:    "kaddons-system/tenants rules[0] (tenant-dns)",
				Message: "AddonPolicy kaddons-system/tenants rules[0] (tenant-dns) does not allow spec.corefile (allowed free-form fields: none)",
			},
		},
		{
			name: "tenant CoreDNS into kube-system",
			req:  request(func(r *Request) { r.TargetNamespace = "kube-system" }),
			want: Decision{
				Rule: "kaddons-system/tenants rules[0] (tenant-dns)",
				Message: "AddonPolicy kaddons-system/tenants rules[0] (tenant-dns) does not allow target namespace kube-system " +
					"(allowed: only the add-on's own namespace, team-a)",
			},
		},
		{
			name: "a Dashboard in kube-system installs into kubernetes-dashboard",
			req: request(func(r *Request) {
				r.Namespace, r.NamespaceLabels, r.Trusted, r.Kind, r.Version, r.TargetNamespace = "kube-system", nil, true, "Dashboard", "2.7.0", "kubernetes-dashboard"
			}),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[1] (platform)",
				Message:   "AddonPolicy kaddons-system/tenants rules[1] (platform) allows Dashboard in namespace kube-system",
			},
		},
		{
			name: "a CoreDNS in kube-system with a Corefile",
			req: request(func(r *Request) {
				r.Namespace, r.NamespaceLabels, r.Trusted, r.FreeFormFields, r.HasPatches, r.PatchKinds =
					"kube-system", nil, true, []string{"spec.corefile"}, true, []string{"Deployment"}
			}),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[1] (platform)",
				Message:   "AddonPolicy kaddons-system/tenants rules[1] (platform) allows CoreDNS in namespace kube-system",
			},
		},
		{
			name: "tenant MetricsServer",
			req:  request(func(r *Request) { r.Kind = "MetricsServer" }),
			want: Decision{Message: "no AddonPolicy rule allows MetricsServer in namespace team-a"},
		},
		{
			name: "kube-system keeps everything",
			req: request(func(r *Request) {
				r.Namespace, r.NamespaceLabels, r.Kind, r.Channel, r.HasPatches = "kube-system", nil, "NodeLocalDNS", "rapid", true
			}),
			want: Decision{
				Permitted: true,
				Rule:      "kaddons-system/tenants rules[1] (platform)",
				Message:   "AddonPolicy kaddons-system/tenants rules[1] (platform) allows NodeLocalDNS in namespace kube-system",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Evaluate(policies, tt.req)); diff != "" {
				t.Errorf("Evaluate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
