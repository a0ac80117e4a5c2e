//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// unreadyVersion is the test-only package of testdata/packages whose pods kwok never
// makes ready.
const unreadyVersion = "1.12.1-unready"

// kwokCustomStatus makes kwok leave a pod's status to the test.
const kwokCustomStatus = "kwok.x-k8s.io/status"

// TestUpgradeRollback upgrades to a version whose pods never become ready: after the
// upgrade timeout kaddons rolls back to the last healthy version, which is Ready again,
// and says so in Degraded and in an event.
func TestUpgradeRollback(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "rollback")
	_, err := kubectlIn(coreDNSManifest(ns, newVersion, 2), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	cr := expectReady(t, ns)
	g.Expect(cr.Status.LastHealthyVersion).To(Equal(newVersion))

	recorder := recordReady(t, ns)
	_, err = kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"version":%q,"upgrade":{"timeout":"15s"}}}`, unreadyVersion))
	g.Expect(err).NotTo(HaveOccurred())

	// The new version is applied: its pods exist and never become ready.
	g.Eventually(func(g Gomega) {
		d := getDeployment(g, ns)
		g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue(kwokCustomStatus, "custom"))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// After the timeout: rolled back, Ready again on the old version, Degraded says why.
	g.Eventually(func(g Gomega) {
		cr = getCoreDNS(g, ns)
		degraded := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
		g.Expect(degraded).NotTo(BeNil())
		g.Expect(degraded.Reason).To(Equal(addonsv1alpha1.ReasonUpgradeFailed))
		g.Expect(degraded.Message).To(ContainSubstring("upgrade to " + unreadyVersion))
		g.Expect(degraded.Message).To(ContainSubstring("rolled back to " + newVersion))
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}).WithTimeout(readyTimeout + 15*time.Second).WithPolling(poll).Should(Succeed())
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	g.Expect(cr.Status.Upgrade.FailedVersion).To(Equal(unreadyVersion))

	d := getDeployment(g, ns)
	g.Expect(d.Spec.Template.Annotations).NotTo(HaveKey(kwokCustomStatus))
	g.Eventually(func(g Gomega) { expectRolledOut(g, getDeployment(g, ns), 2) }).
		WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// Ready went False while the failing version rolled out.
	sawNotReady := false
	for _, o := range recorder.observations() {
		sawNotReady = sawNotReady || (o.status == metav1.ConditionFalse && o.reason == addonsv1alpha1.ReasonChildrenNotReady)
	}
	g.Expect(sawNotReady).To(BeTrue(), "Ready never went False/ChildrenNotReady; saw %v", recorder.observations())
	events := &corev1.EventList{}
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.List(ctx, events, client.InNamespace(ns))).To(Succeed())
	g.Expect(events.Items).To(ContainElement(HaveField("Reason", "RolledBack")))
}

// TestPodsStopBeingReady makes kwok report the CoreDNS pods not ready: the add-on turns
// Ready=False and Degraded, naming the Deployment, and recovers when the pods do.
func TestPodsStopBeingReady(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "unready")
	_, err := kubectlIn(coreDNSManifest(ns, newVersion, 2), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	expectReady(t, ns)

	setPodsReady(t, ns, false)
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, ns)
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
		g.Expect(ready.Message).To(ContainSubstring("Deployment " + ns + "/coredns"))
		g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)).To(BeTrue())
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	setPodsReady(t, ns, true)
	cr := expectReady(t, ns)
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)).To(BeFalse())
}

// setPodsReady takes the CoreDNS pods in ns away from kwok and writes their Ready
// condition, as a kubelet would when a readiness probe fails or passes again.
func setPodsReady(t *testing.T, ns string, ready bool) {
	t.Helper()
	g := NewWithT(t)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	g.Eventually(func(g Gomega) {
		ctx, cancel := background()
		defer cancel()
		pods := &corev1.PodList{}
		g.Expect(k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"k8s-app": "kube-dns"})).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Annotations[kwokCustomStatus] != "custom" {
				patch := client.MergeFrom(pod.DeepCopy())
				metav1.SetMetaDataAnnotation(&pod.ObjectMeta, kwokCustomStatus, "custom")
				g.Expect(k8sClient.Patch(ctx, pod, patch)).To(Succeed())
			}
			now := metav1.Now()
			for j := range pod.Status.Conditions {
				c := &pod.Status.Conditions[j]
				if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
					c.Status, c.LastTransitionTime = status, now
				}
			}
			for j := range pod.Status.ContainerStatuses {
				pod.Status.ContainerStatuses[j].Ready = ready
			}
			g.Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		}
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
}

// TestChannelMove moves a channel under a live CoreDNS that follows it, the way an
// operator upgrade or a channels edit does: the manager notices the file change by
// itself, the add-on moves up, and when the channel moves back down it stays where it is
// and says why.
func TestChannelMove(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "channel")
	channel := "move-" + ns
	writeChannel := func(version string) {
		t.Helper()
		path := filepath.Join(channelsDir, channel)
		data := fmt.Sprintf("manifests:\n- name: coredns\n  version: %s\n", version)
		g.Expect(os.WriteFile(path+".tmp", []byte(data), 0o600)).To(Succeed())
		g.Expect(os.Rename(path+".tmp", path)).To(Succeed())
	}
	writeChannel(oldVersion)
	t.Cleanup(func() { _ = os.Remove(filepath.Join(channelsDir, channel)) })
	_, err := kubectlIn(fmt.Sprintf("apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata:\n  name: %s\n  namespace: %s\n"+
		"spec:\n  channel: %s\n  replicas: 1\n", coreDNSName, ns, channel), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	cr := expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))

	// Up: applied and Ready on the new version, without any change to the add-on.
	writeChannel(newVersion)
	g.Eventually(func(g Gomega) {
		cr = getCoreDNS(g, ns)
		g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
		g.Expect(cr.Status.LastHealthyVersion).To(Equal(newVersion))
		expectRolledOut(g, getDeployment(g, ns), 1)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	g.Expect(getDeployment(g, ns).Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + newVersion))

	// Down: refused; it keeps serving the version it runs, Ready, and the reason says why.
	writeChannel(oldVersion)
	g.Eventually(func(g Gomega) {
		cr = getCoreDNS(g, ns)
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonDowngradeRefused), ready.Message)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ready.Message).To(ContainSubstring("lists coredns " + oldVersion + ", older than the running " + newVersion))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	g.Expect(getDeployment(g, ns).Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + newVersion))
}
