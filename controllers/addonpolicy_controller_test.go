package controllers

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// labelledNamespace creates a namespace of its own for one test, with labels.
func labelledNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := newNamespace(t)
	obj := &corev1.Namespace{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: ns}, obj)).To(Succeed())
		for k, v := range labels {
			obj.Labels[k] = v
		}
		g.Expect(k8sClient.Update(context.Background(), obj)).To(Succeed())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	return ns
}

func TestAddonPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	operatorNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyNamespace}}
	if err := k8sClient.Create(ctx, operatorNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	policy := &configv1alpha1.AddonPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: policyNamespace, Name: "tenants"},
		Spec: configv1alpha1.AddonPolicySpec{Rules: []configv1alpha1.AddonPolicyRule{{
			Name:              "tenant-dns",
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "true"}},
			Kinds:             []string{"CoreDNS"},
			Versions:          ">=1.11.0, <1.12.0",
			AllowPatches:      ptr.To(false),
		}}},
	}
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() {
		_ = k8sClient.Delete(ctx, policy)
		// Later tests run without policies: wait until the manager's cache has none.
		NewWithT(t).Eventually(func(g Gomega) {
			list := &configv1alpha1.AddonPolicyList{}
			g.Expect(testMgr.GetClient().List(ctx, list, client.InNamespace(policyNamespace))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		g.Expect(policy.Status.Conditions).To(ContainElement(And(HaveField("Type", "Ready"), HaveField("Status", metav1.ConditionTrue))))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())

	tenant := labelledNamespace(t, map[string]string{"tenant": "true"})
	tenant2 := labelledNamespace(t, map[string]string{"tenant": "true"})
	other := newNamespace(t)

	allowed := newCoreDNS(tenant, oldVersion)
	createCoreDNS(t, allowed)

	tooNew := newCoreDNS(tenant2, newVersion)
	g.Expect(k8sClient.Create(ctx, tooNew)).To(Succeed())
	stalled := waitCondition(t, tooNew, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonNotPermitted)
	g.Expect(stalled.Message).To(Equal("AddonPolicy " + policyNamespace + "/tenants rules[0] (tenant-dns) does not allow version " +
		newVersion + " (allowed: >=1.11.0, <1.12.0)"))
	g.Expect(tooNew.Status.Inventory.Objects()).To(BeEmpty())

	elsewhere := newCoreDNS(other, oldVersion)
	g.Expect(k8sClient.Create(ctx, elsewhere)).To(Succeed())
	stalled = waitCondition(t, elsewhere, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonNotPermitted)
	g.Expect(stalled.Message).To(Equal("no AddonPolicy rule allows CoreDNS in namespace " + other))

	otherKind := &addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Name: "nodelocaldns", Namespace: tenant}}
	g.Expect(k8sClient.Create(ctx, otherKind)).To(Succeed())
	stalled = waitCondition(t, otherKind, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonNotPermitted)
	g.Expect(stalled.Message).To(Equal("no AddonPolicy rule allows NodeLocalDNS in namespace " + tenant))

	t.Run("a refused change leaves what runs alone", func(t *testing.T) {
		g := NewWithT(t)
		before := resourceVersions(g, allowed.Status.Inventory.Objects())
		updateCoreDNS(t, allowed, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = append(c.Spec.Patches, rawPatch(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"kube-dns","labels":{"x":"y"}}}`))
		})
		stalled := waitCondition(t, allowed, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(stalled.Message).To(ContainSubstring("does not allow spec.patches"))
		g.Expect(resourceVersions(g, allowed.Status.Inventory.Objects())).To(Equal(before))
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: tenant, Name: "coredns"}, d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(oldVersion))
	})

	t.Run("a policy change re-evaluates the add-ons", func(t *testing.T) {
		g := NewWithT(t)
		setVersions(t, policy, ">=1.11.0")
		waitApplied(t, tooNew, newVersion)
		getAddon(g, elsewhere)
		g.Expect(elsewhere.Status.Inventory.Objects()).To(BeEmpty(), "a namespace no rule selects stays refused")
	})

	t.Run("an invalid rule is reported on the policy", func(t *testing.T) {
		g := NewWithT(t)
		setVersions(t, policy, ">= one")
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
			g.Expect(policy.Status.ObservedGeneration).To(Equal(policy.Generation))
			g.Expect(policy.Status.Conditions).To(ContainElement(And(HaveField("Reason", configv1alpha1.AddonPolicyReasonInvalidRule),
				HaveField("Message", ContainSubstring("spec.rules[0].versions")))))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
}

// setVersions changes the version constraint of the policy's first rule.
func setVersions(t *testing.T, policy *configv1alpha1.AddonPolicy, versions string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		policy.Spec.Rules[0].Versions = versions
		g.Expect(k8sClient.Update(context.Background(), policy)).To(Succeed())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// TestFreeFormFieldsAreSpecFields checks that every free-form field an add-on definition
// declares is a field of its CRD, so that an AddonPolicy's freeFormFields and the
// engine's check name real fields, and that docs/configuration.md lists it.
func TestFreeFormFieldsAreSpecFields(t *testing.T) {
	lists := readRegistryLists(t)
	doc := string(repoFile(t, "docs/configuration.md"))
	declared := 0
	for _, def := range Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		decodeYAML(t, filepath.Join("config", "crd", "bases", lists.crdFiles[gvk.Kind]), crd)
		for _, path := range def.FreeFormFields {
			declared++
			schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
			for _, name := range strings.Split(path, ".") {
				next, ok := schema.Properties[name]
				if !ok {
					t.Errorf("%s declares the free-form field %s, which its CRD does not have (%s)", gvk.Kind, path, name)
					break
				}
				schema = &next
			}
			if !strings.Contains(doc, "`"+path+"` ("+gvk.Kind+")") {
				t.Errorf("docs/configuration.md does not list the free-form field `%s` (%s)", path, gvk.Kind)
			}
		}
	}
	if declared == 0 {
		t.Error("no definition declares a free-form field; CoreDNS has spec.corefile")
	}
}
