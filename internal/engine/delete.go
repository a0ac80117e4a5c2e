package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
)

// deletionRecheck is how often a deletion held by finalizers looks again (the children's
// own events also wake it).
const deletionRecheck = 5 * time.Second

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

// reconcileDelete removes every child in the inventory and in the pending write-ahead
// record, cluster-scoped ones included, in reverse apply order (or, with deletionPolicy
// Orphan, hands them over), then releases the finalizer. Children already gone are
// skipped, and so are objects that do not carry the add-on's labels.
func (r *Reconciler) reconcileDelete(ctx context.Context, obj addonsv1alpha1.Addon, pending []addonsv1alpha1.ObjectReference) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		return ctrl.Result{}, nil
	}
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if out := r.cleanup(ctx, obj); out.stop {
		// The Cleanup hook holds the deletion: every child stays until it lets go.
		original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
		if readyMessage(original) != out.message {
			r.event(obj, corev1.EventTypeWarning, EventDeletionBlocked, "Delete", "%s", out.message)
		}
		err := r.summarize(&reconcileState{addon: obj}, out)
		return ctrl.Result{RequeueAfter: out.requeueAfter}, errors.Join(err, r.patchStatus(ctx, original, obj))
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
