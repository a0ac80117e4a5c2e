package engine_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
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
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// The engine's plan, in requests: what a new add-on, a steady state and a drift cost,
// counted at the manager's transport (enginetest.RequestCounter), and what enters the
// cache.

// waitChannelsSettled waits until the newest change in the suite's channels folder (a
// file or folder modified, created or removed, which changes its folder's time) is older
// than engine.ChannelsRecheck and a margin: the channels watcher has polled since.
func waitChannelsSettled(t *testing.T) {
	t.Helper()
	var newest time.Time
	err := filepath.WalkDir(source.Dir(), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Waiting for a poll: nothing in the cluster shows it. The add-on is created after
	// it, so the reconcile-all it caused does not include it.
	if wait := time.Until(newest.Add(engine.ChannelsRecheck + 2*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
}

// annotate sets one annotation of the live add-on cr by merge patch.
func annotate(g Gomega, cr *addonsv1alpha1.CoreDNS, key, value string) {
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	metav1.SetMetaDataAnnotation(&cr.ObjectMeta, key, value)
	g.Expect(k8sClient.Patch(context.Background(), cr, patch)).To(Succeed())
}

// reconciled waits until the CoreDNS reconciles counter moved past before.
func reconciled(t *testing.T, before float64) {
	t.Helper()
	NewWithT(t).Eventually(func() float64 {
		return metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "success"})
	}).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", before))
}

func TestSteadyStateMakesNoRequests(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	waitQuiet(t, ns)

	mark := requests.Count()
	// Touching an annotation triggers a reconcile through the watch whose inputs are
	// unchanged...
	count := metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "success"})
	annotate(g, cr, "example.com/touched", cr.ResourceVersion)
	reconciled(t, count)
	// ...and so does a reconcile run here, on the manager's clients, which certainly ran.
	r, err := engine.New(testMgr, testDefinition(), engineOptions())
	g.Expect(err).NotTo(HaveOccurred())
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(BeZero())

	// Over a fixed window after both, the manager made no request for the add-on at all.
	time.Sleep(enginetest.QuietWindow)
	g.Expect(requests.RequestsSince(mark, ns)).To(BeEmpty(), "reconciles with unchanged inputs made API requests")
	getAddon(g, cr)
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionReady)).To(BeTrue())
}

func TestDriftMakesOneCorrectiveWrite(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}

	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
	before := requests.WriteCount()
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
	g.Consistently(func() []string { return requests.ObjectWritesSince(before, ns) }).
		WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).
		Should(Equal([]string{"PATCH /api/v1/namespaces/" + ns + "/configmaps/coredns"}))
}

func TestCacheHoldsOnlyManagedChildren(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
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
	// A change of the suite's channels folder (an earlier test's channel file or package)
	// reconciles every add-on when the watcher next polls: that is news, not an echo, so
	// the count starts once the watcher has seen the last one.
	waitChannelsSettled(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	waitQuiet(t, ns)
	labels := map[string]string{"kind": "CoreDNS", "namespace": ns, "name": cr.Name}
	reconciles := func() float64 { return metricValue(t, "kaddons_addon_reconciles_total", labels) }
	// A write the cache did not show within two seconds (a loaded machine) is news when
	// its event comes, and may cost one reconcile more: the metric counts them.
	lags := func() float64 { return metricValue(t, "kaddons_addon_cache_lags_total", labels) }
	g.Expect(reconciles()).To(BeNumerically(">=", 1))
	g.Consistently(func() float64 { return reconciles() - lags() }).WithTimeout(2*enginetest.QuietWindow).
		Should(BeNumerically("<=", 1), "reconciles of a new add-on, less the writes the cache lagged behind")

	// Someone else deletes a child: that reconciles, and the re-creation's own event does not.
	before, news := reconciles(), reconciles()-lags()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
	g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	}).WithTimeout(eventuallyTimeout).Should(Succeed(), "the deleted ConfigMap is restored")
	waitQuiet(t, ns)
	g.Expect(reconciles()).To(BeNumerically(">", before), "the deletion of a child did not reconcile")
	g.Consistently(func() float64 { return reconciles() - lags() }).WithTimeout(2*enginetest.QuietWindow).
		Should(BeNumerically("<=", news+1), "reconciles after one deleted child, less the writes the cache lagged behind")
}

// TestCreatingAnAddonCostsNineRequests counts the requests of a new 7-object CoreDNS
// until it settles: the finalizer and the write-ahead record share one patch, then 7
// create-only applies (no GET) and one status patch. The first apply records no event
// (the Ready event ends the install, and nothing runs the pods here).
func TestCreatingAnAddonCostsNineRequests(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	mark, markAll, markApplied := requests.WriteCount(), requests.Count(), requests.ApplyCount()
	createCoreDNS(t, cr)
	waitQuiet(t, ns)
	// Reads count too: the ownership check of the new objects is their create-only apply,
	// not a GET each past the cache.
	all := requests.RequestsSince(markAll, ns)
	g.Expect(all).To(HaveLen(9), "requests: %v", all)
	for _, r := range all {
		g.Expect(r).NotTo(HavePrefix("GET "), "requests: %v", all)
	}
	var addonPatches []string
	writes := requests.WritesSince(mark, ns)
	for _, w := range writes {
		if strings.Contains(w, "/v1alpha1/namespaces/"+ns+"/coredns/") {
			addonPatches = append(addonPatches, w)
		}
	}
	g.Expect(cr.Status.Inventory.Len()).To(Equal(7))
	g.Expect(writes).To(HaveLen(9), "writes: %v", writes)
	g.Expect(writes).NotTo(ContainElement(ContainSubstring("/events")), "writes: %v", writes)
	g.Expect(addonPatches).To(ConsistOf(
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name,
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name+"/status"),
		"one patch for the finalizer and the write-ahead record, one for the status")
	// The API server answers each apply with the object's metadata only: the engine reads
	// nothing else from it, and neither side encodes or decodes the whole object.
	applied := requests.AppliedSince(markApplied, ns)
	g.Expect(applied).To(HaveLen(7), "applies: %v", applied)
	g.Expect(applied).To(HaveEach(HaveSuffix(" PartialObjectMetadata")), "applies: %v", applied)
}

// TestARequestedReconcileAppliesEverything sets the requested-at annotation on a settled
// add-on: every object is applied again, though nothing drifted, and the status says
// which request was handled.
func TestARequestedReconcileAppliesEverything(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	waitQuiet(t, ns)
	markApplied := requests.ApplyCount()

	annotate(g, cr, addonsv1alpha1.AnnotationRequestedAt, "2026-12-07T18:40:00Z")
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		g.Expect(cr.Status.LastHandledReconcileAt).To(Equal("2026-12-07T18:40:00Z"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	g.Expect(requests.AppliedSince(markApplied, ns)).To(HaveLen(cr.Status.Inventory.Len()), "every object is applied again")
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionReady)).To(BeTrue())

	// Handled: the next reconcile with the same value applies nothing.
	waitQuiet(t, ns)
	markApplied = requests.ApplyCount()
	r, err := engine.New(testMgr, testDefinition(), engineOptions())
	g.Expect(err).NotTo(HaveOccurred())
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(requests.AppliedSince(markApplied, ns)).To(BeEmpty())
}
