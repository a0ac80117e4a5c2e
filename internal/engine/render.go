package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// RenderInput is everything a render reads: the add-on, the package it resolved to, the
// namespace its objects go to, what the definition's Inputs computed, and the
// operator-wide settings of this reconcile.
type RenderInput struct {
	// Addon is the add-on resource. Transforms must not modify it.
	Addon addonsv1alpha1.Addon
	// Package is the resolved package (add-on name and version).
	Package channels.Resolved
	// TargetNamespace is where the add-on's namespaced objects go (Definition.TargetNamespace).
	TargetNamespace string
	// Inputs is what Definition.Inputs computed; nil when the definition has none.
	Inputs any
	// Settings is the reconcile's snapshot of the operator-wide settings.
	Settings Settings
}

// ObjectTransform edits the rendered objects of one add-on.
type ObjectTransform func(ctx context.Context, in RenderInput, objects *Objects) error

// WaitError is returned by a Definition's Inputs when something the add-on follows is
// not there yet. The engine then applies nothing, reports Progressing with reason
// DependencyNotReady and the message, and waits for the followed add-on to change.
type WaitError struct {
	// Message says what the add-on waits for.
	Message string
}

func (e *WaitError) Error() string { return e.Message }

// Waiting returns a WaitError with a formatted message.
func Waiting(format string, args ...any) error {
	return &WaitError{Message: fmt.Sprintf(format, args...)}
}

// InputRequest is what a Definition's Inputs reads.
type InputRequest struct {
	// Addon is the add-on resource.
	Addon addonsv1alpha1.Addon
	// Package is the resolved package (add-on name and version).
	Package channels.Resolved
	// TargetNamespace is where the add-on's namespaced objects go.
	TargetNamespace string
	// Cache reads through the engine's cache, which holds only objects kaddons manages
	// (and the add-ons). A no-op reconcile must read only from here.
	Cache client.Reader
	// API reads from the API server directly: for objects kaddons does not manage yet,
	// such as one to adopt. Each read is a request; use it only when the cache cannot
	// answer.
	API client.Reader
}

// BlockedError is returned by a Definition's Inputs when the add-on cannot be rendered
// until something in the cluster or the spec changes (an existing Corefile that cannot be
// migrated). The engine applies nothing, reports Stalled with Reason and Message, and
// looks again after a minute.
type BlockedError struct {
	// Reason is the condition reason, a constant of api/v1alpha1.
	Reason string
	// Message says what blocks the add-on and how to unblock it.
	Message string
}

func (e *BlockedError) Error() string { return e.Message }

// blockedRetry is how often a blocked add-on looks at the cluster again.
const blockedRetry = time.Minute

// rendered is the render phase's result.
type rendered struct {
	// objects are the transformed, labelled objects, in apply order. The render cache
	// keeps an encoded copy; these are the reconcile's own.
	objects *Objects
	// key is what, besides the add-on's UID and generation and the package's output,
	// decides the objects: the source's digest, the version, the inputs and the registry
	// mirror.
	key string
}

