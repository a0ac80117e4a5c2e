package ssa_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// Write-ahead: the engine records what an apply may create before its first write
// (Request.BeforeWrites), and passes what such a record lists beyond the inventory as
// Request.Pending, so that an apply interrupted before its status write leaves no orphan.

// expectGone checks that no object of refs exists any more.
func expectGone(t *testing.T, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	g := NewWithT(t)
	for _, ref := range refs {
		_, err := liveObject(ref)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s still exists (%v)", ref, err)
	}
}

// TestBeforeWritesSeesEveryObjectBeforeTheFirstWrite: the hook gets every object to
// inventory, cluster-scoped ones included, while none exists yet; when it fails, the
// apply stops with its error and nothing written.
func TestBeforeWritesSeesEveryObjectBeforeTheFirstWrite(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	errRecord := errors.New("the write-ahead record could not be written")

	var recorded []addonsv1alpha1.ObjectReference
	req := request(ns, objects)
	req.BeforeWrites = func(_ context.Context, desired []addonsv1alpha1.ObjectReference) error {
		recorded = desired
		expectGone(t, desired)
		return errRecord
	}
	res, err := newManager().Apply(ctx, req)
	g.Expect(err).To(MatchError(errRecord))
	g.Expect(recorded).To(ConsistOf(refsOf(objects)))
	g.Expect(enginetest.ClusterScoped(recorded)).To(HaveLen(2))
	g.Expect(res.Applied).To(BeEmpty())
	expectGone(t, refsOf(objects))

	req.BeforeWrites = func(_ context.Context, desired []addonsv1alpha1.ObjectReference) error {
		recorded = desired
		return nil
	}
	res, err = newManager().Apply(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Inventory).To(ConsistOf(recorded))
}

// TestWriteAheadInventoryLeavesNoOrphan: an apply whose result was never recorded (the
// manager died before its status write) left objects that only the write-ahead record
// lists. The next apply gets them as Pending: whatever left the manifests is pruned,
// namespaced and cluster-scoped, and what is still rendered is the add-on's again.
func TestWriteAheadInventoryLeavesNoOrphan(t *testing.T) {
	t.Run("a new add-on, then a changed spec", func(t *testing.T) {
		g := NewWithT(t)
		ns, elsewhere := enginetest.NewNamespace(t, k8sClient), enginetest.NewNamespace(t, k8sClient)
		crashed := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
		orphans := crashed.Inventory
		g.Expect(enginetest.ClusterScoped(orphans)).NotTo(BeEmpty())

		// The add-on now renders into another namespace; its inventory is empty.
		req := request(ns, relabelled(t, coreDNSObjects(t, elsewhere, variant{}), ns))
		req.Pending = orphans
		res, err := newManager().Apply(context.Background(), req)
		g.Expect(err).NotTo(HaveOccurred())
		expectGone(t, orphans)
		g.Expect(res.Pruned).To(ConsistOf(orphans))
		g.Expect(res.Inventory).To(HaveEach(Not(BeElementOf(orphans))))
		for _, ref := range res.Inventory {
			_, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred(), "%s is in the inventory but not in the cluster", ref)
		}
	})

	t.Run("a new add-on, then deleted", func(t *testing.T) {
		ns := enginetest.NewNamespace(t, k8sClient)
		crashed := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
		held, err := newManager().DeleteInStages(context.Background(), crashed.Inventory, testKind, owner(ns))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(held).To(BeEmpty())
		expectGone(t, crashed.Inventory)
	})

	t.Run("a change that adds objects, then changed back", func(t *testing.T) {
		g := NewWithT(t)
		ns, elsewhere := enginetest.NewNamespace(t, k8sClient), enginetest.NewNamespace(t, k8sClient)
		first := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
		crashed := applied(t, ns, relabelled(t, coreDNSObjects(t, elsewhere, variant{}), ns), first.Inventory)
		orphans := crashed.Inventory
		g.Expect(enginetest.ClusterScoped(orphans)).NotTo(BeEmpty())

		// Changed back: the recorded inventory is still the first apply's.
		req := request(ns, coreDNSObjects(t, ns, variant{}))
		req.Previous, req.Pending = first.Inventory, orphans
		res, err := newManager().Apply(context.Background(), req)
		g.Expect(err).NotTo(HaveOccurred())
		expectGone(t, orphans)
		g.Expect(res.Inventory).To(ConsistOf(first.Inventory))
		for _, ref := range first.Inventory {
			_, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred(), "%s was not re-created", ref)
		}
	})
}

// TestAPartialApplyKeepsWhatItMayHaveCreated: an apply that fails part-way returns an
// inventory of the last one plus everything it wrote, so nothing it created is lost.
func TestAPartialApplyKeepsWhatItMayHaveCreated(t *testing.T) {
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	res, err := newManager().Apply(context.Background(), request(ns, coreDNSObjects(t, ns, variant{brokenService: true})))
	g.Expect(err).To(MatchError(ContainSubstring(`Unsupported value: "QUIC"`)))
	g.Expect(res.Applied).NotTo(BeEmpty())
	for ref := range res.Applied {
		g.Expect(res.Inventory).To(ContainElement(ref), "%s was created and is not in the inventory", ref)
	}
	for _, ref := range res.Inventory {
		g.Expect(ref.Kind).NotTo(Equal("Service"), "the refused Service was never created")
	}
}
