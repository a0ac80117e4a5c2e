package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// kubeadmVersion is the CoreDNS version kubeadm v1.37.2 installs
// (test/testdata/kubeadm/coredns.yaml), shipped as a package so adoption is no downgrade.
const kubeadmVersion = "1.14.6"

// kubeadmObjects creates, as field manager kubeadm, the objects of a file under
// test/testdata/kubeadm, moved from kube-system to ns. Their cluster-scoped names get the
// -<ns> suffix that kaddons gives a CoreDNS outside kube-system, so that ns stands in for
// kube-system exactly.
func kubeadmObjects(t *testing.T, file, ns string) []*unstructured.Unstructured {
	t.Helper()
	return kubeadmObjectsEdited(t, file, ns, func(*unstructured.Unstructured) {})
}

// kubeadmObjectsEdited is kubeadmObjects with edit applied to each object before it is
// created, such as an older CoreDNS image.
func kubeadmObjectsEdited(t *testing.T, file, ns string, edit func(*unstructured.Unstructured)) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "test", "testdata", "kubeadm", file))
	if err != nil {
		t.Fatal(err)
	}
	var created []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
			u.SetName(u.GetName() + "-" + ns)
			if u.GetKind() == "ClusterRoleBinding" {
				_ = unstructured.SetNestedField(u.Object, "system:coredns-"+ns, "roleRef", "name")
				_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}}, "subjects")
			}
		default:
			u.SetNamespace(ns)
		}
		edit(u)
		if err := k8sClient.Create(context.Background(), u, client.FieldOwner("kubeadm")); err != nil {
			t.Fatalf("creating kubeadm's %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		created = append(created, u)
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })
	}
	return created
}

func TestAdoptKubeadmCoreDNS(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	existing := kubeadmObjects(t, "coredns-custom.yaml", ns)
	g.Expect(existing).To(HaveLen(6), "kubeadm creates a Deployment, ConfigMap, Service, ServiceAccount, ClusterRole and binding")

	// Without adoption nothing changes, and the condition says why.
	cr := newCoreDNS(ns, kubeadmVersion)
	cr.Spec.ClusterIP = "10.96.0.10"
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonAdoptionRequired)
	g.Expect(ready.Message).To(ContainSubstring("ConfigMap " + ns + "/coredns"))
	g.Expect(ready.Message).To(ContainSubstring("ClusterRole system:coredns-" + ns))
	expectUntouched(t, existing)

	// With adoption the objects are kaddons', in place, and the admin's blocks survive.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged })
	waitApplied(t, cr, kubeadmVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: coreDNSConfigMap}, cm)).To(Succeed())
	g.Expect(cm.Data["Corefile"]).To(ContainSubstring("hosts {"))
	g.Expect(cm.Data["Corefile"]).To(ContainSubstring("10.0.0.1 example.internal"))
	g.Expect(cm.Data["Corefile"]).To(ContainSubstring("example.internal:53 {"))
	g.Expect(cm.Labels).To(HaveKeyWithValue(ssa.LabelName, cr.Name))
	getAddon(g, cr)
	g.Expect(cr.Status.Adopted).To(HaveLen(len(existing)), "every object kubeadm created is recorded as adopted")
	for _, a := range cr.Status.Adopted {
		// A ServiceAccount with nothing but a name has no managed fields to record.
		if a.Kind != "ServiceAccount" {
			g.Expect(a.FieldManagers).To(ContainElement("kubeadm"), "%s was kubeadm's", a.String())
		}
	}
	for _, o := range existing {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
		g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%s %s was re-created", o.GetKind(), o.GetName())
	}

	// From now on the adopted Corefile is the desired one: kaddons recorded it on the
	// ConfigMap, and an edit of the data is drift, undone (changes go through
	// spec.corefile).
	g.Expect(cm.Annotations).To(HaveKey(engine.AnnotationAdoptedConfig))
	adopted := cm.Data["Corefile"]
	cm.Data["Corefile"] = strings.Replace(adopted, "10.0.0.1 example.internal", "10.0.0.2 example.internal", 1)
	g.Expect(k8sClient.Update(ctx, cm, client.FieldOwner("admin"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		g.Expect(cm.Data["Corefile"]).To(Equal(adopted))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

func TestAdoptKubeadmCoreDNSWithARemovedPlugin(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	existing := kubeadmObjects(t, "coredns-removed-plugin.yaml", ns)

	cr := newCoreDNS(ns, kubeadmVersion)
	cr.Spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonCorefileMigrationFailed)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Message).To(ContainSubstring(`Plugin "proxy"`))
	g.Expect(ready.Message).To(ContainSubstring("nothing was changed"))
	expectUntouched(t, existing)
	g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())
}