// render computes the definition's inputs, builds the package with kustomize, and runs
// the transforms: the definition's typed fields, the registry mirror, the user's patches,
// the placement in namespaces, and kaddons' labels. Errors caused by the spec or the
// package (a bad patch, a kind the controller does not watch) are terminal.
func (r *Reconciler) render(ctx context.Context, st *reconcileState) outcome {
	in := RenderInput{Addon: st.addon, Package: st.resolved, TargetNamespace: r.def.TargetNamespace(st.addon),
		Settings: st.settings}
	inputsKey := ""
	if r.def.Inputs != nil {
		value, err := r.def.Inputs(ctx, InputRequest{Addon: st.addon, Package: st.resolved, TargetNamespace: in.TargetNamespace,
			Cache: r.client, API: r.actingAs(st).live})
		if err != nil {
			var wait *WaitError
			if errors.As(err, &wait) {
				return progressing(addonsv1alpha1.ReasonDependencyNotReady, wait.Message)
			}
			var blocked *BlockedError
			if errors.As(err, &blocked) {
				return refused(blocked.Reason, blocked.Message).after(blockedRetry)
			}
			out := failed(addonsv1alpha1.ReasonRenderFailed, fmt.Errorf("reading the inputs of %s: %w", r.gvk.Kind, err))
			out.message = err.Error()
			return out
		}
		key, err := json.Marshal(value)
		if err != nil {
			return failed(addonsv1alpha1.ReasonRenderFailed, fmt.Errorf("serialising the inputs of %s: %w", r.gvk.Kind, err))
		}
		in.Inputs, inputsKey = value, string(key)
	}
	key := strings.Join([]string{st.artifact.Digest, st.resolved.Version, inputsKey, st.settings.RegistryMirror}, "\x00")
	name := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}

	manifest, err := st.catalog.Render(st.resolved)
	if err != nil {
		return renderFailure(err, r.gvk.Kind, st.resolved.Version)
	}
	if objects, ok := r.renders.get(name, st.addon, key, manifest); ok {
		st.rendered = rendered{objects: objects, key: key}
		return proceed()
	}
	objects, err := r.transform(ctx, in, manifest)
	if err != nil {
		return renderFailure(err, r.gvk.Kind, st.resolved.Version)
	}
	for _, o := range objects.Items {
		if !r.watches(o.GroupVersionKind()) {
			return stalled(addonsv1alpha1.ReasonRenderFailed, &channels.Error{Reason: addonsv1alpha1.ReasonRenderFailed,
				Message: fmt.Sprintf("package %s/%s contains %s %s, a kind the %s controller does not manage",
					st.resolved.Addon, st.resolved.Version, o.Kind, o.GetName(), r.gvk.Kind)})
		}
	}
	if err := checkWaves(objects); err != nil {
		return stalled(addonsv1alpha1.ReasonWaveCycle, err)
	}
	r.renders.put(name, st.addon, key, manifest, objects)
	st.rendered = rendered{objects: objects, key: key}
	return proceed()
}

// checkWaves refuses rendered objects whose apply waves do not form a DAG, so that a
// render shows it and no hook runs for a package that cannot be applied (the apply
// checks again before it writes).
func checkWaves(objects *Objects) error {
	items := make([]*unstructured.Unstructured, 0, len(objects.Items))
	for _, o := range objects.Items {
		items = append(items, o.UnstructuredObject())
	}
	_, err := ssa.PlanWaves(items)
	return err
}

// renderFailure maps a render error to its outcome: a *channels.Error names a spec or
// package problem (terminal); anything else is retried.
func renderFailure(err error, kind, version string) outcome {
	var ce *channels.Error
	if errors.As(err, &ce) {
		out := stalled(ce.Reason, err)
		out.message = ce.Error()
		return out
	}
	out := failed(addonsv1alpha1.ReasonRenderFailed, fmt.Errorf("rendering %s %s: %w", kind, version, err))
	out.message = err.Error()
	return out
}

// transform parses the package's YAML (once per package output: parseCache) and runs
// every transform over a copy of it, in order.
func (r *Reconciler) transform(ctx context.Context, in RenderInput, manifest string) (*Objects, error) {
	objects, err := r.parsed.objects(ctx, manifest)
	if err != nil {
		return nil, err
	}
	transforms := append([]ObjectTransform{}, r.def.Transforms...)
	transforms = append(transforms, mirrorImages, ApplyPatches, setNamespace(r.mapper, r.def), r.addLabels)
	for _, t := range transforms {
		if err := t(ctx, in, objects); err != nil {
			return nil, err
		}
	}
	sortObjects(ctx, objects)
	return objects, nil
}

// addLabels is the transform that puts the add-on's instance labels on every object.
func (r *Reconciler) addLabels(_ context.Context, in RenderInput, objects *Objects) error {
	labels := ssa.InstanceLabels(r.gvk.Kind, types.NamespacedName{Namespace: in.Addon.GetNamespace(), Name: in.Addon.GetName()})
	for _, o := range objects.Items {
		o.AddLabels(labels)
	}
	return nil
}

// watches reports whether gvk is one of the add-on's declared children.
func (r *Reconciler) watches(gvk schema.GroupVersionKind) bool {
	for _, c := range r.def.Children {
		if c == gvk {
			return true
		}
	}
	return false
}
