//go:build e2e && faults

package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// crashRounds is how many times TestFaultManagerKilled kills the manager.
const crashRounds = 20

// TestFaultManagerKilled kills the manager (SIGKILL) 20 times at seeded random points
// between its writes of the children and its status patch, while add-ons are created and
// changed, sometimes changing the add-on again while the manager is down. Versions flip
// between the test package 1.11.3-extra and 1.12.1, so an object created just before a
// crash may leave the manifests before the inventory ever recorded it. Afterwards no
// object is orphaned or duplicated and every inventory matches the cluster.
func TestFaultManagerKilled(t *testing.T) {
	g := NewWithT(t)
	m, proxy := proxiedManager(t, "manager-crash", 20)
	run := newFaultRun(t, "crash", 6)
	decoys := plantDecoys(t, run.namespaces[0])
	rng := rand.New(rand.NewPCG(20, 26))

	run.createAddons(t, run.namespaces[:3], newVersion)
	run.expectAllReady(t, 3)
	created := 3

	var mu sync.Mutex
	target, writes := "", 0
	proxy.setOnWrite(func(w proxyWrite) {
		mu.Lock()
		defer mu.Unlock()
		if target != "" && isChildWrite(w) && strings.Contains(w.object, target) {
			writes++
		}
	})
	flip := func(version string) string {
		if version == extraVersion {
			return newVersion
		}
		return extraVersion
	}
	for round := range crashRounds {
		var ns, change string
		if created < len(run.namespaces) && rng.IntN(3) == 0 {
			ns = run.namespaces[created]
			created++
			version := []string{extraVersion, newVersion}[rng.IntN(2)]
			change = "create at " + version
			mu.Lock()
			target, writes = ns, 0
			mu.Unlock()
			run.createAddons(t, []string{ns}, version)
		} else {
			ns = run.namespaces[rng.IntN(created)]
			cr := getCoreDNS(g, ns)
			patch := fmt.Sprintf(`{"spec":{"version":%q}}`, flip(cr.Spec.Version))
			change = "version " + flip(cr.Spec.Version)
			if rng.IntN(3) == 0 {
				replicas := 3 - int(ptr.Deref(cr.Spec.Replicas, 1))
				patch, change = fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas), fmt.Sprintf("replicas %d", replicas)
			}
			mu.Lock()
			target, writes = ns, 0
			mu.Unlock()
			_, err := kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge", "-p", patch)
			g.Expect(err).NotTo(HaveOccurred())
		}
		// Kill after the k-th child write of this change, plus a random delay: between the
		// first write and the status patch, or (for a change that writes fewer objects)
		// a moment after.
		k := 1 + rng.IntN(3)
		delay := time.Duration(rng.Int64N(int64(150 * time.Millisecond)))
		deadline := time.Now().Add(8 * time.Second)
		for {
			mu.Lock()
			n := writes
			mu.Unlock()
			if n >= k || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(delay)
		m.kill()
		mu.Lock()
		n := writes
		target = ""
		mu.Unlock()
		if rng.IntN(2) == 0 {
			cr := getCoreDNS(g, ns)
			_, err := kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge",
				"-p", fmt.Sprintf(`{"spec":{"version":%q}}`, flip(cr.Spec.Version)))
			g.Expect(err).NotTo(HaveOccurred())
			change += ", then version " + flip(cr.Spec.Version) + " while down"
		}
		t.Logf("round %d: %s %s; killed after %d child writes (+%s)", round+1, ns, change, n, delay.Round(time.Millisecond))
		g.Expect(m.start()).To(Succeed())
	}

	run.expectAllReady(t, created)
	g.Eventually(expectInventoryConsistent).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	expectDecoysIntact(g, decoys)
	expectStable(t, func(g Gomega) rvSnapshot { return decoysRVs(g, decoys, run.snapshotChildren(g)) })
}

// TestFaultDeletedWhileManagerDown deletes an add-on while no manager runs: the finalizer
// holds it and every child, and when the manager comes back it deletes them all, the
// cluster-scoped ClusterRole and ClusterRoleBinding included. Another add-on and the
// decoys are left alone: not one of their objects is written.
func TestFaultDeletedWhileManagerDown(t *testing.T) {
	g := NewWithT(t)
	g.Expect(suiteManager.ensureRunning()).To(Succeed())
	run := newFaultRun(t, "down", 2)
	deleted, bystander := run.namespaces[0], run.namespaces[1]
	decoys := plantDecoys(t, deleted)
	run.createAddons(t, run.namespaces, newVersion)
	run.expectAllReady(t, 2)
	cr := getCoreDNS(g, deleted)
	inventory := cr.Status.Inventory.Objects()
	g.Expect(inventory).To(ContainElements(
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "system:coredns-" + deleted},
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding", Name: "system:coredns-" + deleted},
	))
	untouched := func(g Gomega) rvSnapshot {
		snap := rvSnapshot{}
		ctx, cancel := background()
		defer cancel()
		other := &addonsv1alpha1.CoreDNS{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: bystander, Name: coreDNSName}, other)).To(Succeed())
		snap["CoreDNS "+bystander] = other.ResourceVersion
		for _, ref := range other.Status.Inventory.Objects() {
			snap[ref.String()] = resourceVersionOf(g, refFromInventory(ref))
		}
		return decoysRVs(g, decoys, snap)
	}
	before := untouched(g)

	suiteManager.kill()
	_, err := kubectl("delete", "coredns/"+coreDNSName, "-n", deleted, "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	cr = getCoreDNS(g, deleted)
	g.Expect(cr.DeletionTimestamp).NotTo(BeNil())
	g.Expect(cr.Finalizers).To(ContainElement("addons.kaddons.dev/finalizer"))
	for _, ref := range inventory {
		found, err := exists(refFromInventory(ref))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue(), "%s went while no manager ran", ref)
	}

	g.Expect(suiteManager.start()).To(Succeed())
	g.Eventually(func() bool {
		ctx, cancel := background()
		defer cancel()
		return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: deleted, Name: coreDNSName}, &addonsv1alpha1.CoreDNS{}))
	}).WithTimeout(deleteTimeout).WithPolling(poll).Should(BeTrue(), "the add-on deleted while the manager was down is still there")
	expectGone(t, inventory)
	g.Expect(listManaged(g, client.MatchingLabels{labelNamespace: deleted, labelName: coreDNSName})).To(BeEmpty())

	expectDecoysIntact(g, decoys)
	g.Expect(untouched(g)).To(Equal(before), "the restart or the deletion wrote the other add-on or the decoys")
	expectStable(t, untouched)
}

