//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// TestAdoptKubeadmCoreDNS takes over kubeadm's CoreDNS, as a cluster admin would: kubeadm's
// exact objects (test/testdata/kubeadm, with an admin's Corefile edits) in kube-system,
// then the sample CoreDNS without adoption (nothing changes, the condition says why),
// then with adoption (Ready, the Corefile kept), then deleted with deletionPolicy Orphan
// (DNS keeps running).
func TestAdoptKubeadmCoreDNS(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "kube-system"
	kubeadmFile := filepath.Join(repoRoot, "test", "testdata", "kubeadm", "coredns-custom.yaml")
	sample := filepath.Join(repoRoot, "config", "samples", "addons_v1alpha1_coredns.yaml")
	t.Cleanup(func() {
		ensureSomeManager(t)
		_, _ = kubectl("delete", "-f", sample, "--ignore-not-found", "--timeout="+deleteTimeout.String())
		_, _ = kubectl("delete", "-f", kubeadmFile, "--ignore-not-found", "--timeout="+deleteTimeout.String())
		// The PodDisruptionBudget is kaddons' own, left running by deletionPolicy Orphan.
		_, _ = kubectl("delete", "poddisruptionbudget", "coredns", "-n", ns, "--ignore-not-found")
	})
	dumpOnFailure(t)

	_, err := kubectl("create", "-f", kubeadmFile, "--field-manager=kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	// kube-controller-manager keeps writing the Deployment's status, so what must not move
	// is the spec (generation), the labels and the set of field managers: kaddons never
	// appears. The managers are compared as a set: the API server orders them by time and
	// then by name, so a later status write can swap kubeadm and kube-controller-manager.
	state := func(kind string) string {
		out, err := kubectl("get", "-n", ns, kind, "-o",
			`jsonpath={.metadata.generation}|{.metadata.labels}|{range .metadata.managedFields[*]}{.manager},{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		head, list := out, ""
		if i := strings.LastIndex(out, "|"); i >= 0 {
			head, list = out[:i], out[i+1:]
		}
		managers := strings.Split(strings.TrimSuffix(list, ","), ",")
		slices.Sort(managers)
		return head + "|" + strings.Join(slices.Compact(managers), ",")
	}
	// Let kube-controller-manager write the Deployment's status first: its first write adds
	// its own field manager, which must not count as a change.
	g.Eventually(func(g Gomega) {
		out, err := kubectl("get", "-n", ns, "deployment/coredns", "-o",
			`jsonpath={.metadata.generation}={.status.observedGeneration}|{range .metadata.managedFields[*]}{.manager},{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		generations, managers, _ := strings.Cut(out, "|")
		generation, observed, _ := strings.Cut(generations, "=")
		g.Expect(observed).To(Equal(generation), "the Deployment's status is not written yet")
		g.Expect(managers).To(ContainSubstring("kube-controller-manager,"))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	kinds := []string{"deployment/coredns", "configmap/coredns", "service/kube-dns", "serviceaccount/coredns"}
	before := map[string]string{}
	for _, kind := range kinds {
		before[kind] = state(kind)
	}
	// Without adoption: nothing is written, and the add-on says why.
	_, err = kubectl("apply", "-f", sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, ns)
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonAdoptionRequired))
		g.Expect(ready.Message).To(ContainSubstring("Deployment kube-system/coredns"))
		g.Expect(ready.Message).To(ContainSubstring("ClusterRole system:coredns"))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	for _, kind := range kinds {
		g.Expect(state(kind)).To(Equal(before[kind]), "%s was written without adoption", kind)
		g.Expect(state(kind)).NotTo(ContainSubstring("kaddons"))
	}

	// With adoption, at kubeadm's version: Ready, and the admin's Corefile kept.
	_, err = kubectl("patch", "coredns", coreDNSName, "-n", ns, "--type=merge",
		"-p", `{"spec":{"adopt":"IfUnmanaged","version":"1.14.6","deletionPolicy":"Orphan"}}`)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kubectl("wait", "--for=condition=Ready", "coredns/"+coreDNSName, "-n", ns, "--timeout="+readyTimeout.String())
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, cm)).To(Succeed())
	g.Expect(cm.Data["Corefile"]).To(ContainSubstring("10.0.0.1 example.internal"))
	g.Expect(cm.Data["Corefile"]).To(ContainSubstring("example.internal:53 {"))
	g.Expect(cm.Labels).To(HaveKeyWithValue(ssa.LabelName, coreDNSName))
	cr := getCoreDNS(g, ns)
	g.Expect(cr.Status.Adopted).NotTo(BeEmpty())
	managers := make([]string, 0, len(cr.Status.Adopted))
	for _, a := range cr.Status.Adopted {
		managers = append(managers, a.Kind+":"+strings.Join(a.FieldManagers, ","))
	}
	g.Expect(managers).To(ContainElement(And(HavePrefix("Deployment:"), ContainSubstring("kubeadm"))), "the adopted Deployment was kubeadm's")
	g.Expect(managers).To(ContainElement(And(HavePrefix("ConfigMap:"), ContainSubstring("kubeadm"))), "the adopted ConfigMap was kubeadm's")

	// Deleted with Orphan: DNS keeps running, unlabelled.
	_, err = kubectl("delete", "-f", sample, "--timeout="+deleteTimeout.String())
	g.Expect(err).NotTo(HaveOccurred())
	deploy := getDeployment(g, ns)
	g.Expect(deploy.Labels).NotTo(HaveKey(ssa.LabelName))
	expectRolledOut(g, deploy, 2)
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kube-dns"}, &corev1.Service{})).To(Succeed())
}
