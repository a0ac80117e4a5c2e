package ssa_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Prune: what left the manifests is deleted after a complete apply, and only that.

// newDecoy creates a PodDisruptionBudget that carries the add-on's labels but is not
// in its inventory.
func newDecoy(t *testing.T, ns string) *policyv1.PodDisruptionBudget {
	t.Helper()
	minAvailable := intstr.FromInt32(1)
	decoy := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "decoy", Namespace: ns, Labels: ssa.InstanceLabels(testKind, owner(ns))},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable},
	}
	NewWithT(t).Expect(k8sClient.Create(context.Background(), decoy)).To(Succeed())
	return decoy
}

// pdbGone reports whether the add-on's PodDisruptionBudget in ns is gone.
func pdbGone(ns string) bool {
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, &policyv1.PodDisruptionBudget{})
	return apierrors.IsNotFound(err)
}

func TestPruneRemovesOnlyWhatLeftTheManifests(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	first := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
	g.Expect(first.Inventory).To(HaveLen(7))
	decoy := newDecoy(t, ns)

	res := applied(t, ns, coreDNSObjects(t, ns, variant{noPDB: true}), first.Inventory)
	g.Expect(res.Inventory).To(HaveLen(6))
	g.Expect(res.Pruned).To(HaveLen(1))
	g.Expect(res.Pruned[0].String()).To(Equal("PodDisruptionBudget " + ns + "/coredns"))
	g.Expect(pdbGone(ns)).To(BeTrue(), "the PodDisruptionBudget that left the package was not pruned")
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(decoy), &policyv1.PodDisruptionBudget{})).To(Succeed(),
		"an object outside the inventory was deleted because of its labels")
}

func TestNothingIsPrunedAfterAPartialApply(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	first := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)

	// A package without the PodDisruptionBudget whose Service the API server rejects.
	broken := request(ns, coreDNSObjects(t, ns, variant{noPDB: true, brokenService: true}))
	broken.Previous = first.Inventory
	res, err := newManager().Apply(ctx, broken)
	var writeErr *ssa.WriteError
	g.Expect(errors.As(err, &writeErr)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("applying Service " + ns + "/kube-dns"))
	g.Expect(err.Error()).To(ContainSubstring(`Unsupported value: "QUIC"`))
	g.Expect(res.Pruned).To(BeEmpty())
	g.Expect(pdbGone(ns)).To(BeFalse(), "a partial apply pruned the PodDisruptionBudget")
	g.Expect(res.Inventory).To(HaveLen(7), "the inventory still lists the PodDisruptionBudget")
	g.Expect(res.Inventory).To(ConsistOf(first.Inventory))

	// Fixing the package applies and prunes.
	fixed := applied(t, ns, coreDNSObjects(t, ns, variant{noPDB: true}), res.Inventory)
	g.Expect(fixed.Pruned).To(HaveLen(1))
	g.Expect(pdbGone(ns)).To(BeTrue())
}

func TestImmutableFieldChange(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	first := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}
	before := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, before)).To(Succeed())

	req := request(ns, coreDNSObjects(t, ns, variant{newSelector: true}))
	req.Previous = first.Inventory
	_, err := newManager().Apply(ctx, req)
	var immutable *ssa.ImmutableError
	g.Expect(errors.As(err, &immutable)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("applying Deployment " + ns + "/coredns: the new manifest changes spec.selector"))
	same := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, same)).To(Succeed())
	g.Expect(same.UID).To(Equal(before.UID), "the Deployment was deleted without the opt-in")

	// The object's own annotation allows it as the request does.
	for _, u := range req.Objects {
		if u.GetKind() == "Deployment" {
			u.SetAnnotations(map[string]string{addonsv1alpha1.AnnotationRecreate: addonsv1alpha1.RecreateOnImmutable})
		}
	}
	res, err := newManager().Apply(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Recreated).To(HaveLen(1))
	g.Expect(res.Recreated[0].String()).To(Equal("Deployment " + ns + "/coredns"))
	after := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, after)).To(Succeed())
	g.Expect(after.UID).NotTo(Equal(before.UID))
	g.Expect(after.Spec.Selector.MatchLabels).To(HaveKeyWithValue("k8s-app", "kube-dns"))
}
