package ssa_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Adoption: kaddons never writes an object it did not create (labels without its seal
// prove nothing) unless the request adopts unmanaged objects.

// preexisting creates objects without kaddons' labels and as another field manager, as
// another tool would have installed them, and returns them as created (UIDs and resource
// versions included).
func preexisting(t *testing.T, objects []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	created := make([]*unstructured.Unstructured, 0, len(objects))
	for _, o := range objects {
		u := o.DeepCopy()
		u.SetLabels(map[string]string{ssa.LabelManagedBy: "another-tool"})
		if err := k8sClient.Create(context.Background(), u, client.FieldOwner("another-tool")); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		created = append(created, u)
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })
	}
	return created
}

// expectAdoptionError checks that err is an *ssa.AdoptionError naming want and no other
// object, and asking for spec.adopt.
func expectAdoptionError(t *testing.T, err error, want ...addonsv1alpha1.ObjectReference) {
	t.Helper()
	g := NewWithT(t)
	var adoption *ssa.AdoptionError
	g.Expect(errors.As(err, &adoption)).To(BeTrue(), "%v", err)
	g.Expect(adoption.Refs).To(ConsistOf(want))
	for _, ref := range want {
		g.Expect(err.Error()).To(ContainSubstring(ref.String()), "the error names every existing object")
	}
	g.Expect(err.Error()).To(ContainSubstring("spec.adopt: IfUnmanaged"))
}

func TestNeverTakesOverWhatItDidNotCreate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	existing := preexisting(t, objects)
	g.Expect(existing).To(HaveLen(7))

	res, err := newManager().Apply(ctx, request(ns, objects))
	expectAdoptionError(t, err, refsOf(existing)...)
	g.Expect(res.Applied).To(BeEmpty())
	enginetest.ExpectUntouched(t, k8sClient, existing)

	// Deleting the add-on leaves all of them.
	held, err := newManager().DeleteInStages(ctx, refsOf(existing), testKind, owner(ns))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeEmpty())
	enginetest.ExpectUntouched(t, k8sClient, existing)
}

// TestCreateOnlyApplyStopsAtAnExistingObject has only the Deployment exist, unmanaged:
// the objects of the earlier stages are new, and their create-only applies create them;
// the Deployment's is refused by the API server, so nothing is written to it, and the
// error names it. What was created is the add-on's and goes with it.
func TestCreateOnlyApplyStopsAtAnExistingObject(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	var deployment []*unstructured.Unstructured
	for _, o := range objects {
		if o.GetKind() == "Deployment" {
			deployment = preexisting(t, []*unstructured.Unstructured{o})
		}
	}
	g.Expect(deployment).To(HaveLen(1))

	res, err := newManager().Apply(ctx, request(ns, objects))
	expectAdoptionError(t, err, ssa.RefOf(deployment[0]))
	g.Expect(err.Error()).NotTo(ContainSubstring("ConfigMap"), "only the Deployment exists")
	enginetest.ExpectUntouched(t, k8sClient, deployment)
	// The earlier stages were new: created, labelled, and in the inventory.
	inventory := withoutKind(res.Inventory, "Deployment")
	g.Expect(inventory).NotTo(BeEmpty())
	for ref := range res.Applied {
		g.Expect(ref.Kind).NotTo(Equal("Deployment"))
		g.Expect(inventory).To(ContainElement(ref))
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelNamespace, ns), "%s", ref)
	}

	held, err := newManager().DeleteInStages(ctx, res.Inventory, testKind, owner(ns))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeEmpty())
	expectGone(t, inventory)
	enginetest.ExpectUntouched(t, k8sClient, deployment)
}

// TestNeverTakesOverAnInventoriedObjectCreatedAgainByAnotherTool deletes one of an
// add-on's children out of band and has another tool create a ConfigMap of the same
// name: the inventory still lists it, but the object is not kaddons' any more. The next
// apply writes it create-only, finds it unmanaged, and asks for adoption: the other
// tool's ConfigMap is never written.
func TestNeverTakesOverAnInventoriedObjectCreatedAgainByAnotherTool(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	first := applied(t, ns, coreDNSObjects(t, ns, variant{}), nil)
	configMap := addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "coredns"}
	g.Expect(first.Inventory).To(ContainElement(configMap))

	live, err := liveObject(configMap)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8sClient.Delete(ctx, live)).To(Succeed())
	// The Manager's cache sees the deletion.
	g.Eventually(func() bool {
		return apierrors.IsNotFound(objectCache.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &corev1.ConfigMap{}))
	}).WithTimeout(enginetest.EventuallyTimeout).WithPolling(enginetest.PollInterval).Should(BeTrue())
	other := preexisting(t, []*unstructured.Unstructured{object(t, ns,
		`{apiVersion: v1, kind: ConfigMap, metadata: {name: coredns, namespace: `+ns+`}, data: {Corefile: ".:53 {}"}}`)})

	_, err = newManager().Apply(ctx, func() ssa.Request {
		req := request(ns, coreDNSObjects(t, ns, variant{}))
		req.Previous = first.Inventory
		return req
	}())
	expectAdoptionError(t, err, configMap)
	enginetest.ExpectUntouched(t, k8sClient, other)
}

