package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Event reasons of deletion.
const (
	// EventOrphaned is recorded when an add-on is deleted with deletionPolicy Orphan.
	EventOrphaned = "Orphaned"
	// EventDeletionBlocked is recorded when finalizers hold children of a deleted add-on.
	EventDeletionBlocked = "DeletionBlocked"
	// EventDependentsExist is recorded when a deleted add-on waits for the add-ons that
	// depend on it to be gone.
	EventDependentsExist = "DependentsExist"
)

// deletionRecheck is how often a deletion held by finalizers looks again (the children's
// own events also wake it).
const deletionRecheck = 5 * time.Second

// dependentsRecheck is how often a deletion that waits for its dependents looks again: a
// safety net only, since the dependents' events (their deletion above all) wake it
// (deletionWaits).
const dependentsRecheck = time.Minute

// maxNamedDependents is how many dependents the message of a waiting deletion names.
const maxNamedDependents = 5

// maxCycleWalk bounds the add-ons the cycle check of one dependent visits.
const maxCycleWalk = 256

// readyMessage returns the message of the add-on's Ready condition.
func readyMessage(obj addonsv1alpha1.Addon) string {
	if c := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// deletionSource returns the AddonSource artifact whose identity the add-on's children are
// deleted with: its source's ServiceAccount when the source names one. Deleting writes
// nothing new, so neither a pin nor an identity is required of the source here: with none,
// or when the source is gone, the children in the inventory go with the identity the
// add-on's namespace gives.
func (r *Reconciler) deletionSource(obj addonsv1alpha1.Addon) SourceArtifact {
	name := obj.GetAddonSpec().SourceRef
	if name == "" || r.opts.Artifacts == nil {
		return SourceArtifact{}
	}
	src, err := r.opts.Artifacts.Lookup(name)
	if err != nil {
		return SourceArtifact{}
	}
	src.Trust.Pinned = true
	src.Trust.AsOperator = src.Trust.ServiceAccount.Name == ""
	return src
}

// reconcileDelete waits while add-ons that depend on obj exist (awaitDependents), then
// removes every child in the inventory and in the pending write-ahead record,
// cluster-scoped ones included, in reverse apply order (or, with deletionPolicy Orphan,
// hands them over), then releases the finalizer. Children already gone are skipped, and
// so are objects that do not carry the add-on's labels.
func (r *Reconciler) reconcileDelete(ctx context.Context, obj addonsv1alpha1.Addon, pending []addonsv1alpha1.ObjectReference) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		return ctrl.Result{}, nil
	}
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if out := r.awaitDependents(ctx, obj); out.stop {
		// Add-ons that depend on it still exist: every child stays until they are gone.
		reason := EventDependentsExist
		if out.err != nil {
			reason = "" // the error is in the condition and retried; no event
		}
		return r.holdDeletion(ctx, obj, out, corev1.EventTypeNormal, reason)
	}
	if out := r.cleanup(ctx, obj); out.stop {
		// The Cleanup hook holds the deletion: every child stays until it lets go.
		return r.holdDeletion(ctx, obj, out, corev1.EventTypeWarning, EventDeletionBlocked)
	}
	inventory := ssa.UnionObjects(obj.GetAddonStatus().Inventory.Objects(), pending)
	// Children are deleted with the identity that created them: a ServiceAccount of the
	// add-on's namespace outside the trusted namespaces.
	id, refusal, err := r.identityFor(obj, r.opts.Settings.Load().Tenancy, r.deletionSource(obj))
	if err == nil && refusal != "" && len(inventory) > 0 {
		err = errors.New(refusal)
	}
	switch {
	case err != nil:
	case obj.GetAddonSpec().DeletionPolicy == addonsv1alpha1.DeletionPolicyOrphan:
		err = r.orphan(ctx, obj, inventory, id)
	case len(inventory) > 0:
		toDelete := slices.DeleteFunc(slices.Clone(inventory), func(ref addonsv1alpha1.ObjectReference) bool {
			return r.manager.Ignored(ctx, ref)
		})
		var held []ssa.Held
		held, err = id.manager.DeleteInStages(ctx, toDelete, r.gvk.Kind, owner)
		if err == nil && len(held) > 0 {
			original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
			msg := ssa.HeldMessage(held)
			if readyMessage(original) != msg {
				r.event(obj, corev1.EventTypeWarning, EventDeletionBlocked, "Delete", "%s", msg)
			}
			_ = r.summarize(&reconcileState{addon: obj}, deleting(msg)) // a deleting outcome carries no error
			return ctrl.Result{RequeueAfter: deletionRecheck}, r.patchStatus(ctx, original, obj)
		}
	}
	if err != nil && ssa.IsForbidden(err) && r.namespaceGoing(ctx, obj.GetNamespace()) {
		// The namespace, its ServiceAccount and their RoleBindings are going: what the
		// ServiceAccount may no longer delete in it goes with it. Anything it had created
		// elsewhere stays, and the event says so.
		r.event(obj, corev1.EventTypeWarning, EventDeletionBlocked, "Delete",
			"Namespace %s is being deleted and %s may no longer delete the children; leaving them: %v", obj.GetNamespace(), id.describe(), err)
		err = nil
	}
	if err != nil {
		original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
		_ = r.summarize(&reconcileState{addon: obj}, deleting("deleting children: "+err.Error())) // err is returned below
		if ssa.IsForbidden(err) {
			return ctrl.Result{RequeueAfter: forbiddenRetry}, r.patchStatus(ctx, original, obj)
		}
		return ctrl.Result{}, errors.Join(err, r.patchStatus(ctx, original, obj))
	}
	if err := r.removeFinalizer(ctx, obj); err != nil {
		return ctrl.Result{}, err
	}
	forgetInstance(r.gvk.Kind, obj.GetNamespace(), obj.GetName())
	r.renders.forget(owner)
	r.written.forget(owner)
	log.FromContext(ctx).Info("Deleted add-on and its children", "objects", len(inventory))
	return ctrl.Result{}, nil
}

