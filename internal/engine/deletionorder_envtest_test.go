package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// Deletion in reverse dependency order: an add-on that others depend on (spec.dependsOn)
// is deleted only once they are gone.

// holdFinalizer is a finalizer of another controller the tests put on a child to hold its
// add-on's deletion.
const holdFinalizer = "example.com/hold"

// deletionChain is a chain of three add-ons: the CoreDNS a in ns1, the NodeLocalDNS b in
// ns1 that depends on a, and the CoreDNS c in ns2 that depends on b, each applied.
type deletionChain struct {
	ns1, ns2 string
	a        *addonsv1alpha1.CoreDNS
	b        *addonsv1alpha1.NodeLocalDNS
	c        *addonsv1alpha1.CoreDNS
}

// newDeletionChain creates the chain, a and b Ready and c applied.
func newDeletionChain(t *testing.T) deletionChain {
	t.Helper()
	g := NewWithT(t)
	ch := deletionChain{ns1: newNamespace(t), ns2: newNamespace(t)}
	ch.a = enginetest.NewCoreDNS(ch.ns1, newVersion)
	createReadyCoreDNS(t, ch.a)
	ch.b = newDependentNodeLocalDNS(ch.ns1, addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: ch.a.Name})
	g.Expect(k8sClient.Create(context.Background(), ch.b)).To(Succeed())
	waitAppliedAny(t, ch.b)
	markWorkloadsAvailable(t, ch.ns1)
	waitReason(t, ch.b, addonsv1alpha1.ReasonReconciled)
	ch.c = enginetest.NewCoreDNS(ch.ns2, newVersion)
	ch.c.Spec.DependsOn = []addonsv1alpha1.AddonReference{{Kind: "NodeLocalDNS", Name: ch.b.Name, Namespace: ch.ns1}}
	createCoreDNS(t, ch.c)
	for _, a := range ch.addons() {
		getAddon(g, a)
		g.Expect(a.GetAddonStatus().Inventory.Objects()).NotTo(BeEmpty(), "%s/%s has no children", a.GetNamespace(), a.GetName())
	}
	return ch
}

// addons returns the chain's add-ons, the dependency first.
func (ch deletionChain) addons() []addonsv1alpha1.Addon {
	return []addonsv1alpha1.Addon{ch.a, ch.b, ch.c}
}

// newDependentNodeLocalDNS returns a NodeLocalDNS named nodelocaldns in ns that depends on deps.
func newDependentNodeLocalDNS(ns string, deps ...addonsv1alpha1.AddonReference) *addonsv1alpha1.NodeLocalDNS {
	n := &addonsv1alpha1.NodeLocalDNS{}
	n.Name, n.Namespace = "nodelocaldns", ns
	n.Spec.DependsOn = deps
	return n
}

// waitAppliedAny waits until the add-on has applied some version for its generation.
func waitAppliedAny(t *testing.T, obj addonsv1alpha1.Addon) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, obj)
		g.Expect(obj.GetAddonStatus().AppliedVersion).NotTo(BeEmpty())
		g.Expect(obj.GetAddonStatus().ObservedGeneration).To(Equal(obj.GetGeneration()))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// gone reports whether the add-on no longer exists.
func gone(g Gomega, obj addonsv1alpha1.Addon) bool {
	fresh := obj.DeepCopyObject().(client.Object)
	err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), fresh)
	if apierrors.IsNotFound(err) {
		return true
	}
	g.Expect(err).NotTo(HaveOccurred())
	return false
}

// expectWaiting expects obj to exist, being deleted, with Ready and Progressing reason
// DependentsExist naming dependent.
func expectWaiting(g Gomega, obj addonsv1alpha1.Addon, dependent string) {
	getAddon(g, obj)
	g.Expect(obj.GetDeletionTimestamp()).NotTo(BeNil())
	g.Expect(obj.GetFinalizers()).To(ContainElement(engine.Finalizer))
	for _, typ := range []string{addonsv1alpha1.ConditionReady, addonsv1alpha1.ConditionProgressing} {
		cond := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, typ)
		g.Expect(cond).NotTo(BeNil(), typ)
		g.Expect(cond.Reason).To(Equal(addonsv1alpha1.ReasonDependentsExist), "%s: %s", typ, cond.Message)
		g.Expect(cond.Message).To(ContainSubstring(dependent))
	}
}

