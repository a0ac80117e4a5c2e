package engine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// TestOwnerReferencesRebuilt strips the owner references from every child, as a backup
// restore would, and checks that they come back with nothing deleted (Cluster API's
// owner-reference resilience check).
func TestOwnerReferencesRebuilt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	uids := map[addonsv1alpha1.ObjectReference]types.UID{}
	stripped := 0
	for _, ref := range cr.Status.Inventory.Objects() {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		uids[ref] = live.GetUID()
		if len(live.GetOwnerReferences()) == 0 {
			continue
		}
		live.SetOwnerReferences(nil)
		g.Expect(k8sClient.Update(ctx, live)).To(Succeed())
		stripped++
	}
	g.Expect(stripped).To(BeNumerically(">", 3), "the namespaced children carry owner references")
	g.Eventually(func(g Gomega) {
		for _, ref := range cr.Status.Inventory.Objects() {
			live, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(live.GetUID()).To(Equal(uids[ref]), "%s was deleted and re-created", ref)
			if ref.Namespace == ns {
				g.Expect(live.GetOwnerReferences()).To(ContainElement(HaveField("UID", cr.UID)), "%s has no owner reference", ref)
			}
		}
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// TestDeletionWaitsForAForeignFinalizer deletes an add-on whose child another controller
// holds with a finalizer: the add-on says which child and which finalizer, keeps its own
// finalizer, never removes the foreign one, and finishes once it is gone.
func TestDeletionWaitsForAForeignFinalizer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	const foreign = "example.com/backup-in-progress"
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	cm.Finalizers = append(cm.Finalizers, foreign)
	g.Expect(k8sClient.Update(ctx, cm)).To(Succeed())

	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		ready := enginetest.ReadyCondition(&cr.Status.AddonStatus)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonDeleting))
		g.Expect(ready.Message).To(ContainSubstring("ConfigMap " + ns + "/coredns (finalizers: " + foreign + ")"))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	g.Expect(cr.Finalizers).To(ContainElement(engine.Finalizer))
	g.Eventually(func() []string { return enginetest.EventReasons(t, k8sClient, ns, cr.Name) }).WithTimeout(eventuallyTimeout).
		Should(ContainElement(engine.EventDeletionBlocked))
	// Children of later stages are gone already; the ConfigMap's stage holds up the rest.
	_, err := liveObject(addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: "coredns"})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Deployment (a later stage) is deleted first")
	g.Consistently(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
		g.Expect(cm.Finalizers).To(ContainElement(foreign))
	}).WithTimeout(2 * time.Second).WithPolling(pollInterval).Should(Succeed())

	// The other controller lets go: the deletion finishes.
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Finalizers = nil
	g.Expect(k8sClient.Patch(ctx, cm, patch)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())
	for _, ref := range cr.Status.Inventory.Objects() {
		_, err := liveObject(ref)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s outlived its add-on", ref)
	}
}

// TestPausedAddonDoesNotClaimAnUnappliedSpec pauses a Ready CoreDNS and changes its
// replicas: observedGeneration and the Ready condition keep the applied generation, so
// status.ready is false until the pause ends and the change is applied.
func TestPausedAddonDoesNotClaimAnUnappliedSpec(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Suspend = true })
	ready := waitReason(t, cr, addonsv1alpha1.ReasonPaused)
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "pausing alone changes nothing that runs")
	g.Expect(cr.Status.Ready).To(BeTrue())
	paused := cr.Generation

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](3) })
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		g.Expect(cr.Generation).To(Equal(paused + 1))
		r := enginetest.ReadyCondition(&cr.Status.AddonStatus)
		g.Expect(r.Message).To(ContainSubstring("is not applied"))
		g.Expect(r.ObservedGeneration).To(Equal(paused))
		g.Expect(cr.Status.ObservedGeneration).To(Equal(paused))
		g.Expect(cr.Status.Ready).To(BeFalse())
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	deploy := &unstructured.Unstructured{}
	deploy.SetAPIVersion("apps/v1")
	deploy.SetKind("Deployment")
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, deploy)).To(Succeed())
	replicas, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas")
	g.Expect(replicas).To(Equal(int64(2)), "a paused add-on applied a change")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Suspend = false })
	waitApplied(t, cr, newVersion)
}
