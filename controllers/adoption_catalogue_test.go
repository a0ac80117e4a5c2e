package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// adoptionCase is one add-on of the catalogue whose children another tool installed
// first. CoreDNS has tests of its own (kubeadm_adoption_test.go).
type adoptionCase struct {
	newCR      func(ns string) addonsv1alpha1.Addon
	definition engine.Definition
	version    string
	// kinds are the child kinds that must be among the pre-existing objects, so that the
	// table covers every kind of the catalogue.
	kinds []string
	// waitsForWorkloads and childNamespace are the lifecycle case's (addonCase): an
	// adopted package that holds a wave back for its workloads needs them marked
	// available before it is applied.
	waitsForWorkloads bool
	childNamespace    func(ns string) string
}

func adoptionCases() map[string]adoptionCase {
	cases := addonCases()
	return map[string]adoptionCase{
		"MetricsServer": {newCR: cases["MetricsServer"].newCR, definition: MetricsServerDefinition(), version: "0.8.0",
			kinds:             []string{"ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "Deployment", "APIService"},
			waitsForWorkloads: cases["MetricsServer"].waitsForWorkloads, childNamespace: cases["MetricsServer"].childNamespace},
		"Dashboard": {newCR: cases["Dashboard"].newCR, definition: DashboardDefinition(), version: "2.7.0",
			kinds: []string{"Namespace", "ServiceAccount", "Service", "Secret", "ConfigMap", "Role", "RoleBinding",
				"ClusterRole", "ClusterRoleBinding", "Deployment"}},
		"NodeLocalDNS": {newCR: cases["NodeLocalDNS"].newCR, definition: NodeLocalDNSDefinition(), version: "1.25.0",
			kinds: []string{"ServiceAccount", "Service", "ConfigMap", "DaemonSet"}},
		"KubeProxy": {newCR: cases["KubeProxy"].newCR, definition: KubeProxyDefinition(), version: "1.37.2",
			kinds: []string{"ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "DaemonSet"}},
		"KubeRouter": {newCR: cases["KubeRouter"].newCR, definition: KubeRouterDefinition(), version: "2.1.0",
			kinds: []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"}},
		"Package": {newCR: cases["Package"].newCR, definition: PackageDefinition(), version: "1.12.1",
			kinds: cases["Package"].kinds},
		// make addon (hack/addon) writes each new kind's case above this line.
	}
}

// isNamespace tells a Namespace among the pre-existing objects: kaddons uses an existing
// Namespace as it is, never adopts, inventories or deletes it (docs/adoption.md).
func isNamespace(o *unstructured.Unstructured) bool {
	return o.GetAPIVersion() == "v1" && o.GetKind() == "Namespace"
}

// TestNeverTakesOverAnyChildKind runs the never-take-over rule over every add-on of the
// catalogue besides CoreDNS: an object of each child kind that another tool created is
// left untouched and named in the condition, a Warning event says so, and deleting the
// add-on leaves it.
func TestNeverTakesOverAnyChildKind(t *testing.T) {
	for name, tc := range adoptionCases() {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := newNamespace(t)
			cr := tc.newCR(ns)
			setVersion(cr, tc.version)
			existing := preexisting(t, cr, tc.definition)
			expectKinds(t, existing, tc.kinds)

			mark := requests.WriteCount()
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			ready := waitReason(t, cr, addonsv1alpha1.ReasonAdoptionRequired)
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			for _, o := range existing {
				if isNamespace(o) {
					g.Expect(ready.Message).NotTo(ContainSubstring("Namespace "+o.GetName()), "an existing Namespace is used, not adopted")
					continue
				}
				g.Expect(ready.Message).To(ContainSubstring(refOf(o).String()), "the condition names every existing object")
			}
			g.Expect(cr.GetAddonStatus().Adopted).To(BeEmpty())
			expectLeftAlone(t, existing, mark)
			expectWarning(t, ns, cr.GetName(), addonsv1alpha1.ReasonAdoptionRequired, ready.Message)

			g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
			g.Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr.DeepCopyObject().(client.Object)))
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue())
			expectLeftAlone(t, existing, mark)
		})
	}
}

