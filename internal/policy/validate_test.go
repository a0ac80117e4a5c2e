package policy

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
)

func TestValidate(t *testing.T) {
	valid := configv1alpha1.AddonPolicyRule{NamespaceSelector: tenants(), Versions: ">=1.11.0, <1.13.0"}
	badOperator := configv1alpha1.AddonPolicyRule{NamespaceSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tenant", Operator: "Among", Values: []string{"true"}}},
	}}

	tests := []struct {
		name  string
		rules []configv1alpha1.AddonPolicyRule
		want  string // "" means valid
	}{
		{
			name:  "valid rules",
			rules: []configv1alpha1.AddonPolicyRule{valid, {NamespaceSelector: &metav1.LabelSelector{}}},
		},
		{
			name: "every constraint form",
			rules: []configv1alpha1.AddonPolicyRule{
				{NamespaceSelector: tenants(), Versions: "~1.12"},
				{NamespaceSelector: tenants(), Versions: "^v1.11.0"},
				{NamespaceSelector: tenants(), Versions: "1.10.1 || >=1.12.0"},
				{NamespaceSelector: tenants(), Versions: "1.11.0 - 1.12.3"},
				{NamespaceSelector: tenants(), Versions: "1.12.x"},
			},
		},
		{
			name:  "missing selector",
			rules: []configv1alpha1.AddonPolicyRule{valid, {}},
			want:  "spec.rules[1].namespaceSelector: Required value: use {} to select every namespace",
		},
		{
			name:  "unknown operator",
			rules: []configv1alpha1.AddonPolicyRule{badOperator},
			want:  `spec.rules[0].namespaceSelector.matchExpressions[0].operator: Invalid value: "Among": not a valid selector operator`,
		},
		{
			name: "In without values",
			rules: []configv1alpha1.AddonPolicyRule{{NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tenant", Operator: metav1.LabelSelectorOpIn}},
			}}},
			want: "spec.rules[0].namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
		},
		{
			name: "invalid label value",
			rules: []configv1alpha1.AddonPolicyRule{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"tenant": "yes please"},
			}}},
			want: `spec.rules[0].namespaceSelector.matchLabels: Invalid value: "yes please": a valid label must be an empty string or consist of ` +
				`alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		},
		{
			name: "invalid label keys are reported in key order",
			rules: []configv1alpha1.AddonPolicyRule{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"z/": "a", "-a": "b"},
			}}},
			want: `[spec.rules[0].namespaceSelector.matchLabels: Invalid value: "-a": name part must consist of alphanumeric characters, ` +
				`'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', ` +
				`regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), ` +
				`spec.rules[0].namespaceSelector.matchLabels: Invalid value: "z/": name part must be non-empty, ` +
				`spec.rules[0].namespaceSelector.matchLabels: Invalid value: "z/": name part must consist of alphanumeric characters, ` +
				`'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', ` +
				`regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')]`,
		},
		{
			name:  "invalid constraint",
			rules: []configv1alpha1.AddonPolicyRule{{NamespaceSelector: tenants(), Versions: "between 1.11 and 1.13"}},
			want: `spec.rules[0].versions: Invalid value: "between 1.11 and 1.13": ` +
				`not a semantic version constraint: improper constraint: "between 1.11 and 1.13"`,
		},
		{
			name: "every invalid rule is listed",
			rules: []configv1alpha1.AddonPolicyRule{
				{Name: "first", NamespaceSelector: tenants(), Versions: ">=1.x.y"},
				valid,
				{Name: "third", NamespaceSelector: badOperator.NamespaceSelector, Versions: "latest"},
			},
			want: `[spec.rules[0].versions: Invalid value: ">=1.x.y": not a semantic version constraint: improper constraint: ">=1.x.y", ` +
				`spec.rules[2].namespaceSelector.matchExpressions[0].operator: Invalid value: "Among": not a valid selector operator, ` +
				`spec.rules[2].versions: Invalid value: "latest": not a semantic version constraint: improper constraint: "latest"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy("tenants", tt.rules...)
			err := Validate(&p)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %s", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Validate() =\n%s\nwant\n%s", got, tt.want)
			}
			var agg utilerrors.Aggregate
			if !errors.As(err, &agg) {
				t.Errorf("Validate() returned %T, want a utilerrors.Aggregate", err)
			}
		})
	}
}
