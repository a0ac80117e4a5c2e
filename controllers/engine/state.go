package engine

import (
	"context"

	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers/channels"
)

// reconcileState carries one reconcile's facts between the engine's phases and the KDP
// extension points the engine plugs in (the applier runs inside KDP's Reconcile and
// reports back through it).
type reconcileState struct {
	addon    addonsv1alpha1.Addon
	resolved channels.Resolved
	objects  *manifest.Objects

	// applyCalled is set by the applier, so the engine knows KDP got as far as applying.
	applyCalled bool
	// applied lists the objects applied in this reconcile, with their new generation.
	applied map[addonsv1alpha1.ObjectReference]int64
	// inventory is the inventory to record after this reconcile.
	inventory []addonsv1alpha1.ObjectReference
	// pruned lists the objects deleted because they left the manifests.
	pruned []addonsv1alpha1.ObjectReference
	// applyErr is the first apply or prune failure.
	applyErr error
	// applyFailedObject names the object whose apply failed.
	applyFailedObject string
	// pruneErr is a failure to delete a pruned object.
	pruneErr error
}

type stateKey struct{}

func withState(ctx context.Context, st *reconcileState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

func stateFrom(ctx context.Context) *reconcileState {
	st, _ := ctx.Value(stateKey{}).(*reconcileState)
	return st
}
