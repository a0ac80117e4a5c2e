package engine

import (
	"context"
	"fmt"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Finalizer holds an add-on until its children, cluster-scoped ones included, are gone.
const Finalizer = "addons.kaddons.dev/finalizer"

// addFinalizer adds the engine's finalizer with a JSON patch that appends the one entry
// and tests the resource version, so that it can neither drop another controller's
// finalizer nor write over a change it has not seen. A new add-on gets its finalizer from
// writeAhead instead, in the patch that records the objects its first apply creates; this
// is for an add-on that has children but lost its finalizer.
func (r *Reconciler) addFinalizer(ctx context.Context, obj addonsv1alpha1.Addon) error {
	ops := []patchOp{{Op: opTest, Path: "/metadata/resourceVersion", Value: obj.GetResourceVersion()}, addFinalizerOp(obj)}
	if err := r.patchMetadata(ctx, obj, ops); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	return nil
}

// addFinalizerOp is the JSON patch operation that appends the engine's finalizer to obj's.
func addFinalizerOp(obj addonsv1alpha1.Addon) patchOp {
	if len(obj.GetFinalizers()) == 0 {
		return patchOp{Op: opAdd, Path: "/metadata/finalizers", Value: []string{Finalizer}}
	}
	return patchOp{Op: opAdd, Path: "/metadata/finalizers/-", Value: Finalizer}
}

// removeFinalizer removes the engine's finalizer, and only it, with a JSON patch that
// tests the entry it removes.
func (r *Reconciler) removeFinalizer(ctx context.Context, obj addonsv1alpha1.Addon) error {
	for i, f := range obj.GetFinalizers() {
		if f != Finalizer {
			continue
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		ops := []patchOp{{Op: opTest, Path: path, Value: Finalizer}, {Op: "remove", Path: path}}
		// An add-on already gone has no finalizer left to remove.
		if err := client.IgnoreNotFound(r.patchMetadata(ctx, obj, ops)); err != nil {
			return fmt.Errorf("removing finalizer: %w", err)
		}
		return nil
	}
	return nil
}