// TestAdoptAnyChildKind adopts what another tool installed, for every add-on of the
// catalogue besides CoreDNS and both deletion policies: each object is kept (same UID),
// labelled, recorded with its former field manager, and then deleted or orphaned as the
// policy says. An existing Namespace is used as it is and survives either way.
func TestAdoptAnyChildKind(t *testing.T) {
	for name, tc := range adoptionCases() {
		for _, policy := range []addonsv1alpha1.DeletionPolicy{addonsv1alpha1.DeletionPolicyDelete, addonsv1alpha1.DeletionPolicyOrphan} {
			t.Run(name+"/"+string(policy), func(t *testing.T) {
				g := NewWithT(t)
				ctx := context.Background()
				ns := newNamespace(t)
				cr := tc.newCR(ns)
				setVersion(cr, tc.version)
				spec := cr.GetAddonSpec()
				spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged
				spec.DeletionPolicy = policy
				existing := preexisting(t, cr, tc.definition)
				expectKinds(t, existing, tc.kinds)
				g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
				if tc.waitsForWorkloads {
					// The adopted Deployment has no status: nothing runs its pods.
					releaseWaves(t, cr, tc.childNamespace(ns))
				}
				waitApplied(t, cr, tc.version)

				adopted := map[string]addonsv1alpha1.AdoptedObject{}
				for _, a := range cr.GetAddonStatus().Adopted {
					adopted[a.String()] = a
				}
				for _, o := range existing {
					live := &unstructured.Unstructured{}
					live.SetGroupVersionKind(o.GroupVersionKind())
					g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
					g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%s was re-created", refOf(o))
					if isNamespace(o) {
						g.Expect(adopted).NotTo(HaveKey(refOf(o).String()), "an existing Namespace is never adopted")
						g.Expect(live.GetLabels()).NotTo(HaveKey(ssa.LabelName))
						g.Expect(live.GetResourceVersion()).To(Equal(o.GetResourceVersion()), "the existing Namespace was written")
						continue
					}
					g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, cr.GetName()), "%s", refOf(o))
					a, ok := adopted[refOf(o).String()]
					g.Expect(ok).To(BeTrue(), "%s is not in status.adopted: %v", refOf(o), cr.GetAddonStatus().Adopted)
					g.Expect(a.FieldManagers).To(ContainElement("another-tool"), "%s records who managed it", refOf(o))
				}
				g.Expect(adopted).To(HaveLen(len(existing) - countNamespaces(existing)))
				g.Eventually(func() []string {
					return eventReasons(t, ns, cr.GetName())
				}).WithTimeout(eventuallyTimeout).Should(ContainElement(engine.EventAdopted))

				g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
				g.Eventually(func() bool {
					return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr.DeepCopyObject().(client.Object)))
				}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue())
				for _, o := range existing {
					live := &unstructured.Unstructured{}
					live.SetGroupVersionKind(o.GroupVersionKind())
					if isNamespace(o) {
						g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
						g.Expect(live.GetDeletionTimestamp().IsZero()).To(BeTrue(), "the existing Namespace was deleted")
						continue
					}
					if policy == addonsv1alpha1.DeletionPolicyOrphan {
						g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed(), "Orphan leaves the adopted %s", refOf(o))
						g.Expect(live.GetDeletionTimestamp().IsZero()).To(BeTrue(), "Orphan leaves the adopted %s", refOf(o))
						g.Expect(live.GetLabels()).NotTo(HaveKey(ssa.LabelName))
						continue
					}
					g.Eventually(func() bool {
						err := k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)
						return apierrors.IsNotFound(err) || !live.GetDeletionTimestamp().IsZero()
					}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue(), "Delete deletes the adopted %s", refOf(o))
				}
			})
		}
	}
}

// expectLeftAlone is expectUntouched for objects whose status the control plane itself
// writes (the aggregator's Available condition on an APIService): for those, the spec
// (generation), the labels and the annotations are unchanged and the manager made no
// write to them since the mark-th.
func expectLeftAlone(t *testing.T, objects []*unstructured.Unstructured, mark int) {
	t.Helper()
	g := NewWithT(t)
	var others []*unstructured.Unstructured
	for _, o := range objects {
		if o.GetKind() != "APIService" {
			others = append(others, o)
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(o), live)).To(Succeed())
		g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%s was re-created", refOf(o))
		g.Expect(live.GetGeneration()).To(Equal(o.GetGeneration()), "the spec of %s was written", refOf(o))
		g.Expect(live.GetLabels()).To(Equal(o.GetLabels()), "the labels of %s were written", refOf(o))
		g.Expect(live.GetAnnotations()).To(Equal(o.GetAnnotations()), "the annotations of %s were written", refOf(o))
		g.Expect(requests.ObjectWritesSince(mark, "/apiservices/"+o.GetName())).To(BeEmpty(), "the manager wrote %s", refOf(o))
	}
	expectUntouched(t, others)
}

// refOf returns the reference the add-on's status and messages use for o.
func refOf(o *unstructured.Unstructured) addonsv1alpha1.ObjectReference {
	gvk := o.GroupVersionKind()
	return addonsv1alpha1.ObjectReference{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}
}

// expectKinds checks that objects hold at least one object of each kind.
func expectKinds(t *testing.T, objects []*unstructured.Unstructured, kinds []string) {
	t.Helper()
	have := map[string]bool{}
	for _, o := range objects {
		have[o.GetKind()] = true
	}
	for _, k := range kinds {
		if !have[k] {
			t.Errorf("no pre-existing %s among %d objects: the table no longer covers that kind", k, len(objects))
		}
	}
}

func countNamespaces(objects []*unstructured.Unstructured) int {
	n := 0
	for _, o := range objects {
		if isNamespace(o) {
			n++
		}
	}
	return n
}

// eventCutSuffix ends an event note the engine cut to the API server's limit.
const eventCutSuffix = " ... (cut; the add-on's status has all of it)"

// expectWarning waits for a Warning event with reason on the add-on name in ns, whose
// note is message (or, past the API's note limit, the start of it).
func expectWarning(t *testing.T, ns, name, reason, message string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("events.k8s.io/v1")
		list.SetKind("EventList")
		g.Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
		var found []string
		for _, e := range list.Items {
			regarding, _, _ := unstructured.NestedString(e.Object, "regarding", "name")
			r, _, _ := unstructured.NestedString(e.Object, "reason")
			if regarding != name || r != reason {
				continue
			}
			typ, _, _ := unstructured.NestedString(e.Object, "type")
			note, _, _ := unstructured.NestedString(e.Object, "note")
			cut, truncated := strings.CutSuffix(note, eventCutSuffix)
			if typ == "Warning" && (note == message || (truncated && strings.HasPrefix(message, cut))) {
				return
			}
			found = append(found, typ+": "+note)
		}
		g.Expect(found).To(ContainElement("Warning: "+message), "no Warning event with reason %s and the condition's message on %s", reason, name)
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}
