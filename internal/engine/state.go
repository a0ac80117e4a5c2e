package engine

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// reconcileState carries one reconcile's facts between the engine's phases and the KDP
// extension points the engine plugs in (the applier finds it in its context and reports
// back through it).
type reconcileState struct {
	addon    addonsv1alpha1.Addon
	resolved channels.Resolved
	// settings is this reconcile's snapshot of the operator-wide settings.
	settings Settings
	// channel is the channel the version was resolved from; empty for a pinned version.
	channel string
	// wanted is the version the spec asks for when a failed upgrade pinned resolved to
	// the last healthy version.
	wanted string
	// requeueAfter asks for another reconcile, e.g. when an upgrade's timeout runs out.
	requeueAfter time.Duration
	objects      *manifest.Objects
	// inputs is what the definition's Inputs computed; inputsKey its serialised form.
	inputs    any
	inputsKey string

	// skipApply is set by the plan phase when nothing needs to be written.
	skipApply bool
	// onlyApply, when set by the plan phase, limits the apply to the objects that drifted.
	onlyApply map[addonsv1alpha1.ObjectReference]bool
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
	// live holds what the cache knew of each desired object before applying it.
	live map[addonsv1alpha1.ObjectReference]liveInfo
	// drifted lists the objects an apply changed although the add-on's inputs did not.
	drifted []addonsv1alpha1.ObjectReference
	// inputsChanged is true when the generation or version differs from the last apply.
	inputsChanged bool
	// recreated lists objects deleted and re-created to change immutable fields.
	recreated []addonsv1alpha1.ObjectReference
	// modeErr is an unknown addons.kaddons.dev/mode annotation on a child.
	modeErr error
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

// liveInfo is the cached state of one child before an apply.
type liveInfo struct {
	exists          bool
	resourceVersion string
	generation      int64
}

// ownerKey formats the reconciled add-on the way ownerOf formats a child's owner.
func (st *reconcileState) ownerKey() string {
	owner := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}
	return ownerOf(instanceLabels(st.addon.GetObjectKind().GroupVersionKind().Kind, owner))
}

// renderKey is what, besides the add-on's UID and generation and the package's output,
// decides the rendered objects: the version, the definition's inputs and the registry
// mirror.
func (st *reconcileState) renderKey() string {
	return st.resolved.Version + "\x00" + st.inputsKey + "\x00" + st.settings.RegistryMirror
}

// renderContext carries what KDP's rendering reads besides the add-on: the resolved
// package for the manifest controller and the definition's inputs for the transforms.
func (st *reconcileState) renderContext(ctx context.Context) context.Context {
	return withSettings(withInputs(channels.WithResolved(ctx, st.resolved), st.inputs), st.settings)
}
