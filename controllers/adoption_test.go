package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// preexisting creates, without kaddons' labels and as another field manager, every
// object cr would render, as another tool would have installed them. It returns them as
// created (UIDs and resource versions included).
func preexisting(t *testing.T, cr addonsv1alpha1.Addon, def engine.Definition) []*unstructured.Unstructured {
	t.Helper()
	r, err := engine.New(testMgr, def, engineOptions())
	if err != nil {
		t.Fatal(err)
	}
	objects, err := r.Render(context.Background(), cr)
	if err != nil {
		t.Fatal(err)
	}
	created := make([]*unstructured.Unstructured, 0, len(objects.Items))
	for _, o := range objects.Items {
		u := o.UnstructuredObject().DeepCopy()
		u.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "another-tool"})
		if err := k8sClient.Create(context.Background(), u, client.FieldOwner("another-tool")); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		created = append(created, u)
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })
	}
	return created
}

// expectUntouched checks that every object still has the UID and resource version it
// was created with.
func expectUntouched(t *testing.T, objects []*unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	for _, o := range objects {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(o), live)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%s %s was re-created", o.GetKind(), o.GetName())
		g.Expect(live.GetResourceVersion()).To(Equal(o.GetResourceVersion()), "%s %s was written", o.GetKind(), o.GetName())
	}
}

func TestNeverTakesOverWhatItDidNotCreate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	existing := preexisting(t, cr, CoreDNSDefinition())
	g.Expect(existing).To(HaveLen(7))

	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonAdoptionRequired)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	for _, o := range existing {
		g.Expect(ready.Message).To(ContainSubstring(o.GetKind()+" "), "the condition names every existing object")
		g.Expect(ready.Message).To(ContainSubstring(o.GetName()))
	}
	g.Expect(ready.Message).To(ContainSubstring("spec.adopt: IfUnmanaged"))
	// A Warning event says the same, on the add-on, in its namespace.
	expectWarning(t, ns, cr.Name, addonsv1alpha1.ReasonAdoptionRequired, ready.Message)
	g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())
	expectUntouched(t, existing)

	// Deleting the add-on leaves all of them.
	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())
	expectUntouched(t, existing)
}

// TestCreateOnlyApplyStopsAtAnExistingObject has only the Deployment exist, unmanaged:
// the objects of the earlier stages are new, and their create-only applies create them;
// the Deployment's is refused by the API server, so nothing is written to it, and the
// add-on names it in AdoptionRequired. What was created is the add-on's and goes with it.
func TestCreateOnlyApplyStopsAtAnExistingObject(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	r, err := engine.New(testMgr, CoreDNSDefinition(), engineOptions())
	g.Expect(err).NotTo(HaveOccurred())
	objects, err := r.Render(ctx, cr)
	g.Expect(err).NotTo(HaveOccurred())
	var deployment *unstructured.Unstructured
	for _, o := range objects.Items {
		if o.Kind == "Deployment" {
			deployment = o.UnstructuredObject().DeepCopy()
		}
	}
	g.Expect(deployment).NotTo(BeNil())
	deployment.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "another-tool"})
	g.Expect(k8sClient.Create(ctx, deployment, client.FieldOwner("another-tool"))).To(Succeed())

	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonAdoptionRequired)
	g.Expect(ready.Message).To(ContainSubstring("Deployment " + ns + "/coredns"))
	g.Expect(ready.Message).NotTo(ContainSubstring("ConfigMap"), "only the Deployment exists")
	expectUntouched(t, []*unstructured.Unstructured{deployment})
	// The earlier stages were new: created, labelled, and in the inventory.
	inventory := cr.Status.Inventory.Objects()
	g.Expect(inventory).NotTo(BeEmpty())
	for _, ref := range inventory {
		g.Expect(ref.Kind).NotTo(Equal("Deployment"))
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, live)).To(Succeed())
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelNamespace, ns), "%s", ref)
	}

	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())
	expectGone(t, inventory)
	expectUntouched(t, []*unstructured.Unstructured{deployment})
}

// TestNeverTakesOverAnInventoriedObjectCreatedAgainByAnotherTool deletes one of an
// add-on's children out of band while the add-on is paused, and has another tool create
// a ConfigMap of the same name: the inventory still lists it, but the object is not
// kaddons' any more. Resumed, the add-on applies it create-only, finds it unmanaged, and
// waits for adoption: the other tool's ConfigMap is never written.
func TestNeverTakesOverAnInventoriedObjectCreatedAgainByAnotherTool(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	waitApplied(t, cr, newVersion)
	var configMap addonsv1alpha1.ObjectReference
	for _, ref := range cr.Status.Inventory.Objects() {
		if ref.Kind == "ConfigMap" {
			configMap = ref
		}
	}
	g.Expect(configMap.Name).NotTo(BeEmpty(), "the inventory lists the Corefile ConfigMap")

	metav1.SetMetaDataAnnotation(&cr.ObjectMeta, addonsv1alpha1.AnnotationPaused, "true")
	g.Expect(k8sClient.Update(ctx, cr)).To(Succeed())
	waitReason(t, cr, addonsv1alpha1.ReasonPaused)
	live, err := liveObject(configMap)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8sClient.Delete(ctx, live)).To(Succeed())
	expectGone(t, []addonsv1alpha1.ObjectReference{configMap})
	other := &unstructured.Unstructured{}
	other.SetGroupVersionKind(configMap.GroupVersionKind())
	other.SetNamespace(configMap.Namespace)
	other.SetName(configMap.Name)
	other.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "another-tool"})
	g.Expect(unstructured.SetNestedStringMap(other.Object, map[string]string{"Corefile": ".:53 {}"}, "data")).To(Succeed())
	g.Expect(k8sClient.Create(ctx, other, client.FieldOwner("another-tool"))).To(Succeed())

	getAddon(g, cr)
	delete(cr.Annotations, addonsv1alpha1.AnnotationPaused)
	g.Expect(k8sClient.Update(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonAdoptionRequired)
	g.Expect(ready.Message).To(ContainSubstring("ConfigMap " + configMap.Namespace + "/" + configMap.Name))
	expectUntouched(t, []*unstructured.Unstructured{other})
}

