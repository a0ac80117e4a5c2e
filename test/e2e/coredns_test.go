//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Names in the CoreDNS packages (channels/packages/coredns).
const (
	coreDNSImage     = "registry.k8s.io/coredns/coredns:v"
	coreDNSContainer = "coredns"
	coreDNSName      = "coredns"
	oldVersion       = "1.11.3"
	newVersion       = "1.12.1"
)

// TestSampleCreateReady applies the shipped sample and follows it to Ready: the add-on
// turns Ready only after its Deployment's pods are really available.
func TestSampleCreateReady(t *testing.T) {
	g := NewWithT(t)
	const ns = "kube-system"
	sample := filepath.Join(repoRoot, "config", "samples", "addons_v1alpha1_coredns.yaml")
	t.Cleanup(func() {
		// The sample's children include the cluster-wide system:coredns RBAC.
		ensureSomeManager(t)
		if _, err := kubectl("delete", "-f", sample, "--ignore-not-found", "--timeout="+deleteTimeout.String()); err != nil {
			t.Errorf("deleting the sample: %v", err)
		}
	})
	dumpOnFailure(t)
	recorder := recordReady(t, ns)

	_, err := kubectl("apply", "-f", sample)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kubectl("wait", "--for=condition=Ready", "coredns/"+coreDNSName, "-n", ns, "--timeout="+readyTimeout.String())
	g.Expect(err).NotTo(HaveOccurred())

	cr := expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion), "the stable channel's version")
	deploy := getDeployment(g, ns)
	expectRolledOut(g, deploy, 2)
	g.Expect(containerImage(deploy)).To(Equal(coreDNSImage + newVersion))

	// Ready waited for the pods: it was False (children not ready) first, and turned True
	// no earlier than the Deployment became Available.
	g.Eventually(func(g Gomega) {
		expectNotReadyThenReady(g, recorder, cr.Generation, addonsv1alpha1.ReasonChildrenNotReady)
	}).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())
	t.Logf("Ready as watched: %v", recorder.observations())
	ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	var available *appsv1.DeploymentCondition
	for i, c := range deploy.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			available = &deploy.Status.Conditions[i]
		}
	}
	g.Expect(available).NotTo(BeNil(), "the Deployment has no Available condition")
	g.Expect(ready.LastTransitionTime.Before(&available.LastTransitionTime)).To(BeFalse(),
		"Ready turned True at %s, before the Deployment was Available at %s", ready.LastTransitionTime, available.LastTransitionTime)

	// The Service has the sample's fixed cluster IP.
	out, err := kubectl("get", "service", "kube-dns", "-n", ns, "-o", "jsonpath={.spec.clusterIP}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("10.96.0.10"))

	// kubectl shows the printer columns.
	out, err = kubectl("get", "coredns", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2), out)
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "VERSION", "READY", "STATUS", "AGE"}), out)
	g.Expect(strings.Fields(lines[1])[:3]).To(Equal([]string{coreDNSName, newVersion, "True"}), out)
	g.Expect(lines[1]).To(ContainSubstring("is ready"), out)
	// The category lists it too.
	out, err = kubectl("get", "addons", "-A")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring(coreDNSName))

	// Deleting the sample removes every child, its cluster-scoped RBAC (named as
	// packaged in kube-system) included.
	g.Expect(cr.Status.Inventory.Objects()).To(ContainElements(
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "system:coredns"},
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding", Name: "system:coredns"},
	))
	_, err = kubectl("delete", "-f", sample, "--timeout="+deleteTimeout.String())
	g.Expect(err).NotTo(HaveOccurred())
	expectGone(t, cr.Status.Inventory.Objects())
}

