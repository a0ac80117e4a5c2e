package ssa_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// TestTypedReadsServeWhatTheAPIServerServes applies the 7 objects of a CoreDNS package (a
// Deployment with server defaults and, once the test plays the controller-manager, a
// status, a Service with an int-or-string port, a ConfigMap, RBAC, a
// PodDisruptionBudget), reads each through TypedReads on a client that reads from the
// suite's cache, as the operator's manager does, and expects exactly the unstructured
// object the API server serves, managed fields aside: the plan compares against these, so
// a field lost or changed in the conversion would turn every no-op reconcile into an apply.
func TestTypedReadsServeWhatTheAPIServerServes(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	applied(t, ns, objects, nil)
	enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
	refs := refsOf(objects)
	g.Expect(refs).To(HaveLen(7))

	cached, err := client.New(cfg, client.Options{Scheme: enginetest.Scheme(),
		Cache: &client.CacheOptions{Reader: objectCache, Unstructured: true}})
	g.Expect(err).NotTo(HaveOccurred())
	reads := ssa.TypedReads(cached)
	kinds := map[string]bool{}
	for _, ref := range refs {
		kinds[ref.Kind] = true
		t.Run(ref.String(), func(t *testing.T) {
			g := NewWithT(t)
			g.Eventually(func(g Gomega) {
				want, err := liveObject(ref)
				g.Expect(err).NotTo(HaveOccurred())
				want.SetManagedFields(nil)
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(ref.GroupVersionKind())
				g.Expect(reads.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, got)).To(Succeed())
				g.Expect(equality.Semantic.DeepEqual(got.Object, want.Object)).To(BeTrue(),
					"typed read:\n%v\nAPI server:\n%v", got.Object, want.Object)
			}).WithTimeout(enginetest.EventuallyTimeout).WithPolling(enginetest.PollInterval).Should(Succeed())
		})
	}
	g.Expect(kinds).To(HaveKey("Deployment"))
	g.Expect(kinds).To(HaveKey("Service"))

	// A list gives the same items, each with its kind.
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("ServiceList")
	g.Expect(reads.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	g.Expect(list.Items[0].GetKind()).To(Equal("Service"))
	g.Expect(list.Items[0].GetName()).To(Equal("kube-dns"))
	ports, _, _ := unstructured.NestedSlice(list.Items[0].Object, "spec", "ports")
	g.Expect(ports).NotTo(BeEmpty())

	// A kind the scheme has no Go type for is read unstructured, as before.
	addon := &unstructured.Unstructured{}
	addon.SetGroupVersionKind(addonsv1alpha1.GroupVersion.WithKind("NoSuchKind"))
	err = reads.Get(ctx, owner(ns), addon)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("NoSuchKind"))
}
