// Package policy decides whether the AddonPolicies of a cluster permit an add-on: which
// namespaces may run which add-on kinds, from which channels, at which versions, into
// which target namespaces, and with which patches and free-form fields. It is pure: the
// caller lists the policies and reads the namespace, and reports the Decision on the
// add-on.
package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

// Request describes the add-on that asks to be applied.
type Request struct {
	// Namespace is the add-on's namespace.
	Namespace string
	// NamespaceLabels are the labels of the add-on's namespace. The label
	// kubernetes.io/metadata.name=<Namespace> is added when it is missing, as the API
	// server does for every namespace.
	NamespaceLabels map[string]string
	// Trusted is true when the operator trusts the add-on's namespace. With no AddonPolicy
	// at all, only the add-ons of trusted namespaces are permitted.
	Trusted bool
	// PolicyNamespace is the namespace whose AddonPolicies count (the operator's own). It
	// is named in the message that says how to permit a refused add-on.
	PolicyNamespace string
	// Kind is the add-on's kind, such as CoreDNS.
	Kind string
	// Channel is the channel the add-on's version comes from: spec.channel, or the
	// operator's default channel when the add-on sets neither spec.version nor
	// spec.channel. It is empty when the add-on sets spec.version, with or without
	// spec.channel.
	Channel string
	// Version is the package version the add-on resolves to, such as 1.12.1 or v1.12.1:
	// the version that will be applied, a rolled-back one included.
	Version string
	// TargetNamespace is the namespace the add-on's namespaced objects go to. Empty means
	// Namespace.
	TargetNamespace string
	// ObjectNamespaces are the namespaces the add-on's rendered objects write to: the
	// namespace of each namespaced object and the name of each Namespace object, after
	// every transform and patch. Empty before the package is rendered. A package may pin
	// an object to a namespace of its own, so the target namespace alone does not say
	// where an add-on writes.
	ObjectNamespaces []string
	// HasPatches is true when the add-on sets spec.patches.
	HasPatches bool
	// PatchKinds are the kinds of the objects spec.patches target, one per patch; "" for a
	// patch whose kind cannot be read.
	PatchKinds []string
	// FreeFormFields are the paths of the free-form fields the add-on sets besides
	// spec.patches, such as spec.corefile.
	FreeFormFields []string
	// Source is the AddonSource the add-on names in spec.sourceRef; empty for the packages
	// built into the operator.
	Source string
}

// Any in a rule's targetNamespaces, freeFormFields or sources allows every value.
const Any = "*"

// Decision is the outcome of Evaluate.
type Decision struct {
	// Permitted is true when the add-on may be applied.
	Permitted bool
	// Rule names the rule that decided, such as "kaddons-system/tenants rules[1] (team-dns)":
	// the rule that permits the add-on, or the first rule that applies to it and denies it.
	// It is empty when no AddonPolicy exists or no rule applies.
	Rule string
	// Message says why, in words fit for a condition message.
	Message string
}

// Evaluate decides whether policies permit the add-on that req describes. The caller passes
// only the policies of the operator's own namespace.
//
// With no policy at all, the add-ons of trusted namespaces are permitted and all others
// refused, with a message that says how to permit them. Otherwise a rule applies to the
// add-on when its namespaceSelector matches the namespace's labels and its kinds include
// req.Kind (or are empty). The add-on is permitted when an applying rule allows its
// channel, its version, its target namespace, its patches and its free-form fields.
// Policies are visited in namespace/name order and their rules in order; when no applying
// rule allows the add-on, the message names the first applying rule and what the add-on
// breaks. A rule with an invalid selector or constraint never permits anything.
func Evaluate(policies []configv1alpha1.AddonPolicy, req Request) Decision {
	if len(policies) == 0 {
		if req.Trusted {
			return Decision{Permitted: true, Message: fmt.Sprintf("no AddonPolicy: namespace %s is trusted", req.Namespace)}
		}
		return Decision{Message: fmt.Sprintf("no AddonPolicy permits add-ons in namespace %s, which the operator does not trust: "+
			"to permit them, create an AddonPolicy in namespace %s whose namespaceSelector selects namespace %s "+
			"(kubernetes.io/metadata.name: %s)", req.Namespace, req.PolicyNamespace, req.Namespace, req.Namespace)}
	}
	nsLabels := namespaceLabels(req)

	var denial *Decision
	var invalidSelector string
	for _, p := range sorted(policies) {
		for i := range p.Spec.Rules {
			spec := &p.Spec.Rules[i]
			if !containsOrEmpty(spec.Kinds, req.Kind) {
				continue
			}
			r := compileRule(spec)
			id := ruleID(p, i, spec.Name)
			if r.selector == nil {
				// The rule might have been meant for this namespace; say so if nothing else applies.
				if invalidSelector == "" {
					invalidSelector = fmt.Sprintf("AddonPolicy %s is invalid: %s", id, joinErrors(r.errs))
				}
				continue
			}
			if !r.selector.Matches(nsLabels) {
				continue
			}
			d := r.decide(id, req)
			if d.Permitted {
				return d
			}
			if denial == nil {
				denial = &d
			}
		}
	}
	if denial != nil {
		return *denial
	}
	msg := fmt.Sprintf("no AddonPolicy rule allows %s in namespace %s", req.Kind, req.Namespace)
	if invalidSelector != "" {
		msg += "; " + invalidSelector
	}
	return Decision{Message: msg}
}