// TestUpgrade changes spec.version and follows the rollout: the Deployment gets the new
// image, Ready goes False while it rolls and True once it is done.
func TestUpgrade(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "upgrade")
	_, err := kubectlIn(coreDNSManifest(ns, oldVersion, 2), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	cr := expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	before := getDeployment(g, ns)
	g.Expect(containerImage(before)).To(Equal(coreDNSImage + oldVersion))

	recorder := recordReady(t, ns)
	_, err = kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"version":%q}}`, newVersion))
	g.Expect(err).NotTo(HaveOccurred())

	cr = expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	g.Eventually(func(g Gomega) {
		expectNotReadyThenReady(g, recorder, cr.Generation, addonsv1alpha1.ReasonChildrenNotReady)
	}).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())
	t.Logf("Ready as watched: %v", recorder.observations())

	after := getDeployment(g, ns)
	g.Expect(after.UID).To(Equal(before.UID), "the Deployment was replaced instead of rolled")
	g.Expect(containerImage(after)).To(Equal(coreDNSImage + newVersion))
	g.Expect(after.Annotations["deployment.kubernetes.io/revision"]).NotTo(Equal(before.Annotations["deployment.kubernetes.io/revision"]),
		"the Deployment did not roll out a new revision")
	expectRolledOut(g, after, 2)
}

// TestDrift changes the children behind kaddons' back: a deleted Deployment comes back,
// a scaled one is scaled back to the add-on's replicas.
func TestDrift(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "drift")
	_, err := kubectlIn(coreDNSManifest(ns, newVersion, 3), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	expectReady(t, ns)
	original := getDeployment(g, ns)

	_, err = kubectl("delete", "deployment/"+coreDNSName, "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		d := getDeployment(g, ns)
		g.Expect(d.UID).NotTo(Equal(original.UID), "not re-created yet")
		expectRolledOut(g, d, 3)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the deleted Deployment was not restored")
	expectReady(t, ns)

	_, err = kubectl("scale", "deployment/"+coreDNSName, "-n", ns, "--replicas=5")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		d := getDeployment(g, ns)
		g.Expect(d.Generation).To(BeNumerically(">", 1), "the scale has not landed yet")
		expectRolledOut(g, d, 3)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the scaled Deployment was not scaled back")
	expectReady(t, ns)
}

// TestOperatorRestart kills the manager (SIGKILL) in the middle of an upgrade and starts it
// again: it converges, with neither duplicates nor orphans.
func TestOperatorRestart(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "restart")
	t.Cleanup(func() {
		if err := suiteManager.ensureRunning(); err != nil {
			t.Errorf("restarting the manager: %v", err)
		}
	})
	_, err := kubectlIn(coreDNSManifest(ns, oldVersion, 2), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	expectReady(t, ns)

	_, err = kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"version":%q}}`, newVersion))
	g.Expect(err).NotTo(HaveOccurred())
	// Kill the manager as soon as it has started the upgrade: the new template is applied
	// but the rollout is still going.
	g.Eventually(func(g Gomega) {
		g.Expect(containerImage(getDeployment(g, ns))).To(Equal(coreDNSImage + newVersion))
	}).WithTimeout(readyTimeout).WithPolling(50 * time.Millisecond).Should(Succeed())
	suiteManager.kill()
	d := getDeployment(g, ns)
	cr := getCoreDNS(g, ns)
	t.Logf("killed the manager with the rollout at %d/%d updated, %d available; CR status: %s",
		d.Status.UpdatedReplicas, *d.Spec.Replicas, d.Status.AvailableReplicas, readySummary(cr))

	g.Expect(suiteManager.start()).To(Succeed())
	cr = expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	d = getDeployment(g, ns)
	g.Expect(containerImage(d)).To(Equal(coreDNSImage + newVersion))
	expectRolledOut(g, d, 2)

	// One object of each packaged kind, named as expected.
	counts := map[string]int{}
	for _, ref := range cr.Status.Inventory.Objects() {
		counts[ref.Kind]++
	}
	g.Expect(counts).To(Equal(map[string]int{
		"ServiceAccount": 1, "ConfigMap": 1, "Service": 1, "Deployment": 1, "PodDisruptionBudget": 1,
		"ClusterRole": 1, "ClusterRoleBinding": 1,
	}), "inventory %v", cr.Status.Inventory.Objects())
	g.Eventually(expectInventoryConsistent).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
}

