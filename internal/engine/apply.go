package engine

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// apply hands the rendered objects, with owner references, to the identity's ssa.Manager:
// staged server-side apply with inventory prune (write), then records what it did in the
// status (recordApply) and maps a failure to its condition through applyFailures. When
// plan found nothing to write, it only records that the spec is applied. The engine calls
// its own apply library rather than KDP's Reconcile, which would render the package a
// second time and GET every object uncached.
func (r *Reconciler) apply(ctx context.Context, st *reconcileState) outcome {
	var err error
	if st.plan.skip {
		log.FromContext(ctx).V(1).Info("Nothing to apply: the cache matches the manifests")
	} else {
		err = r.write(ctx, st)
	}
	recordApply(st, err, time.Now())
	return applyOutcome(err)
}

// write applies the rendered objects as the reconcile's identity and keeps what the apply
// did in st.applied. The objects to inventory are recorded ahead of the first write
// (writeAhead), which refuses a set too large for the inventory before anything is
// written.
func (r *Reconciler) write(ctx context.Context, st *reconcileState) error {
	objects := r.withOwnerReferences(st.addon, st.rendered.objects)
	status := st.addon.GetAddonStatus()
	req := ssa.Request{
		Objects:  objects,
		Previous: status.Inventory.Objects(),
		Pending:  st.pending,
		Only:     st.plan.only,
		Excluded: st.plan.excluded,
		Kind:     r.gvk.Kind,
		Owner:    types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()},
		InputsChanged: status.ObservedGeneration != st.addon.GetGeneration() || status.AppliedVersion != st.resolved.Version ||
			status.Inventory.Len() == 0,
		WaveReady: func(ctx context.Context, refs []addonsv1alpha1.ObjectReference, applied map[addonsv1alpha1.ObjectReference]ssa.Written) (bool, string, error) {
			return r.waveReady(ctx, st.addon, refs, applied)
		},
		BeforeWrites: func(ctx context.Context, desired []addonsv1alpha1.ObjectReference) error {
			return r.writeAhead(ctx, st, desired)
		},
		Adopt: st.addon.GetAddonSpec().Adopt == addonsv1alpha1.AdoptIfUnmanaged,
	}
	if up := st.addon.GetAddonSpec().Upgrade; up != nil {
		req.RecreateOnImmutable = up.RecreateOnImmutable
		req.AllowCRDVersionRemoval = up.AllowCRDVersionRemoval
	}
	var err error
	st.applied, err = r.actingAs(st).manager.Apply(ctx, req)
	return err
}

// waveReady tells the apply whether the objects of a wave are healthy, as health judges
// them, from the cache (after it shows this apply's writes to them); a wave that is not
// stops the apply before the waves that wait for it.
func (r *Reconciler) waveReady(ctx context.Context, addon addonsv1alpha1.Addon, refs []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]ssa.Written) (bool, string, error) {
	mine := map[addonsv1alpha1.ObjectReference]ssa.Written{}
	for _, ref := range refs {
		if w, ok := applied[ref]; ok {
			mine[ref] = w
		}
	}
	r.awaitCache(ctx, addon, mine)
	h, err := checkHealth(ctx, r.client, refs, mine)
	if err != nil {
		return false, "", err
	}
	return h.ready(), h.message(), nil
}

// withOwnerReferences returns copies of the rendered objects (the render cache's copies
// stay untouched) with the add-on as controller owner of those in its own namespace: a
// namespaced owner cannot own cluster-scoped objects or objects in other namespaces,
// which the inventory and the finalizer clean up instead.
func (r *Reconciler) withOwnerReferences(addon addonsv1alpha1.Addon, objects *Objects) []*unstructured.Unstructured {
	owner := []any{map[string]any{
		"apiVersion": r.gvk.GroupVersion().String(), "kind": r.gvk.Kind,
		"name": addon.GetName(), "uid": string(addon.GetUID()),
		"controller": true, "blockOwnerDeletion": true,
	}}
	out := make([]*unstructured.Unstructured, 0, len(objects.Items))
	for _, o := range objects.Items {
		u := o.UnstructuredObject().DeepCopy()
		if u.GetNamespace() != "" && u.GetNamespace() == addon.GetNamespace() {
			// metadata is a map in every parsed object, so this cannot fail.
			_ = unstructured.SetNestedSlice(u.Object, owner, "metadata", "ownerReferences")
		}
		out = append(out, u)
	}
	return out
}