// expectChildrenIntact expects every child in refs to exist and none to be deleted.
func expectChildrenIntact(g Gomega, refs []addonsv1alpha1.ObjectReference) {
	g.Expect(refs).NotTo(BeEmpty())
	for _, ref := range refs {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred(), "%s was deleted", ref)
		g.Expect(live.GetDeletionTimestamp()).To(BeNil(), "%s is being deleted", ref)
	}
}

// holdChild puts holdFinalizer on the ConfigMap name in ns, and removes it when the test ends.
func holdChild(t *testing.T, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cm)).To(Succeed())
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Finalizers = append(cm.Finalizers, holdFinalizer)
	g.Expect(k8sClient.Patch(context.Background(), cm, patch)).To(Succeed())
	t.Cleanup(func() { releaseChild(t, ns, name) })
}

// releaseChild removes holdFinalizer from the ConfigMap name in ns, if it is there.
func releaseChild(t *testing.T, ns, name string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cm)
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		if len(cm.Finalizers) == 0 {
			return
		}
		patch := client.MergeFrom(cm.DeepCopy())
		cm.Finalizers = nil
		g.Expect(k8sClient.Patch(context.Background(), cm, patch)).To(Succeed())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// TestDeletingAChainGoesLeavesFirst deletes a chain of three add-ons at once, the
// dependency first: they go leaves first. Each poll reads the dependency before its
// dependent, so a dependency seen gone while its dependent is seen to exist is a
// dependency deleted first.
func TestDeletingAChainGoesLeavesFirst(t *testing.T) {
	g := NewWithT(t)
	ch := newDeletionChain(t)
	for _, a := range ch.addons() {
		g.Expect(k8sClient.Delete(context.Background(), a)).To(Succeed())
	}
	names := []string{"a", "b", "c"}
	seenGone := map[string]bool{}
	var order []string
	g.Eventually(func(g Gomega) {
		now := make([]bool, 0, len(names))
		var round []string
		for i, a := range ch.addons() {
			isGone := gone(g, a)
			now = append(now, isGone)
			if isGone && !seenGone[names[i]] {
				seenGone[names[i]] = true
				round = append(round, names[i])
			}
		}
		if len(round) > 0 {
			order = append(order, strings.Join(round, "+"))
		}
		for i := range 2 {
			// StopTrying: a violation is final, not something to wait out.
			if now[i] && !now[i+1] {
				StopTrying(fmt.Sprintf("%s is gone while %s, which depends on it, exists (order so far %v)",
					names[i], names[i+1], order)).Now()
			}
		}
		g.Expect(now).To(Equal([]bool{true, true, true}))
	}).WithTimeout(2 * eventuallyTimeout).WithPolling(20 * time.Millisecond).Should(Succeed())
	t.Logf("gone, poll by poll: %v", order)
	for _, a := range ch.addons() {
		expectGone(t, a.GetAddonStatus().Inventory.Objects())
	}
}