// TestDelete deletes an add-on outside kube-system: every child goes, the cluster-scoped
// RBAC (named system:coredns-<namespace>) included.
func TestDelete(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "delete")
	_, err := kubectlIn(coreDNSManifest(ns, newVersion, 1), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	cr := expectReady(t, ns)
	g.Expect(cr.Status.Inventory.Objects()).To(ContainElements(
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "system:coredns-" + ns},
		addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding", Name: "system:coredns-" + ns},
	))
	for _, ref := range cr.Status.Inventory.Objects() {
		found, err := exists(refFromInventory(ref))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue(), "%s is in the inventory but does not exist", ref)
	}

	_, err = kubectl("delete", "coredns/"+coreDNSName, "-n", ns, "--timeout="+deleteTimeout.String())
	g.Expect(err).NotTo(HaveOccurred())
	expectGone(t, cr.Status.Inventory.Objects())
	g.Expect(listManaged(g, client.MatchingLabels{labelNamespace: ns, labelName: coreDNSName})).To(BeEmpty(),
		"objects still labelled as the deleted add-on's")
}

// TestLeaderElection runs two managers with leader election: only one leads; when it is
// killed, the other takes over and reconciles.
func TestLeaderElection(t *testing.T) {
	if !managerHasFlag("leader-election-namespace") {
		t.Fatal("the manager has no --leader-election-namespace flag: outside a cluster controller-runtime " +
			"cannot find a namespace for the leader election Lease (it reads the in-cluster service-account " +
			"namespace file), so --leader-elect cannot work when the manager runs on the host")
	}
	g := NewWithT(t)
	leaseID := fmt.Sprintf("e2e-%d.addons.kaddons.dev", time.Now().UnixNano())
	args := []string{"--leader-elect=true", "--leader-election-namespace=" + operatorNamespace, "--leader-election-id=" + leaseID}
	a := newManager("manager-le-a", args...)
	b := newManager("manager-le-b", args...)
	// Cleanups run last-in first-out: this one runs after the namespace's, which needs a
	// leader to release the add-ons' finalizers.
	t.Cleanup(func() {
		a.stop()
		b.stop()
		if err := suiteManager.ensureRunning(); err != nil {
			t.Errorf("restarting the suite's manager: %v", err)
		}
	})
	suiteManager.stop()
	ns := newNamespace(t, "leader")
	g.Expect(a.start()).To(Succeed())
	g.Expect(b.start()).To(Succeed())

	// client-go's leader election logs this line (through the manager's logger) once it
	// holds the Lease.
	const acquired = "successfully acquired lease"
	lock := operatorNamespace + "/" + leaseID
	var leader, follower *managerProcess
	g.Eventually(func(g Gomega) {
		lease := getLease(g, leaseID)
		g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Not(BeEmpty())))
		aLeads, bLeads := a.logHasLine(acquired, lock), b.logHasLine(acquired, lock)
		g.Expect(aLeads).NotTo(Equal(bLeads), "exactly one manager must have acquired the lease (a: %v, b: %v)", aLeads, bLeads)
		leader, follower = a, b
		if bLeads {
			leader, follower = b, a
		}
	}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
	holder := *getLease(g, leaseID).Spec.HolderIdentity
	t.Logf("%s leads as %s; killing it", leader.name, holder)

	leader.kill()
	_, err := kubectlIn(coreDNSManifest(ns, newVersion, 1), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(follower.logHasLine(acquired, lock)).To(BeTrue(), "%s has not acquired the lease", follower.name)
		g.Expect(getLease(g, leaseID).Spec.HolderIdentity).To(HaveValue(Not(Equal(holder))))
	}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
	expectReady(t, ns)
	g.Expect(follower.alive()).To(BeTrue())
}

// expectGone waits until none of refs exists.
func expectGone(t *testing.T, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var left []string
		for _, r := range refs {
			found, err := exists(refFromInventory(r))
			g.Expect(err).NotTo(HaveOccurred())
			if found {
				left = append(left, r.String())
			}
		}
		g.Expect(left).To(BeEmpty(), "children still present")
	}).WithTimeout(deleteTimeout).WithPolling(poll).Should(Succeed())
}

// getLease reads the leader election Lease.
func getLease(g Gomega, name string) *coordinationv1.Lease {
	ctx, cancel := background()
	defer cancel()
	lease := &coordinationv1.Lease{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: operatorNamespace, Name: name}, lease)).To(Succeed())
	return lease
}

// readySummary formats the add-on's Ready condition for logs.
func readySummary(cr *addonsv1alpha1.CoreDNS) string {
	c := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	if c == nil {
		return "no Ready condition"
	}
	return fmt.Sprintf("generation %d, Ready=%s %s (observedGeneration %d): %s", cr.Generation, c.Status, c.Reason,
		c.ObservedGeneration, c.Message)
}
