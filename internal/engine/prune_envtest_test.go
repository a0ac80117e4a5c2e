package engine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// What the reconciler makes of the apply library's prune, partial apply and immutable
// fields: the add-on's status and conditions, its events, its retries.
// internal/engine/ssa's prune_envtest_test.go checks the apply library itself (what is
// pruned and what is kept, the errors).

// The test-only packages of testdata/packages: 1.12.1 without its PodDisruptionBudget,
// and the same with a Service the API server rejects.
const (
	versionNoPDB  = "1.12.1-no-pdb"
	versionBroken = "1.12.1-broken"
	// versionNewSelector changes the Deployment's selector.
	versionNewSelector = "1.12.1-new-selector"
)

func TestPruneRemovesOnlyWhatLeftTheManifests(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = versionNoPDB })
	waitApplied(t, cr, versionNoPDB)
	g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(6))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &policyv1.PodDisruptionBudget{}))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue(), "the PodDisruptionBudget that left the package was not pruned")
	g.Eventually(func(g Gomega) {
		pruned := enginetest.EventsFor(g, k8sClient, ns, engine.EventPruned)
		g.Expect(pruned).To(HaveLen(1))
		g.Expect(pruned[0].Message).To(ContainSubstring("PodDisruptionBudget " + ns + "/coredns"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

func TestNothingIsPrunedAfterAPartialApply(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	errorsBefore := enginetest.MetricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "error"})

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = versionBroken })
	ready := waitReason(t, cr, addonsv1alpha1.ReasonApplyFailed)
	g.Expect(ready.Message).To(ContainSubstring("applying Service " + ns + "/kube-dns"))
	g.Expect(ready.Message).To(ContainSubstring(`Unsupported value: "QUIC"`))
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion), "a failed apply is not the applied version")

	// The apply is retried with back-off; the PodDisruptionBudget stays all along, and
	// the repeated failure gives one event, not one per retry.
	g.Eventually(func() float64 {
		return enginetest.MetricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "error"})
	}).WithTimeout(eventuallyTimeout).Should(BeNumerically(">=", errorsBefore+3))
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &policyv1.PodDisruptionBudget{})).To(Succeed())
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(7), "the inventory still lists the PodDisruptionBudget")
	g.Expect(enginetest.EventsFor(g, k8sClient, ns, addonsv1alpha1.ReasonApplyFailed)).To(HaveLen(1))

	// Fixing the spec applies and prunes.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = versionNoPDB })
	waitApplied(t, cr, versionNoPDB)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &policyv1.PodDisruptionBudget{}))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())
}

func TestImmutableFieldChange(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}
	before := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, before)).To(Succeed())

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = versionNewSelector })
	ready := waitReason(t, cr, addonsv1alpha1.ReasonImmutableField)
	g.Expect(ready.Message).To(ContainSubstring("applying Deployment " + ns + "/coredns: the new manifest changes spec.selector"))
	degraded := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
	g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(degraded.Reason).To(Equal(addonsv1alpha1.ReasonImmutableField))
	same := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, same)).To(Succeed())
	g.Expect(same.UID).To(Equal(before.UID), "the Deployment was deleted without the opt-in")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{RecreateOnImmutable: true}
	})
	waitApplied(t, cr, versionNewSelector)
	after := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, after)).To(Succeed())
	g.Expect(after.UID).NotTo(Equal(before.UID))
	g.Expect(after.Spec.Selector.MatchLabels).To(HaveKeyWithValue("app.kubernetes.io/name", "coredns"))
	g.Eventually(func(g Gomega) {
		g.Expect(enginetest.EventsFor(g, k8sClient, ns, engine.EventRecreated)).To(HaveLen(1))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}