// decide returns what a rule that applies to the add-on says about it.
func (r *rule) decide(id string, req Request) Decision {
	if len(r.errs) > 0 {
		return Decision{Rule: id, Message: fmt.Sprintf("AddonPolicy %s is invalid: %s", id, joinErrors(r.errs))}
	}
	if broken := r.violations(req); len(broken) > 0 {
		return Decision{Rule: id, Message: fmt.Sprintf("AddonPolicy %s does not allow %s", id, joinOr(broken))}
	}
	return Decision{
		Permitted: true,
		Rule:      id,
		Message:   fmt.Sprintf("AddonPolicy %s allows %s in namespace %s", id, req.Kind, req.Namespace),
	}
}

// violations lists what the add-on asks for that the rule does not allow, as noun phrases.
func (r *rule) violations(req Request) []string {
	var broken []string
	if allowed := r.spec.Channels; len(allowed) > 0 && !slices.Contains(allowed, req.Channel) {
		if req.Channel == "" {
			broken = append(broken, fmt.Sprintf("spec.version without spec.channel (allowed channels: %s)", strings.Join(allowed, ", ")))
		} else {
			broken = append(broken, fmt.Sprintf("channel %s (allowed: %s)", req.Channel, strings.Join(allowed, ", ")))
		}
	}
	if r.constraint != nil {
		if v := versionViolation(r.constraint, r.spec.Versions, req.Version); v != "" {
			broken = append(broken, v)
		}
	}
	if v := targetViolation(r.spec.TargetNamespaces, req); v != "" {
		broken = append(broken, v)
	}
	if req.HasPatches {
		if v := patchViolation(r.spec, req.PatchKinds); v != "" {
			broken = append(broken, v)
		}
	}
	if v := freeFormViolation(r.spec.FreeFormFields, req.FreeFormFields); v != "" {
		broken = append(broken, v)
	}
	if v := sourceViolation(r.spec.Sources, req.Source); v != "" {
		broken = append(broken, v)
	}
	return broken
}

// sourceViolation returns why the rule's sources do not allow the AddonSource the add-on
// names, or "" when they do. The built-in packages (no source) are always allowed.
func sourceViolation(allowed []string, source string) string {
	if source == "" || slices.Contains(allowed, Any) || slices.Contains(allowed, source) {
		return ""
	}
	if len(allowed) == 0 {
		return fmt.Sprintf("AddonSource %s (allowed: only the built-in packages)", source)
	}
	return fmt.Sprintf("AddonSource %s (allowed: %s and the built-in packages)", source, strings.Join(allowed, ", "))
}

// targetViolation returns why the rule's targetNamespaces do not allow the add-on's target
// namespace or a namespace its rendered objects write to, or "" when they do. The add-on's
// own namespace is always allowed.
func targetViolation(allowed []string, req Request) string {
	if slices.Contains(allowed, Any) {
		return ""
	}
	target := cmp.Or(req.TargetNamespace, req.Namespace)
	var refused []string
	for _, ns := range append([]string{target}, req.ObjectNamespaces...) {
		if ns != req.Namespace && !slices.Contains(allowed, ns) && !slices.Contains(refused, ns) {
			refused = append(refused, ns)
		}
	}
	if len(refused) == 0 {
		return ""
	}
	what := "target namespace " + refused[0]
	if refused[0] != target {
		what = "objects in namespace " + strings.Join(refused, ", ")
	} else if len(refused) > 1 {
		what += " and objects in namespace " + strings.Join(refused[1:], ", ")
	}
	if len(allowed) == 0 {
		return fmt.Sprintf("%s (allowed: only the add-on's own namespace, %s)", what, req.Namespace)
	}
	return fmt.Sprintf("%s (allowed: %s and the add-on's own namespace, %s)", what, strings.Join(allowed, ", "), req.Namespace)
}

