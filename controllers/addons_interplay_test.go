package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// nodeLocalDNSCorefile returns the Corefile node-local-dns was rendered with in ns.
func nodeLocalDNSCorefile(g Gomega, ns string) string {
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "node-local-dns"}, cm)).To(Succeed())
	return cm.Data["Corefile"]
}

func TestNodeLocalDNSFollowsCoreDNS(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	nl := &addonsv1alpha1.NodeLocalDNS{
		ObjectMeta: metav1.ObjectMeta{Name: "nodelocaldns", Namespace: ns},
		Spec: addonsv1alpha1.NodeLocalDNSSpec{
			LocalIP:    "169.254.20.11",
			CoreDNSRef: &addonsv1alpha1.LocalAddonReference{Name: "coredns"},
		},
	}
	g.Expect(k8sClient.Create(ctx, nl)).To(Succeed())

	// Without its CoreDNS it applies nothing and says what it waits for.
	progressing := waitCondition(t, nl, addonsv1alpha1.ConditionProgressing, addonsv1alpha1.ReasonDependencyNotReady)
	g.Expect(progressing.Message).To(ContainSubstring("CoreDNS " + ns + "/coredns"))
	g.Expect(nl.Status.Inventory.Objects()).To(BeEmpty())

	// A CoreDNS without a fixed IP: node-local-dns follows the address its Service got.
	cdns := newCoreDNS(ns, newVersion)
	cdns.Spec.DNSDomain = "corp.example.org"
	createCoreDNS(t, cdns)
	svc := &corev1.Service{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kube-dns"}, svc)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getAddon(g, nl)
		g.Expect(nl.Status.AppliedVersion).NotTo(BeEmpty())
		corefile := nodeLocalDNSCorefile(g, ns)
		g.Expect(corefile).To(ContainSubstring("bind 169.254.20.11 " + svc.Spec.ClusterIP))
		g.Expect(corefile).To(ContainSubstring("corp.example.org:53 {"))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	ds := &appsv1.DaemonSet{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "node-local-dns"}, ds)).To(Succeed())
	g.Expect(ds.Spec.Template.Spec.Containers[0].Args).To(ContainElement("169.254.20.11," + svc.Spec.ClusterIP))

	// A change to the CoreDNS re-renders node-local-dns without touching the NodeLocalDNS.
	generation := nl.Generation
	updateCoreDNS(t, cdns, func(c *addonsv1alpha1.CoreDNS) { c.Spec.DNSDomain = "cluster.example" })
	g.Eventually(func(g Gomega) {
		g.Expect(nodeLocalDNSCorefile(g, ns)).To(ContainSubstring("cluster.example:53 {"))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())

	// Its own fields win over the followed CoreDNS.
	updateAddon(t, nl, func() { nl.Spec.ClusterDNSIP = "10.96.200.10" })
	g.Eventually(func(g Gomega) {
		g.Expect(nodeLocalDNSCorefile(g, ns)).To(ContainSubstring("bind 169.254.20.11 10.96.200.10"))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	getAddon(g, nl)
	g.Expect(nl.Generation).To(Equal(generation + 1))
}

func TestDashboardTargetNamespaceCollision(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nsA, nsB := newNamespace(t), newNamespace(t)
	target := nsA + "-ui"

	first := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: nsA}}
	first.Spec.TargetNamespace = target
	g.Expect(k8sClient.Create(ctx, first)).To(Succeed())
	waitAnyApplied(t, first)
	before := resourceVersions(g, first.Status.Inventory.Objects())

	// A second Dashboard pointed at the same namespace would overwrite the first's objects.
	second := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: nsB}}
	second.Spec.TargetNamespace = target
	g.Expect(k8sClient.Create(ctx, second)).To(Succeed())
	stalled := waitCondition(t, second, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonOwnershipConflict)
	g.Expect(stalled.Message).To(ContainSubstring("belongs to dashboard " + nsA + "/dashboard"))
	ready := readyCondition(second.GetAddonStatus())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonOwnershipConflict))
	g.Expect(second.Status.Inventory.Objects()).To(BeEmpty())

	// Nothing of the first changed.
	g.Expect(resourceVersions(g, first.Status.Inventory.Objects())).To(Equal(before))
	for _, r := range first.Status.Inventory.Objects() {
		live, err := liveObject(r)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelNamespace, nsA), "%s", r)
	}
	events := &corev1.EventList{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(nsB))).To(Succeed())
		reasons := make([]string, 0, len(events.Items))
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ContainElement(addonsv1alpha1.ReasonOwnershipConflict))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

func TestDashboardKeepsExistingNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	existing := newNamespace(t)

	d := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: ns}}
	d.Spec.TargetNamespace = existing
	g.Expect(k8sClient.Create(ctx, d)).To(Succeed())
	waitAnyApplied(t, d)
	for _, r := range d.Status.Inventory.Objects() {
		g.Expect(r.Kind).NotTo(Equal("Namespace"), "a namespace that existed before is not the add-on's")
	}
	live := &corev1.Namespace{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: existing}, live)).To(Succeed())
	g.Expect(live.Labels).NotTo(HaveKey(ssa.LabelManagedBy))

	g.Expect(k8sClient.Delete(ctx, d)).To(Succeed())
	expectGone(t, d.Status.Inventory.Objects())
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: existing}, live)).To(Succeed())
	g.Expect(live.DeletionTimestamp).To(BeNil(), "deleting the Dashboard deleted a namespace it did not create")
}

// resourceVersions maps each referenced object to its resource version.
func resourceVersions(g Gomega, refs []addonsv1alpha1.ObjectReference) map[addonsv1alpha1.ObjectReference]string {
	out := map[addonsv1alpha1.ObjectReference]string{}
	for _, r := range refs {
		live, err := liveObject(r)
		g.Expect(err).NotTo(HaveOccurred(), "%s", r)
		out[r] = live.GetResourceVersion()
	}
	return out
}

// waitAnyApplied waits until the add-on has applied some version.
func waitAnyApplied(t *testing.T, cr addonsv1alpha1.Addon) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, cr)
		g.Expect(cr.GetAddonStatus().AppliedVersion).NotTo(BeEmpty())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}
