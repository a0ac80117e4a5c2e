package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// errCrashed stands for a manager that died after applying and before writing the status.
var errCrashed = errors.New("the manager died before writing the status")

// crashingStatus is the manager's client, except that every status write fails.
type crashingStatus struct{ client.Client }

func (c crashingStatus) Status() client.SubResourceWriter { return crashingWriter{c.Client.Status()} }

type crashingWriter struct{ client.SubResourceWriter }

func (crashingWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errCrashed
}

// crashAfterApply pauses the suite manager's CoreDNS controller, runs change (the create
// or update the crashed reconcile is to apply, so that the suite manager cannot apply it
// first), then runs one reconcile of cr on a reconciler whose status writes fail:
// everything is applied, nothing is recorded in status. It returns what that reconcile
// rendered and a func that resumes the manager, as a restart would.
func crashAfterApply(t *testing.T, cr *addonsv1alpha1.CoreDNS, change func()) ([]addonsv1alpha1.ObjectReference, func()) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	running := settings.Load()
	paused := running
	paused.PausedKinds = []string{"CoreDNS"}
	withSettings(t, paused)
	change()
	crash, err := engine.NewWithClients(CoreDNSDefinition(), engine.Options{Catalog: source, Settings: engine.NewSettingsStore(running)},
		engine.Clients{Client: crashingStatus{testMgr.GetClient()}, Reader: testMgr.GetAPIReader(), Scheme: testMgr.GetScheme(),
			Mapper: testMgr.GetRESTMapper(), Recorder: testMgr.GetEventRecorder("crash-test")})
	g.Expect(err).NotTo(HaveOccurred())
	// The paused manager may write the add-on's status meanwhile, which moves its
	// resource version under the write-ahead patch (the apply then fails, and so does the
	// status write): run until everything is applied and only the status write failed.
	var refs []addonsv1alpha1.ObjectReference
	g.Eventually(func(g Gomega) {
		_, err := crash.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		g.Expect(err).To(MatchError(ContainSubstring(errCrashed.Error())))
		getAddon(g, cr)
		objects, err := crash.Render(ctx, cr)
		g.Expect(err).NotTo(HaveOccurred())
		refs = make([]addonsv1alpha1.ObjectReference, 0, len(objects.Items))
		for _, o := range objects.Items {
			u := o.UnstructuredObject()
			gvk := u.GroupVersionKind()
			refs = append(refs, addonsv1alpha1.ObjectReference{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
				Namespace: u.GetNamespace(), Name: u.GetName()})
		}
		for _, ref := range refs {
			_, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred(), "%s was not applied before the crash", ref)
		}
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	g.Expect(cr.Annotations).To(HaveKey(addonsv1alpha1.AnnotationInventoryRecord))
	g.Expect(cr.Finalizers).To(ContainElement(engine.Finalizer))
	return refs, func() { settings.Store(running) }
}

// clusterScoped returns the cluster-scoped entries of refs.
func clusterScoped(refs []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, ref := range refs {
		if ref.Namespace == "" {
			out = append(out, ref)
		}
	}
	return out
}