// patchViolation returns why the rule does not allow the add-on's spec.patches, or "" when
// it does.
func patchViolation(spec *configv1alpha1.AddonPolicyRule, kinds []string) string {
	if spec.AllowPatches != nil && !*spec.AllowPatches {
		return "spec.patches"
	}
	if len(spec.PatchKinds) == 0 {
		return ""
	}
	var refused []string
	for _, kind := range kinds {
		if kind == "" {
			kind = "an object of unknown kind"
		}
		if !slices.Contains(spec.PatchKinds, kind) && !slices.Contains(refused, kind) {
			refused = append(refused, kind)
		}
	}
	if len(refused) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.patches on %s (allowed kinds: %s)", strings.Join(refused, ", "), strings.Join(spec.PatchKinds, ", "))
}

// freeFormViolation returns why the rule's freeFormFields do not allow the free-form fields
// the add-on sets, or "" when they do.
func freeFormViolation(allowed, set []string) string {
	if slices.Contains(allowed, Any) {
		return ""
	}
	var refused []string
	for _, f := range set {
		if !slices.Contains(allowed, f) && !slices.Contains(refused, f) {
			refused = append(refused, f)
		}
	}
	if len(refused) == 0 {
		return ""
	}
	permitted := "none"
	if len(allowed) > 0 {
		permitted = strings.Join(allowed, ", ")
	}
	return fmt.Sprintf("%s (allowed free-form fields: %s)", strings.Join(refused, ", "), permitted)
}

// versionViolation returns why version does not satisfy the constraint, or "" when it does.
func versionViolation(c *semver.Constraints, constraint, version string) string {
	if version == "" {
		return fmt.Sprintf("an unknown version (allowed: %s)", constraint)
	}
	v, err := semver.NewVersion(version)
	if err != nil {
		return fmt.Sprintf("version %s, which is not a semantic version (allowed: %s)", version, constraint)
	}
	if !c.Check(v) {
		return fmt.Sprintf("version %s (allowed: %s)", version, constraint)
	}
	return ""
}

// namespaceLabels returns the namespace's labels with the name label the API server sets.
func namespaceLabels(req Request) labels.Set {
	set := make(labels.Set, len(req.NamespaceLabels)+1)
	for k, v := range req.NamespaceLabels {
		set[k] = v
	}
	if _, ok := set[corev1.LabelMetadataName]; !ok {
		set[corev1.LabelMetadataName] = req.Namespace
	}
	return set
}

// sorted returns the policies in namespace/name order without reordering the caller's slice,
// so the rule a message names does not depend on the order of a list call.
func sorted(policies []configv1alpha1.AddonPolicy) []*configv1alpha1.AddonPolicy {
	out := make([]*configv1alpha1.AddonPolicy, len(policies))
	for i := range policies {
		out[i] = &policies[i]
	}
	slices.SortStableFunc(out, func(a, b *configv1alpha1.AddonPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// ruleID names rule i of p: "<namespace>/<name> rules[<i>]", followed by the rule's name in
// parentheses when it has one.
func ruleID(p *configv1alpha1.AddonPolicy, i int, name string) string {
	id := fmt.Sprintf("%s/%s rules[%d]", p.Namespace, p.Name, i)
	if name != "" {
		id += " (" + name + ")"
	}
	return id
}

// containsOrEmpty reports whether list is empty or contains s.
func containsOrEmpty(list []string, s string) bool {
	return len(list) == 0 || slices.Contains(list, s)
}

// joinOr joins phrases as "a", "a or b", "a, b or c".
func joinOr(phrases []string) string {
	if len(phrases) == 1 {
		return phrases[0]
	}
	return strings.Join(phrases[:len(phrases)-1], ", ") + " or " + phrases[len(phrases)-1]
}