// applyFailures maps each typed apply error to its condition: the one table of apply
// failure reasons. The first entry whose error type matches wins.
var applyFailures = []struct {
	is       func(error) bool
	class    conditionClass
	reason   string
	terminal bool
	// retryAfter, when set, looks again after this long instead of returning the error.
	retryAfter time.Duration
}{
	{is: errorIs[*ssa.ConflictError], class: classStalled, reason: addonsv1alpha1.ReasonOwnershipConflict, terminal: true},
	{is: errorIs[*ssa.ModeError], class: classStalled, reason: addonsv1alpha1.ReasonInvalidMode, terminal: true},
	{is: errorIs[*ssa.StoredVersionError], class: classStalled, reason: addonsv1alpha1.ReasonCRDVersionRemoved, terminal: true},
	// Retrying cannot help: the spec must change or opt in to re-creation.
	{is: errorIs[*ssa.ImmutableError], class: classFailed, reason: addonsv1alpha1.ReasonImmutableField, terminal: true},
	{is: errorIs[*ssa.PruneError], class: classFailed, reason: addonsv1alpha1.ReasonPruneFailed},
	// The package must change: the object, or the whole set, is more than the API
	// server, etcd or the inventory takes.
	{is: errorIs[*ssa.ObjectTooLargeError], class: classStalled, reason: addonsv1alpha1.ReasonObjectTooLarge, terminal: true},
	{is: errorIs[*inventoryTooLargeError], class: classStalled, reason: addonsv1alpha1.ReasonInventoryTooLarge, terminal: true},
	// Nothing was written to them; the objects may go away or spec.adopt may change. The add-on
	// stalls (a human decides) and looks again after adoptionRetry.
	{is: errorIs[*ssa.AdoptionError], class: classStalled, reason: addonsv1alpha1.ReasonAdoptionRequired, retryAfter: adoptionRetry},
	// The package's waves do not form a DAG.
	{is: errorIs[*ssa.WaveError], class: classStalled, reason: addonsv1alpha1.ReasonWaveCycle, terminal: true},
	// A wave waits for an earlier one to be healthy; the children's events, or the
	// retry, reconcile again.
	{is: errorIs[*ssa.WaveNotReadyError], class: classProgressing, reason: addonsv1alpha1.ReasonWaveNotReady, retryAfter: waveRetry},
	// The add-on's ServiceAccount lacks a permission; an admin may grant it.
	{is: ssa.IsForbidden, class: classStalled, reason: addonsv1alpha1.ReasonForbidden, retryAfter: forbiddenRetry},
}

// waveRetry is how often an apply that waits for a wave looks again, besides the events
// of the wave's objects.
const waveRetry = 10 * time.Second

// adoptionRetry is how often an add-on waiting for adoption looks at the cluster again.
const adoptionRetry = time.Minute

// applyOutcome maps an apply error to its outcome through applyFailures; anything else
// is ApplyFailed and retried. No error is no outcome: the reconcile goes on.
func applyOutcome(err error) outcome {
	if err == nil {
		return proceed()
	}
	for _, f := range applyFailures {
		if !f.is(err) {
			continue
		}
		if f.retryAfter > 0 {
			return outcome{stop: true, class: f.class, reason: f.reason, message: err.Error(), requeueAfter: f.retryAfter}
		}
		return outcome{stop: true, class: f.class, reason: f.reason, message: err.Error(), err: err, terminal: f.terminal}
	}
	return failed(addonsv1alpha1.ReasonApplyFailed, err)
}
