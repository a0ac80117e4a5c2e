package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// EventOrphaned is recorded when an add-on is deleted with deletionPolicy Orphan.
const EventOrphaned = "Orphaned"

// reconcileDelete removes every child in the inventory, cluster-scoped ones included, in
// reverse apply order (or, with deletionPolicy Orphan, hands them over), then releases
// the finalizer. Children already gone are skipped.
func (r *Reconciler) reconcileDelete(ctx context.Context, obj addonsv1alpha1.Addon) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		return ctrl.Result{}, nil
	}
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	inventory := obj.GetAddonStatus().Inventory
	var err error
	if obj.GetAddonSpec().DeletionPolicy == addonsv1alpha1.DeletionPolicyOrphan {
		err = r.orphan(ctx, obj, inventory)
	} else {
		toDelete := slices.DeleteFunc(slices.Clone(inventory), func(ref addonsv1alpha1.ObjectReference) bool {
			return r.applier.ignored(ctx, ref)
		})
		_, err = deleteObjects(ctx, r.client, r.reader, toDelete, r.gvk.Kind, owner)
	}
	if err != nil {
		original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
		markDeleting(obj.GetAddonStatus(), obj.GetGeneration(), "deleting children: "+err.Error())
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

// deleteObjects deletes refs in reverse stage order, skipping objects that are already gone
// or that no longer carry the owner's instance labels (someone else took them over).
// It returns the refs it deleted or found gone.
func deleteObjects(ctx context.Context, c client.Client, reader client.Reader, refs []addonsv1alpha1.ObjectReference,
	kind string, owner types.NamespacedName) ([]addonsv1alpha1.ObjectReference, error) {
	logger := log.FromContext(ctx)
	ordered := slices.Clone(refs)
	slices.SortStableFunc(ordered, func(x, y addonsv1alpha1.ObjectReference) int {
		return stageOf(y.Group, y.Kind) - stageOf(x.Group, x.Kind)
	})
	var (
		done []addonsv1alpha1.ObjectReference
		errs []error
	)
	for _, ref := range ordered {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			done = append(done, ref)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !ownedBy(live.GetLabels(), kind, owner) {
			logger.Info("Not deleting object that is no longer labelled as ours", "object", ref.String())
			done = append(done, ref)
			continue
		}
		err = c.Delete(ctx, live, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrTo(live.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", ref, err))
			continue
		}
		logger.Info("Deleted object", "object", ref.String())
		done = append(done, ref)
	}
	return done, errors.Join(errs...)
}

// orphan hands the children over: it removes kaddons' instance labels and the owner
// reference to obj from each of them, and leaves them running.
func (r *Reconciler) orphan(ctx context.Context, obj addonsv1alpha1.Addon, inventory []addonsv1alpha1.ObjectReference) error {
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	var errs []error
	for _, ref := range inventory {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := r.reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !ownedBy(live.GetLabels(), r.gvk.Kind, owner) {
			continue
		}
		base := live.DeepCopy()
		labels := live.GetLabels()
		for k := range instanceLabels(r.gvk.Kind, owner) {
			delete(labels, k)
		}
		live.SetLabels(labels)
		refs := slices.DeleteFunc(live.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == obj.GetUID() })
		live.SetOwnerReferences(refs)
		if err := r.client.Patch(ctx, live, client.MergeFrom(base), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("orphaning %s: %w", ref, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.event(obj, corev1.EventTypeNormal, EventOrphaned, "Delete", "Left %d objects running without kaddons labels or owner references", len(inventory))
	return nil
}