// holdDeletion ends a deletion that out holds before any child is deleted: it records an
// event of eventType and eventReason (none when eventReason is empty) when out's message
// is new, and writes the conditions of out.
func (r *Reconciler) holdDeletion(ctx context.Context, obj addonsv1alpha1.Addon, out outcome, eventType, eventReason string) (ctrl.Result, error) {
	original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
	if eventReason != "" && readyMessage(original) != out.message {
		r.event(obj, eventType, eventReason, "Delete", "%s", out.message)
	}
	err := r.summarize(&reconcileState{addon: obj}, out)
	return ctrl.Result{RequeueAfter: out.requeueAfter}, errors.Join(err, r.patchStatus(ctx, original, obj))
}

// dependentsExist ends a deletion that waits for the add-ons that depend on the deleted
// one with Ready=False and Progressing=True, reason DependentsExist.
func dependentsExist(message string) outcome {
	return outcome{stop: true, class: classDeleting, reason: addonsv1alpha1.ReasonDependentsExist, message: message}
}

// awaitDependents is the first phase of a deletion. While add-ons that depend on obj
// exist (they name it in spec.dependsOn, or follow it: Definition.Follows), found through
// the DependencyField index of every kind in AddonKinds, the deletion waits with reason
// DependentsExist and nothing of obj's is deleted; their events wake it (deletionWaits).
// A dependent being deleted counts until kaddons has released it (removed its finalizer,
// its children gone), so that a set of add-ons deleted at once goes leaves first.
//
// Not counted: a dependent in another namespace the tenancy does not trust, which would
// let a tenant hold an add-on it cannot write; and a dependent being deleted whose own
// deletion obj's holds in turn, through dependents that are all being deleted (a
// dependsOn cycle), as each would wait for the other forever. An add-on with
// deletionPolicy Orphan does not wait: its children stay.
func (r *Reconciler) awaitDependents(ctx context.Context, obj addonsv1alpha1.Addon) outcome {
	if len(r.opts.AddonKinds) == 0 || obj.GetAddonSpec().DeletionPolicy == addonsv1alpha1.DeletionPolicyOrphan {
		return proceed()
	}
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	waits := r.targets.deletions()
	// Until it knows whom it waits for, any add-on's event wakes it: a dependent that goes
	// between the list below and the record after it still does.
	waits.expect(owner, nil)
	self := addonKey{kind: r.gvk.Kind, namespace: obj.GetNamespace(), name: obj.GetName()}
	holding, err := r.holdingDependents(ctx, self, r.opts.Settings.Load().Tenancy)
	if err != nil {
		waits.done(owner) // retried with back-off
		out := deleting("reading the add-ons that depend on it: " + err.Error())
		out.err = err
		return out
	}
	if len(holding) == 0 {
		waits.done(owner)
		return proceed()
	}
	keys := make([]string, 0, len(holding))
	for _, d := range holding {
		keys = append(keys, d.key.String())
	}
	waits.expect(owner, keys)
	return dependentsExist(dependentsMessage(holding)).after(dependentsRecheck)
}

// holdingDependents returns the dependents of target that hold its deletion: those that
// may (holds), less those being deleted that target's deletion holds in turn (a cycle).
func (r *Reconciler) holdingDependents(ctx context.Context, target addonKey, tenancy *Tenancy) ([]dependent, error) {
	named, err := r.dependentsNaming(ctx, target)
	if err != nil {
		return nil, err
	}
	var holding []dependent
	for _, d := range named {
		if !holds(target, d, tenancy) {
			continue
		}
		if d.deleting() {
			cycle, err := r.leadsBackTo(ctx, d.key, target, tenancy)
			if err != nil {
				return nil, err
			}
			if cycle {
				continue
			}
		}
		holding = append(holding, d)
	}
	return holding, nil
}