// TestDeletingAChainStepByStep deletes a chain of three add-ons at once while a finalizer
// of another controller holds a child of the leaf c, and later one of b: at each step the
// add-ons that others still depend on wait with reason DependentsExist, naming them, and
// keep every child.
func TestDeletingAChainStepByStep(t *testing.T) {
	g := NewWithT(t)
	ch := newDeletionChain(t)
	holdChild(t, ch.ns2, "coredns")
	holdChild(t, ch.ns1, "node-local-dns")
	aChildren := ch.a.Status.Inventory.Objects()
	bChildren := ch.b.Status.Inventory.Objects()
	for _, a := range ch.addons() {
		g.Expect(k8sClient.Delete(context.Background(), a)).To(Succeed())
	}

	// c, which nothing depends on, deletes its children and is held by its ConfigMap; b
	// and a wait, each for the one that depends on it, with every child kept.
	g.Eventually(func(g Gomega) {
		getAddon(g, ch.c)
		g.Expect(readyCondition(&ch.c.Status.AddonStatus).Reason).To(Equal(addonsv1alpha1.ReasonDeleting))
		expectWaiting(g, ch.b, "CoreDNS "+ch.ns2+"/coredns (being deleted)")
		expectWaiting(g, ch.a, "NodeLocalDNS "+ch.ns1+"/nodelocaldns (being deleted)")
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	_, err := liveObject(addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ch.ns2, Name: "coredns"})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the leaf's deletion is not held")
	expectChildrenIntact(g, bChildren)
	expectChildrenIntact(g, aChildren)

	// c goes: b deletes its children and is held by its ConfigMap; a still waits for b.
	releaseChild(t, ch.ns2, "coredns")
	g.Eventually(func(g Gomega) {
		g.Expect(gone(g, ch.c)).To(BeTrue())
		getAddon(g, ch.b)
		g.Expect(readyCondition(&ch.b.Status.AddonStatus).Reason).To(Equal(addonsv1alpha1.ReasonDeleting))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	_, err = liveObject(addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: ch.ns1, Name: "node-local-dns"})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "b deleted its children once c was gone")
	// b is being deleted and holds its finalizer: it still counts.
	g.Expect(ch.b.Finalizers).To(ContainElement(engine.Finalizer))
	g.Consistently(func(g Gomega) {
		expectWaiting(g, ch.a, "NodeLocalDNS "+ch.ns1+"/nodelocaldns (being deleted)")
		expectChildrenIntact(g, aChildren)
	}).WithTimeout(time.Second).WithPolling(pollInterval).Should(Succeed())
	g.Eventually(func() []string { return enginetest.EventReasons(t, k8sClient, ch.ns1, ch.a.Name) }).
		WithTimeout(eventuallyTimeout).Should(ContainElement(engine.EventDependentsExist))

	// b goes, then a.
	releaseChild(t, ch.ns1, "node-local-dns")
	g.Eventually(func(g Gomega) {
		g.Expect(gone(g, ch.b)).To(BeTrue())
		g.Expect(gone(g, ch.a)).To(BeTrue())
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	expectGone(t, aChildren)
}

// TestDeletingADependencyWaitsForItsDependent deletes only the dependency: it waits as long
// as its dependent lives and names it, and goes once the dependent is deleted or no longer
// depends on it.
func TestDeletingADependencyWaitsForItsDependent(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		letGo   func(t *testing.T, dependent *addonsv1alpha1.NodeLocalDNS)
		deleted bool
	}{
		{
			name: "the dependent is deleted",
			letGo: func(t *testing.T, d *addonsv1alpha1.NodeLocalDNS) {
				NewWithT(t).Expect(k8sClient.Delete(ctx, d)).To(Succeed())
			},
			deleted: true,
		},
		{
			name: "the dependent drops its dependsOn",
			letGo: func(t *testing.T, d *addonsv1alpha1.NodeLocalDNS) {
				updateAddon(t, d, func() { d.Spec.DependsOn = nil })
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			dependency := enginetest.NewCoreDNS(ns, newVersion)
			createReadyCoreDNS(t, dependency)
			dependent := newDependentNodeLocalDNS(ns, addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: dependency.Name})
			g.Expect(k8sClient.Create(ctx, dependent)).To(Succeed())
			waitAppliedAny(t, dependent)
			children := dependency.Status.Inventory.Objects()

			g.Expect(k8sClient.Delete(ctx, dependency)).To(Succeed())
			g.Eventually(func(g Gomega) {
				expectWaiting(g, dependency, "NodeLocalDNS "+ns+"/nodelocaldns")
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
			g.Consistently(func(g Gomega) {
				expectWaiting(g, dependency, "NodeLocalDNS "+ns+"/nodelocaldns")
				expectChildrenIntact(g, children)
			}).WithTimeout(2 * time.Second).WithPolling(pollInterval).Should(Succeed())

			tc.letGo(t, dependent)
			g.Eventually(func(g Gomega) {
				g.Expect(gone(g, dependency)).To(BeTrue())
				g.Expect(gone(g, dependent)).To(Equal(tc.deleted))
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
			expectGone(t, children)
		})
	}
}