// foreignFinalizer is the finalizer TestFaultForeignFinalizer puts on a child, as another
// controller would.
const foreignFinalizer = "e2e.kaddons.dev/hold"

// TestFaultForeignFinalizer holds a child of a deleted add-on with another controller's
// finalizer: the add-on's Ready condition and a DeletionBlocked event name the child and
// the finalizer, deletion waits (nothing is written in the meantime), the finalizer is
// never removed by kaddons, and deletion finishes once the test removes it.
func TestFaultForeignFinalizer(t *testing.T) {
	g := NewWithT(t)
	g.Expect(suiteManager.ensureRunning()).To(Succeed())
	run := newFaultRun(t, "finalizer", 2)
	held := run.namespaces[0]
	decoys := plantDecoys(t, held)
	run.createAddons(t, run.namespaces, newVersion)
	run.expectAllReady(t, 2)
	inventory := getCoreDNS(g, held).Status.Inventory.Objects()

	child := objectRef{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace: held, name: coreDNSName}
	_, err := kubectl("patch", "configmap/"+coreDNSName, "-n", held, "--type=merge",
		"-p", fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, foreignFinalizer))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_, _ = kubectl("patch", "configmap/"+coreDNSName, "-n", held, "--type=json",
			"-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
	})
	bystanderBefore := run.snapshotChildren(g)
	for key := range bystanderBefore {
		if strings.Contains(key, held) {
			delete(bystanderBefore, key)
		}
	}

	_, err = kubectl("delete", "coredns/"+coreDNSName, "-n", held, "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	blocked := "ConfigMap " + held + "/" + coreDNSName
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, held)
		ready := findReady(cr)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonDeleting), readySummary(cr))
		g.Expect(ready.Message).To(And(ContainSubstring(blocked), ContainSubstring(foreignFinalizer)), readySummary(cr))
		events := &corev1.EventList{}
		ctx, cancel := background()
		defer cancel()
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(held))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", "DeletionBlocked"), HaveField("Message", ContainSubstring(blocked)))))
	}).WithTimeout(deleteTimeout).WithPolling(poll).Should(Succeed())
	// The later stages went; the held child's stage waits.
	for _, ref := range inventory {
		if ref.Kind == "Deployment" || ref.Kind == "Service" || ref.Kind == "PodDisruptionBudget" {
			found, err := exists(refFromInventory(ref))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeFalse(), "%s, of a later stage than the held ConfigMap, is still there", ref)
		}
	}

	// It waits, and writes nothing: neither the held child nor the add-on changes.
	heldSnapshot := func(g Gomega) rvSnapshot {
		cr := getCoreDNS(g, held)
		return rvSnapshot{"CoreDNS " + held: cr.ResourceVersion, child.String(): resourceVersionOf(g, child)}
	}
	expectStable(t, heldSnapshot)
	cm := &corev1.ConfigMap{}
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: held, Name: coreDNSName}, cm)).To(Succeed())
	g.Expect(cm.Finalizers).To(Equal([]string{foreignFinalizer}), "the foreign finalizer was touched")
	g.Expect(cm.DeletionTimestamp).NotTo(BeNil())
	g.Expect(getCoreDNS(g, held).Finalizers).To(ContainElement("addons.kaddons.dev/finalizer"))

	_, err = kubectl("patch", "configmap/"+coreDNSName, "-n", held, "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		ctx, cancel := background()
		defer cancel()
		return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: held, Name: coreDNSName}, &addonsv1alpha1.CoreDNS{}))
	}).WithTimeout(deleteTimeout).WithPolling(poll).Should(BeTrue(), "deletion did not finish once the finalizer was removed")
	expectGone(t, inventory)
	expectDecoysIntact(g, decoys)
	g.Expect(run.snapshotChildren(g)).To(Equal(bystanderBefore), "the other add-on was written")
}

// findReady returns cr's Ready condition, or an empty one.
func findReady(cr *addonsv1alpha1.CoreDNS) metav1.Condition {
	for _, c := range cr.Status.Conditions {
		if c.Type == addonsv1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}
