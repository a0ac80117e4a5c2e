package engine

import (
	"context"
	"fmt"
	"math"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// planResult is what plan decided.
type planResult struct {
	// skip is true when nothing needs to be written.
	skip bool
	// only, when not nil, limits the apply to the objects that drifted.
	only map[addonsv1alpha1.ObjectReference]bool
	// excluded are the fields set only on creation (drift ssa.Exclusions).
	excluded ssa.Exclusions
}

// plan decides what needs to be written. When the inventory already holds exactly the
// rendered objects and every one of them, read from the cache, still carries every field
// the manifests set, the apply is skipped: a reconcile with unchanged inputs and no drift
// makes no API request at all. When only some objects drifted, only those are applied.
// An add-on whose write-ahead record lists objects beyond the inventory is applied in full.
func (r *Reconciler) plan(ctx context.Context, st *reconcileState) outcome {
	excluded, err := r.driftExclusions(ctx, st)
	if err != nil {
		return stalled(addonsv1alpha1.ReasonInvalidDriftExclusion, err)
	}
	st.plan = planResult{excluded: excluded}
	status := st.addon.GetAddonStatus()
	objects := st.rendered.objects.Items
	if status.AppliedVersion != st.resolved.Version || !sameSet(status.Inventory.Objects(), objects) || len(st.pending) > 0 ||
		reconcileRequested(st.addon) {
		// Pending objects (an interrupted apply's) are confirmed or pruned by an apply; a
		// requested reconcile applies everything, whatever the cache shows.
		return proceed()
	}
	drifted := map[addonsv1alpha1.ObjectReference]bool{}
	for _, o := range objects {
		desired := o.UnstructuredObject()
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(desired.GroupVersionKind())
		err := r.client.Get(ctx, types.NamespacedName{Namespace: desired.GetNamespace(), Name: desired.GetName()}, live)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			drifted[ssa.RefOf(desired)] = true
			continue
		}
		if err != nil {
			return failed(addonsv1alpha1.ReasonApplyFailed, fmt.Errorf("reading %s from the cache: %w", ssa.RefOf(desired), err))
		}
		switch live.GetAnnotations()[addonsv1alpha1.AnnotationMode] {
		case addonsv1alpha1.ModeIgnore, addonsv1alpha1.ModeEnsureExists:
			continue
		}
		if !contains(live.Object, ssa.Without(withoutOwnerRefs(desired), excluded[ssa.RefOf(desired)]).Object) ||
			!ownerRefIntact(st.addon, live) {
			drifted[ssa.RefOf(desired)] = true
		}
	}
	if len(drifted) == 0 {
		st.plan.skip = true
		return proceed()
	}
	st.plan.only = drifted
	return proceed()
}

// ownerRefIntact reports whether live, when it lives in the add-on's own namespace (the
// only place an owner reference to it is allowed), still carries the add-on's owner
// reference. One stripped by a backup restore or a move between clusters is drift, and
// the apply puts it back.
func ownerRefIntact(addon addonsv1alpha1.Addon, live *unstructured.Unstructured) bool {
	if live.GetNamespace() == "" || live.GetNamespace() != addon.GetNamespace() {
		return true
	}
	for _, ref := range live.GetOwnerReferences() {
		if ref.UID == addon.GetUID() {
			return true
		}
	}
	return false
}

// sameSet reports whether the inventory lists exactly the rendered objects.
func sameSet(inventory []addonsv1alpha1.ObjectReference, objects []*Object) bool {
	if len(inventory) != len(objects) {
		return false
	}
	seen := map[addonsv1alpha1.ObjectReference]bool{}
	for _, ref := range inventory {
		seen[ref] = true
	}
	for _, o := range objects {
		if !seen[ssa.RefOf(o.UnstructuredObject())] {
			return false
		}
	}
	return true
}

// withoutOwnerRefs drops fields that KDP adds only at apply time.
func withoutOwnerRefs(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "ownerReferences")
	unstructured.RemoveNestedField(c.Object, "status")
	return c
}

// contains reports whether live carries every field of desired with an equal value.
// Lists must have the same length and match element by element; numbers compare by value.
func contains(live, desired any) bool {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, dv := range d {
			lv, ok := l[k]
			if !ok {
				if isEmpty(dv) {
					continue
				}
				return false
			}
			if !contains(lv, dv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(d) {
			return len(d) == 0 && (live == nil || ok)
		}
		for i := range d {
			if !contains(l[i], d[i]) {
				return false
			}
		}
		return true
	default:
		if dn, ok := number(desired); ok {
			ln, ok := number(live)
			return ok && math.Abs(dn-ln) < 1e-9
		}
		return live == desired
	}
}

// isEmpty reports whether v is an empty map or list, which the API server drops.
func isEmpty(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	case nil:
		return true
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// reconcileRequested reports whether the add-on's addons.kaddons.dev/requested-at
// annotation asks for a reconcile that has not been handled yet.
func reconcileRequested(addon addonsv1alpha1.Addon) bool {
	requested, ok := addon.GetAnnotations()[addonsv1alpha1.AnnotationRequestedAt]
	return ok && requested != addon.GetAddonStatus().LastHandledReconcileAt
}
