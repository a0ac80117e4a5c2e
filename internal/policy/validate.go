package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

// Validate returns an error that lists every rule of p whose namespaceSelector or versions
// cannot be parsed, each by its field path (spec.rules[1].versions), or nil when every rule
// is valid. The error is a utilerrors.Aggregate of *field.Error. The CRD schema checks the
// rest; these two cannot be checked there. The caller reports the error in the policy's
// Ready condition with reason InvalidRule.
func Validate(p *configv1alpha1.AddonPolicy) error {
	var errs field.ErrorList
	rules := field.NewPath("spec", "rules")
	for i := range p.Spec.Rules {
		prefix := rules.Index(i).String() + "."
		for _, e := range compileRule(&p.Spec.Rules[i]).errs {
			e.Field = prefix + e.Field
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs.ToAggregate()
}

// rule is an AddonPolicyRule with its selector and constraint parsed.
type rule struct {
	spec *configv1alpha1.AddonPolicyRule
	// selector is nil when the namespaceSelector is missing or invalid.
	selector labels.Selector
	// constraint is nil when versions is empty or invalid.
	constraint *semver.Constraints
	// errs lists what is invalid, with field paths relative to the rule.
	errs field.ErrorList
}

// compileRule parses the rule's namespaceSelector and versions.
func compileRule(spec *configv1alpha1.AddonPolicyRule) *rule {
	r := &rule{spec: spec}
	r.selector, r.errs = compileSelector(spec.NamespaceSelector, field.NewPath("namespaceSelector"))
	if spec.Versions != "" {
		c, err := semver.NewConstraint(spec.Versions)
		if err != nil {
			r.errs = append(r.errs, field.Invalid(field.NewPath("versions"), spec.Versions,
				fmt.Sprintf("not a semantic version constraint: %v", err)))
		} else {
			r.constraint = c
		}
	}
	return r
}

// compileSelector parses a namespace selector. It validates matchLabels in key order, so the
// errors, and the messages made of them, do not change from one call to the next.
func compileSelector(ls *metav1.LabelSelector, path *field.Path) (labels.Selector, field.ErrorList) {
	if ls == nil {
		return nil, field.ErrorList{field.Required(path, "use {} to select every namespace")}
	}
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(ls.MatchLabels)) {
		errs = append(errs, metav1validation.ValidateLabels(map[string]string{k: ls.MatchLabels[k]}, path.Child("matchLabels"))...)
	}
	exprs := &metav1.LabelSelector{MatchExpressions: ls.MatchExpressions}
	errs = append(errs, metav1validation.ValidateLabelSelector(exprs, metav1validation.LabelSelectorValidationOptions{}, path)...)
	if len(errs) > 0 {
		return nil, errs
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(path, ls, err.Error())}
	}
	return sel, nil
}

// joinErrors joins field errors with "; " for a one-line message.
func joinErrors(errs field.ErrorList) string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}
