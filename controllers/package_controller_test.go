package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// TestPackageInstallsAChartWithValues installs the Helm chart package greeter-chart
// (testdata/channels) with the generic Package kind: the release is the Package's name,
// in its namespace, and spec.values reach the chart. Values its values.schema.json
// refuses are Stalled with ValuesInvalid, naming the field, and change nothing; a
// version that renders a kind a Package may not hold is refused, naming the kind.
func TestPackageInstallsAChartWithValues(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	p := &addonsv1alpha1.Package{
		ObjectMeta: metav1.ObjectMeta{Name: "hi", Namespace: ns},
		Spec: addonsv1alpha1.PackageSpec{Package: "greeter-chart", CommonSpec: addonv1alpha1.CommonSpec{Version: "1.0.0"},
			Values: &apiextensionsv1.JSON{Raw: []byte(`{"greeting": "bonjour"}`)}},
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	waitReason(t, p, addonsv1alpha1.ReasonReconciled)
	g.Expect(p.Status.AppliedVersion).To(Equal("1.0.0"))
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: ns, Name: "hi-greeting"}
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	g.Expect(cm.Data).To(Equal(map[string]string{"greeting": "bonjour", "namespace": ns}))
	g.Expect(cm.Labels).To(HaveKeyWithValue(ssa.LabelKind, "package"))

	// Values the chart's schema refuses: nothing is rendered or applied.
	updateAddon(t, p, func() { p.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(`{"greeting": "bonjour", "color": "blue"}`)} })
	stalled := waitCondition(t, p, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonValuesInvalid)
	g.Expect(stalled.Message).To(ContainSubstring("additional properties 'color' not allowed"))
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "bonjour"))

	// A NetworkPolicy is not among the kinds a Package holds.
	updateAddon(t, p, func() {
		p.Spec.Values = nil
		p.Spec.Version = "1.1.0"
	})
	stalled = waitCondition(t, p, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonRenderFailed)
	g.Expect(stalled.Message).To(ContainSubstring("contains NetworkPolicy hi-deny, a kind the Package controller does not manage"))
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "bonjour"), "a refused version changed the ConfigMap")
}

// TestPackageValidation checks what the API server refuses of a Package: no package, a
// package name that is not a DNS label, values that are not an object, and a change of
// spec.package.
func TestPackageValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct{ name, spec, want string }{
		{"no package", `{"version": "1.0.0"}`, `spec.package: Required value`},
		{"a package that is not a DNS label", `{"package": "../coredns"}`, `spec.package: Invalid value`},
		{"values that are not an object", `{"package": "coredns", "values": [1, 2]}`, `spec.values: Invalid value: "array"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := createInvalid(ctx, "Package", ns, tc.spec)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	t.Run("the package is immutable", func(t *testing.T) {
		g := NewWithT(t)
		p := &addonsv1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: ns},
			Spec: addonsv1alpha1.PackageSpec{Package: "coredns", AddonSpec: addonsv1alpha1.AddonSpec{Suspend: true}}}
		g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
		// A merge patch, which no write of the operator's (its finalizer) can conflict with.
		patch := []byte(`{"spec": {"package": "metrics-server"}}`)
		g.Expect(k8sClient.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch))).
			To(MatchError(ContainSubstring("package is immutable")))
	})
}