// dependent is an add-on that names another in spec.dependsOn or follows it.
type dependent struct {
	key addonKey
	// addon is the cache's own object: read only.
	addon addonsv1alpha1.Addon
}

// deleting reports whether the dependent is being deleted.
func (d dependent) deleting() bool { return !d.addon.GetDeletionTimestamp().IsZero() }

// holds reports whether d may hold the deletion of target: it lives, or is being deleted
// and kaddons has not released it yet; and it is in target's namespace or in one the
// tenancy trusts.
func holds(target addonKey, d dependent, tenancy *Tenancy) bool {
	if d.deleting() && !controllerutil.ContainsFinalizer(d.addon, Finalizer) {
		return false
	}
	return d.key.namespace == target.namespace || tenancy.Trusts(d.key.namespace)
}

// dependentsNaming lists, from the cache, the add-ons of every kind in AddonKinds that
// depend on target or follow it, through their DependencyField index. A kind the API
// server does not serve has none.
func (r *Reconciler) dependentsNaming(ctx context.Context, target addonKey) ([]dependent, error) {
	var named []dependent
	for _, kind := range r.opts.AddonKinds {
		gvk, err := apiutil.GVKForObject(kind, r.scheme)
		if err != nil {
			return nil, fmt.Errorf("add-on kind %T is not registered: %w", kind, err)
		}
		addons, err := r.listAddonsOf(ctx, gvk, client.MatchingFields{DependencyField: target.String()})
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for _, a := range addons {
			named = append(named, dependent{key: addonKey{kind: gvk.Kind, namespace: a.GetNamespace(), name: a.GetName()}, addon: a})
		}
	}
	return named, nil
}

// leadsBackTo reports whether target depends, through add-ons that are all being deleted
// and may hold a deletion (holds), on from: whether target is among the dependents of
// from, of theirs, and so on. It visits at most maxCycleWalk add-ons.
func (r *Reconciler) leadsBackTo(ctx context.Context, from, target addonKey, tenancy *Tenancy) (bool, error) {
	visited := map[addonKey]bool{from: true}
	queue := []addonKey{from}
	for len(queue) > 0 && len(visited) <= maxCycleWalk {
		next := queue[0]
		queue = queue[1:]
		named, err := r.dependentsNaming(ctx, next)
		if err != nil {
			return false, err
		}
		for _, d := range named {
			if !d.deleting() || !holds(next, d, tenancy) {
				continue
			}
			if d.key == target {
				return true, nil
			}
			if !visited[d.key] {
				visited[d.key] = true
				queue = append(queue, d.key)
			}
		}
	}
	return false, nil
}

// dependentsMessage names the dependents a deletion waits for, sorted, up to
// maxNamedDependents of them.
func dependentsMessage(deps []dependent) string {
	names := make([]string, 0, len(deps))
	for _, d := range deps {
		name := d.key.String()
		if d.deleting() {
			name += " (being deleted)"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	listed := strings.Join(names[:min(len(names), maxNamedDependents)], ", ")
	if len(names) > maxNamedDependents {
		listed += fmt.Sprintf(" and %d more", len(names)-maxNamedDependents)
	}
	return fmt.Sprintf("deletion waits for the add-ons that depend on it (%d): %s; nothing is deleted until they are gone or no longer name it",
		len(names), listed)
}

// orphan hands the children over: it removes kaddons' instance labels and the owner
// reference to obj from each of them, and leaves them running.
func (r *Reconciler) orphan(ctx context.Context, obj addonsv1alpha1.Addon, inventory []addonsv1alpha1.ObjectReference, id identity) error {
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	var errs []error
	for _, ref := range inventory {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := id.live.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !ssa.OwnedBy(live.GetLabels(), r.gvk.Kind, owner) {
			continue
		}
		base := live.DeepCopy()
		labels := live.GetLabels()
		for k := range ssa.InstanceLabels(r.gvk.Kind, owner) {
			delete(labels, k)
		}
		live.SetLabels(labels)
		refs := slices.DeleteFunc(live.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == obj.GetUID() })
		live.SetOwnerReferences(refs)
		if err := id.manager.Client.Patch(ctx, live, client.MergeFrom(base), client.FieldOwner(ssa.FieldManager)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("orphaning %s: %w", ref, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.event(obj, corev1.EventTypeNormal, EventOrphaned, "Delete", "Left %d objects running without kaddons labels or owner references", len(inventory))
	return nil
}

// namespaceGoing reports whether namespace is being deleted (or is gone).
func (r *Reconciler) namespaceGoing(ctx context.Context, namespace string) bool {
	ns := &corev1.Namespace{}
	if err := r.reader.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return apierrors.IsNotFound(err)
	}
	return !ns.DeletionTimestamp.IsZero()
}