// TestForgedLabelsAreNotOwnership has someone create, before the add-on exists, a
// ConfigMap with the name of the add-on's Corefile ConfigMap and the add-on's instance
// labels. Without kaddons' seal labels are not ownership: the apply asks for adoption,
// naming it, and never writes it.
func TestForgedLabelsAreNotOwnership(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns",
		Labels: ssa.InstanceLabels(testKind, owner(ns))},
		Data: map[string]string{"Corefile": ".:53 {\n    forward . 192.0.2.1\n}\n"}}
	g.Expect(k8sClient.Create(ctx, forged)).To(Succeed())
	// The cache holds it, as a stub: it carries kaddons' labels but no seal.
	g.Eventually(func() error {
		return objectCache.Get(ctx, client.ObjectKeyFromObject(forged), &corev1.ConfigMap{})
	}).WithTimeout(enginetest.EventuallyTimeout).WithPolling(enginetest.PollInterval).Should(Succeed())

	_, err := newManager().Apply(ctx, request(ns, coreDNSObjects(t, ns, variant{})))
	expectAdoptionError(t, err, addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "coredns"})
	live := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(forged), live)).To(Succeed())
	g.Expect(live.ResourceVersion).To(Equal(forged.ResourceVersion), "the forged ConfigMap was written")
	g.Expect(live.Data).To(Equal(forged.Data))
}

// TestAdoptIfUnmanaged takes over what another tool created: each object is kept (same
// UID), labelled, recorded with its former field managers, and deleted with the add-on.
func TestAdoptIfUnmanaged(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	existing := preexisting(t, objects)
	req := request(ns, objects)
	req.Adopt = true
	res, err := newManager().Apply(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(res.Inventory).To(HaveLen(len(existing)))
	g.Expect(res.Adopted).To(HaveLen(len(existing)))
	for _, a := range res.Adopted {
		g.Expect(a.FieldManagers).To(ContainElement("another-tool"), "%s records who managed it", a.String())
	}
	for _, o := range existing {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
		g.Expect(live.GetUID()).To(Equal(o.GetUID()), "adoption keeps the object, it does not re-create it")
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, "coredns"))
		g.Expect(live.GetAnnotations()).To(HaveKey(ssa.AnnotationSeal))
	}

	held, err := newManager().DeleteInStages(ctx, res.Inventory, testKind, owner(ns))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeEmpty())
	expectGone(t, refsOf(existing))
}

// inLaterWave puts the Service of coreDNSObjects in the wave "publish", after the default
// wave, as metrics-server's package does with its APIService, and returns it.
func inLaterWave(objects []*unstructured.Unstructured) *unstructured.Unstructured {
	for _, o := range objects {
		if o.GetKind() == "Service" {
			o.SetAnnotations(map[string]string{addonsv1alpha1.AnnotationWave: "publish", addonsv1alpha1.AnnotationWaveAfter: ssa.DefaultWave})
			return o
		}
	}
	return nil
}

// neverReady is a WaveReady that finds no wave healthy, as envtest, which runs no pods,
// finds a Deployment.
func neverReady(context.Context, []addonsv1alpha1.ObjectReference, map[addonsv1alpha1.ObjectReference]ssa.Written) (bool, string, error) {
	return false, "Deployment: Available: 0/2", nil
}

// TestAdoptionErrorNamesObjectsOfLaterWaves: what exists unmanaged in a wave the apply
// has not reached is named with the rest, so that removing (or adopting) what the error
// names is enough; nothing is written, the later wave's object included.
func TestAdoptionErrorNamesObjectsOfLaterWaves(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	g.Expect(inLaterWave(objects)).NotTo(BeNil())
	existing := preexisting(t, objects)

	req := request(ns, objects)
	req.WaveReady = neverReady
	res, err := newManager().Apply(ctx, req)
	expectAdoptionError(t, err, refsOf(existing)...)
	g.Expect(res.Applied).To(BeEmpty())
	enginetest.ExpectUntouched(t, k8sClient, existing)
}

// TestAdoptionBeforeAWaveThatWaits adopts what another tool created, in a package whose
// last wave waits: the apply that stops at that wave reports what it took over (the
// objects of the waves before), and the one that applies the last wave the rest, so that
// the add-on's status.adopted lists every object.
func TestAdoptionBeforeAWaveThatWaits(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	service := ssa.RefOf(inLaterWave(objects))
	existing := preexisting(t, objects)

	req := request(ns, objects)
	req.Adopt = true
	req.WaveReady = neverReady
	first, err := newManager().Apply(ctx, req)
	var waiting *ssa.WaveNotReadyError
	g.Expect(errors.As(err, &waiting)).To(BeTrue(), "%v", err)
	adopted := map[addonsv1alpha1.ObjectReference]bool{}
	for _, a := range first.Adopted {
		g.Expect(a.FieldManagers).To(ContainElement("another-tool"), "%s records who managed it", a.String())
		_, written := first.Applied[a.ObjectReference]
		g.Expect(written).To(BeTrue(), "%s is reported adopted, yet was not written", a.String())
		adopted[a.ObjectReference] = true
	}
	g.Expect(adopted).To(HaveLen(len(existing)-1), "every object but the Service's wave: %v", first.Adopted)
	g.Expect(adopted).NotTo(HaveKey(service))
	live, err := liveObject(service)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(live.GetLabels()).NotTo(HaveKey(ssa.LabelName), "the Service's wave was written")

	req = request(ns, objects)
	req.Adopt = true
	req.Previous = first.Inventory
	// What the first apply took over carries the add-on's seal now: not adopted again.
	second, err := newManager().Apply(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second.Adopted).To(ConsistOf(HaveField("ObjectReference", service)))
}
