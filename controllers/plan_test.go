package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// reconciled waits until the CoreDNS reconciles counter moved past before.
func reconciled(t *testing.T, before float64) {
	t.Helper()
	NewWithT(t).Eventually(func() float64 {
		return metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "success"})
	}).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", before))
}

// quietWindow is how long a test watches the manager's requests for an add-on.
const quietWindow = 2 * time.Second

// waitQuiet waits until the manager made no request for anything in ns for a whole
// quietWindow, so the reconciles an add-on's creation set off have settled.
func waitQuiet(t *testing.T, ns string) {
	t.Helper()
	NewWithT(t).Eventually(func() []string {
		mark := requests.count()
		time.Sleep(quietWindow)
		return requests.requestsSince(mark, ns)
	}).WithTimeout(eventuallyTimeout).Should(BeEmpty())
}

func TestSteadyStateMakesNoRequests(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	waitQuiet(t, ns)

	mark := requests.count()
	// Touching an annotation triggers a reconcile through the watch whose inputs are
	// unchanged...
	count := metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "success"})
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	metav1.SetMetaDataAnnotation(&cr.ObjectMeta, "example.com/touched", cr.ResourceVersion)
	g.Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
	reconciled(t, count)
	// ...and so does a reconcile run here, on the manager's clients, which certainly ran.
	r, err := engine.New(testMgr, CoreDNSDefinition(), engineOptions())
	g.Expect(err).NotTo(HaveOccurred())
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(BeZero())

	// Over a fixed window after both, the manager made no request for the add-on at all.
	time.Sleep(quietWindow)
	g.Expect(requests.requestsSince(mark, ns)).To(BeEmpty(), "reconciles with unchanged inputs made API requests")
	getAddon(g, cr)
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionReady)).To(BeTrue())
}

func TestDriftMakesOneCorrectiveWrite(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}

	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	before := requests.writeCount()
	cm.Data["Corefile"] = ".:53 {\n    whoami\n}\n"
	g.Expect(k8sClient.Update(ctx, cm)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
		g.Expect(cm.Data["Corefile"]).To(ContainSubstring("kubernetes cluster.local"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())

	// The ConfigMap is written back, once; nothing else of the add-on is written (events
	// aside), not even its status.
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(deploy.Spec.Replicas).To(Equal(ptr.To[int32](2)))
	g.Consistently(func() []string { return requests.objectWritesSince(before, ns) }).
		WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).
		Should(Equal([]string{"PATCH /api/v1/namespaces/" + ns + "/configmaps/coredns"}))
}

func TestCacheHoldsOnlyManagedChildren(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	unrelated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}, Data: map[string]string{"a": "b"}}
	g.Expect(k8sClient.Create(ctx, unrelated)).To(Succeed())

	// The unrelated ConfigMap exists (the API server lists it) but never enters the
	// manager's cache; the add-on's own ConfigMap does.
	live := &corev1.ConfigMapList{}
	g.Expect(k8sClient.List(ctx, live, client.InNamespace(ns))).To(Succeed())
	g.Expect(live.Items).To(ContainElement(HaveField("ObjectMeta.Name", "unrelated")))
	cached := &unstructured.UnstructuredList{}
	cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	g.Eventually(func(g Gomega) {
		g.Expect(testMgr.GetCache().List(ctx, cached, client.InNamespace(ns))).To(Succeed())
		names := make([]string, 0, len(cached.Items))
		for _, item := range cached.Items {
			names = append(names, item.GetName())
			g.Expect(item.GetManagedFields()).To(BeEmpty(), "managed fields are stripped from the cache")
		}
		g.Expect(names).To(ConsistOf("coredns"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// TestANewAddonIsReconciledOnce checks that the watch events of the engine's own writes
// (the children it creates, the add-on's finalizer and write-ahead patch, a drift
// correction) cost no reconcile, while a change by someone else still does.
func TestANewAddonIsReconciledOnce(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	waitQuiet(t, ns)
	labels := map[string]string{"kind": "CoreDNS", "namespace": ns, "name": cr.Name}
	reconciles := func() float64 { return metricValue(t, "kaddons_addon_reconciles_total", labels) }
	g.Consistently(reconciles).WithTimeout(2*quietWindow).Should(Equal(1.0), "reconciles of a new add-on")

	// Someone else deletes a child: that reconciles, and the re-creation's own event does not.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
	g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	}).WithTimeout(eventuallyTimeout).Should(Succeed(), "the deleted ConfigMap is restored")
	waitQuiet(t, ns)
	g.Consistently(reconciles).WithTimeout(2*quietWindow).Should(Equal(2.0), "reconciles after one deleted child")
}