// TestWriteAheadInventoryLeavesNoOrphan crashes the manager after an apply and before its
// status write, then changes or deletes the add-on: every object the crashed apply
// created, namespaced and cluster-scoped, is pruned or deleted.
func TestWriteAheadInventoryLeavesNoOrphan(t *testing.T) {
	t.Run("a new add-on, then a changed spec", func(t *testing.T) {
		g := NewWithT(t)
		ns, elsewhere := newNamespace(t), newNamespace(t)
		cr := newCoreDNS(ns, newVersion)
		orphans, resume := crashAfterApply(t, cr, func() {
			g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
		})
		g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty(), "the crashed reconcile recorded an inventory")
		g.Expect(clusterScoped(orphans)).NotTo(BeEmpty())

		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = elsewhere })
		resume()
		waitApplied(t, cr, newVersion)
		expectGone(t, orphans)
		g.Expect(cr.Status.Inventory.Objects()).To(HaveEach(Not(BeElementOf(orphans))))
		for _, ref := range cr.Status.Inventory.Objects() {
			_, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred(), "%s is in the inventory but not in the cluster", ref)
		}
	})

	t.Run("a new add-on, then deleted", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		cr := newCoreDNS(ns, newVersion)
		orphans, _ := crashAfterApply(t, cr, func() {
			g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
		})
		// Deletion runs even while the kind is paused.
		g.Expect(k8sClient.Delete(context.Background(), cr)).To(Succeed())
		expectGone(t, orphans)
		expectGone(t, []addonsv1alpha1.ObjectReference{{Group: addonsv1alpha1.GroupVersion.Group,
			Version: addonsv1alpha1.GroupVersion.Version, Kind: "CoreDNS", Namespace: ns, Name: cr.Name}})
	})

	t.Run("a change that adds objects, then changed back", func(t *testing.T) {
		g := NewWithT(t)
		ns, elsewhere := newNamespace(t), newNamespace(t)
		cr := newCoreDNS(ns, newVersion)
		createCoreDNS(t, cr)
		applied := cr.Status.Inventory.Objects()
		orphans, resume := crashAfterApply(t, cr, func() {
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = elsewhere })
		})
		g.Expect(cr.Status.Inventory.Objects()).To(Equal(applied), "the crashed reconcile recorded an inventory")
		g.Expect(clusterScoped(orphans)).NotTo(BeEmpty())

		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = "" })
		resume()
		waitApplied(t, cr, newVersion)
		expectGone(t, orphans)
		g.Expect(cr.Status.Inventory.Objects()).To(ConsistOf(applied))
		for _, ref := range applied {
			_, err := liveObject(ref)
			g.Expect(err).NotTo(HaveOccurred(), "%s was not re-created", ref)
		}
	})
}

// TestCreatingAnAddonCostsNineRequests counts the requests of a new 7-object CoreDNS
// until it settles: the finalizer and the write-ahead record share one patch, then 7
// create-only applies (no GET) and one status patch. The first apply records no event
// (the Ready event ends the install, and nothing runs the pods here).
func TestCreatingAnAddonCostsNineRequests(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	mark, markAll, markApplied := requests.writeCount(), requests.count(), requests.applyCount()
	createCoreDNS(t, cr)
	waitQuiet(t, ns)
	// Reads count too: the ownership check of the new objects is their create-only apply,
	// not a GET each past the cache.
	all := requests.requestsSince(markAll, ns)
	g.Expect(all).To(HaveLen(9), "requests: %v", all)
	for _, r := range all {
		g.Expect(r).NotTo(HavePrefix("GET "), "requests: %v", all)
	}
	var writes, addonPatches []string
	requests.mu.Lock()
	for _, w := range requests.writes[mark:] {
		if !strings.Contains(w, ns) {
			continue
		}
		if strings.Contains(w, "/v1alpha1/namespaces/"+ns+"/coredns/") {
			addonPatches = append(addonPatches, w)
		}
		writes = append(writes, w)
	}
	requests.mu.Unlock()
	g.Expect(cr.Status.Inventory.Len()).To(Equal(7))
	g.Expect(writes).To(HaveLen(9), "writes: %v", writes)
	g.Expect(writes).NotTo(ContainElement(ContainSubstring("/events")), "writes: %v", writes)
	g.Expect(addonPatches).To(ConsistOf(
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name,
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name+"/status"),
		"one patch for the finalizer and the write-ahead record, one for the status")
	// The API server answers each apply with the object's metadata only: the engine reads
	// nothing else from it, and neither side encodes or decodes the whole object.
	applied := requests.appliedSince(markApplied, ns)
	g.Expect(applied).To(HaveLen(7), "applies: %v", applied)
	g.Expect(applied).To(HaveEach(HaveSuffix(" PartialObjectMetadata")), "applies: %v", applied)
}
