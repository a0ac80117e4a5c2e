package engine_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// The write-ahead record as the reconciler keeps it: a manager that dies between its
// writes and its status write leaves no orphan. internal/engine/ssa's
// writeahead_envtest_test.go checks the apply library's side (BeforeWrites, Pending).

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
	crash, err := engine.NewWithClients(testDefinition(), engine.Options{Catalog: source, Settings: engine.NewSettingsStore(running), Sealer: sealer},
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

// TestWriteAheadInventoryLeavesNoOrphan crashes the manager after an apply and before its
// status write, then changes or deletes the add-on: every object the crashed apply
// created, namespaced and cluster-scoped, is pruned or deleted.
func TestWriteAheadInventoryLeavesNoOrphan(t *testing.T) {
	t.Run("a new add-on, then a changed spec", func(t *testing.T) {
		g := NewWithT(t)
		ns, elsewhere := newNamespace(t), newNamespace(t)
		cr := enginetest.NewCoreDNS(ns, newVersion)
		orphans, resume := crashAfterApply(t, cr, func() {
			g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
		})
		g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty(), "the crashed reconcile recorded an inventory")
		g.Expect(enginetest.ClusterScoped(orphans)).NotTo(BeEmpty())

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
		cr := enginetest.NewCoreDNS(ns, newVersion)
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
		cr := enginetest.NewCoreDNS(ns, newVersion)
		createCoreDNS(t, cr)
		applied := cr.Status.Inventory.Objects()
		orphans, resume := crashAfterApply(t, cr, func() {
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = elsewhere })
		})
		g.Expect(cr.Status.Inventory.Objects()).To(Equal(applied), "the crashed reconcile recorded an inventory")
		g.Expect(enginetest.ClusterScoped(orphans)).NotTo(BeEmpty())

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
