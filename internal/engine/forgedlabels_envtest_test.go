package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// forgedConfigMaps is how many ConfigMaps the attacker of TestForgedLabelsCostNoMemoryAndWakeNothing
// creates, and forgedBytes the size of each: 54 MB in all, as in the measurement that
// found the flood.
const (
	forgedConfigMaps = 60
	forgedBytes      = 900 << 10
)

// heapInUse returns the bytes of the test process's heap in use after a full collection:
// the suite's manager, its cache included, runs in this process.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestForgedLabelsCostNoMemoryAndWakeNothing is the cache flood: a namespace editor with
// no kaddons rights creates 60 ConfigMaps of 0.9 MB that carry kaddons' managed-by label
// and the instance labels of a running CoreDNS. kaddons did not write them, so they carry
// no valid seal: the manager's cache holds each as a metadata stub (its heap grows by far
// less than the 54 MB they hold), their events wake no reconcile of the CoreDNS, and the
// CoreDNS and its children stay as they were.
func TestForgedLabelsCostNoMemoryAndWakeNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	inventory := cr.Status.Inventory.Objects()
	enginetest.TenantAccount(t, k8sClient, ns, "editor")
	asEditor := enginetest.ClientAs(t, cfg, ns, "editor")

	labels := map[string]string{ssa.LabelManagedBy: ssa.ManagedByValue, ssa.LabelKind: "coredns",
		ssa.LabelNamespace: ns, ssa.LabelName: cr.Name}
	series := map[string]string{"kind": "CoreDNS", "namespace": ns, "name": cr.Name}
	// A change of the suite's channels folder reconciles every add-on at the watcher's
	// next poll; the count starts after it (see TestANewAddonIsReconciledOnce).
	waitChannelsSettled(t)
	reconciles := metricValue(t, "kaddons_addon_reconciles_total", series)
	before := heapInUse()
	payload := strings.Repeat("x", forgedBytes)
	for i := range forgedConfigMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("forged-%02d", i), Labels: labels,
			Annotations: map[string]string{ssa.AnnotationSeal: "0123456789abcdef0123456789abcdef"}},
			Data: map[string]string{"data": payload}}
		g.Expect(asEditor.Create(ctx, cm)).To(Succeed())
	}
	// The cache has seen every one of them, as a stub.
	g.Eventually(func(g Gomega) {
		for i := range forgedConfigMaps {
			cached := &corev1.ConfigMap{}
			g.Expect(testMgr.GetCache().Get(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("forged-%02d", i)}, cached)).To(Succeed())
			g.Expect(cached.Data).To(BeEmpty())
			g.Expect(cached.Labels).To(HaveKeyWithValue(ssa.LabelName, cr.Name))
		}
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	grown := int64(heapInUse()) - int64(before)
	t.Logf("the manager's process heap grew by %d KiB for %d forged ConfigMaps of %d KiB", grown>>10, forgedConfigMaps, forgedBytes>>10)
	g.Expect(grown).To(BeNumerically("<", 16<<20), "the cache holds what the attacker wrote")

	// No reconcile of the CoreDNS was woken; it and its children are as they were.
	g.Consistently(func() float64 { return metricValue(t, "kaddons_addon_reconciles_total", series) }).
		WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(reconciles))
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Objects()).To(Equal(inventory))
	g.Expect(readyCondition(&cr.Status.AddonStatus).Reason).To(Equal(addonsv1alpha1.ReasonReconciled))

	// The forged objects are the editor's: kaddons never writes or deletes them, and
	// deleting the add-on leaves them.
	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	expectGone(t, inventory)
	left := &corev1.ConfigMapList{}
	g.Expect(k8sClient.List(ctx, left, client.InNamespace(ns), client.MatchingLabels(labels))).To(Succeed())
	g.Expect(left.Items).To(HaveLen(forgedConfigMaps))
	for i := range left.Items {
		g.Expect(left.Items[i].Data["data"]).To(HaveLen(forgedBytes))
	}
	g.Expect(k8sClient.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels(labels))).To(Succeed())
}