func TestAdoptIfUnmanaged(t *testing.T) {
	for _, policy := range []addonsv1alpha1.DeletionPolicy{addonsv1alpha1.DeletionPolicyDelete, addonsv1alpha1.DeletionPolicyOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := newNamespace(t)
			cr := newCoreDNS(ns, newVersion)
			cr.Spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged
			cr.Spec.DeletionPolicy = policy
			existing := preexisting(t, cr, CoreDNSDefinition())
			createReadyCoreDNS(t, cr)

			g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(len(existing)))
			g.Expect(cr.Status.Adopted).To(HaveLen(len(existing)))
			for _, a := range cr.Status.Adopted {
				g.Expect(a.FieldManagers).To(ContainElement("another-tool"), "%s records who managed it", a.String())
			}
			for _, o := range existing {
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(o.GroupVersionKind())
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
				g.Expect(live.GetUID()).To(Equal(o.GetUID()), "adoption keeps the object, it does not re-create it")
				g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, cr.Name))
			}
			g.Eventually(func() []string {
				return eventReasons(t, ns, cr.Name)
			}).WithTimeout(eventuallyTimeout).Should(ContainElement(engine.EventAdopted))

			g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
			g.Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr))
			}).WithTimeout(eventuallyTimeout).Should(BeTrue())
			for _, o := range existing {
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(o.GroupVersionKind())
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)
				if policy == addonsv1alpha1.DeletionPolicyOrphan {
					g.Expect(err).NotTo(HaveOccurred(), "Orphan leaves the adopted %s %s", o.GetKind(), o.GetName())
					g.Expect(live.GetLabels()).NotTo(HaveKey(ssa.LabelName))
					continue
				}
				g.Eventually(func() bool {
					err := k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)
					return apierrors.IsNotFound(err) || !live.GetDeletionTimestamp().IsZero()
				}).WithTimeout(eventuallyTimeout).Should(BeTrue(), "Delete deletes the adopted %s %s", o.GetKind(), o.GetName())
			}
		})
	}
}

// eventReasons lists the reasons of the events recorded on the add-on name in ns.
func eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("events.k8s.io/v1")
	list.SetKind("EventList")
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		if n, _, _ := unstructured.NestedString(e.Object, "regarding", "name"); n == name {
			r, _, _ := unstructured.NestedString(e.Object, "reason")
			reasons = append(reasons, r)
		}
	}
	return reasons
}

func TestReplicasLeftToAnHPA(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	cr.Spec.Replicas = ptr.To[int32](2)
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: coreDNSDeployment}

	// An HPA targets the Deployment and, as the HPA controller does, scales it with an
	// update of its own.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: coreDNSDeployment},
			MinReplicas:    ptr.To[int32](2), MaxReplicas: 10,
		},
	}
	g.Expect(k8sClient.Create(ctx, hpa)).To(Succeed())
	time.Sleep(time.Second) // let the manager's cache see the HPA
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	deploy.Spec.Replicas = ptr.To[int32](5)
	g.Expect(k8sClient.Update(ctx, deploy, client.FieldOwner("horizontal-pod-autoscaler"))).To(Succeed())

	// kaddons never writes the Deployment back, and still reports Ready.
	mark := requests.writeCount()
	g.Consistently(func() []string { return deploymentWritesSince(mark, ns) }).
		WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(BeEmpty())
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(5)))

	// A change of the add-on applies the Deployment again: replicas are released to
	// kaddons-released at their live value, not reset to the spec's 2.
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	cr.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	g.Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(5)), "kaddons reset the replicas the HPA set")
	for _, m := range deploy.ManagedFields {
		if m.Manager == ssa.FieldManager && m.FieldsV1 != nil {
			g.Expect(m.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:replicas"`), "kaddons still owns spec.replicas")
		}
	}
}

func TestDriftExclusionLeavesAFieldToAnotherManager(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	cr.Spec.DriftExclusions = []addonsv1alpha1.DriftExclusion{{
		Target: addonsv1alpha1.ObjectSelector{Kind: "Deployment", Name: coreDNSDeployment}, Paths: []string{"/spec/replicas"}}}
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: coreDNSDeployment}
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	deploy.Spec.Replicas = ptr.To[int32](4)
	g.Expect(k8sClient.Update(ctx, deploy, client.FieldOwner("someone-else"))).To(Succeed())

	mark := requests.writeCount()
	g.Consistently(func() []string { return deploymentWritesSince(mark, ns) }).
		WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(BeEmpty())
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(4)))

	// A malformed pointer is a spec error, and nothing is applied.
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	cr.Spec.DriftExclusions[0].Paths = []string{"/metadata/name"}
	g.Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
	stalled := waitReason(t, cr, addonsv1alpha1.ReasonInvalidDriftExclusion)
	g.Expect(stalled.Message).To(ContainSubstring(`"/metadata/name" cannot be excluded`))
}

// deploymentWritesSince returns the manager's writes to Deployments in ns since the n-th.
func deploymentWritesSince(n int, ns string) []string {
	var out []string
	for _, w := range requests.objectWritesSince(n, ns) {
		if strings.Contains(w, "/deployments") {
			out = append(out, w)
		}
	}
	return out
}
