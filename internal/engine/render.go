package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// RenderInput is everything a render reads: the add-on (as the Default hook filled it
// in), the package it resolved to, the namespace its objects go to, the inputs the
// Default hook returned, and the operator-wide settings of this reconcile.
type RenderInput struct {
	// Addon is the reconcile's copy of the add-on, with what the Default hook filled in.
	// Transforms must not modify it.
	Addon addonsv1alpha1.Addon
	// Package is the resolved package (add-on name and version).
	Package channels.Resolved
	// TargetNamespace is where the add-on's namespaced objects go (Definition.TargetNamespace).
	TargetNamespace string
	// Inputs is what the definition's Default hook returned in HookResult.Inputs; nil
	// when it returned none or the definition has no Default hook.
	Inputs any
	// Settings is the reconcile's snapshot of the operator-wide settings.
	Settings Settings
}

// ObjectTransform edits the rendered objects of one add-on.
type ObjectTransform func(ctx context.Context, in RenderInput, objects *Objects) error

// rendered is the render phase's result.
type rendered struct {
	// objects are the transformed, labelled objects, in apply order. The render cache
	// keeps an encoded copy; these are the reconcile's own.
	objects *Objects
	// key is what, besides the add-on's UID and generation and the package's output,
	// decides the objects: the source's digest, the version, what the Default hook
	// produced and the registry mirror.
	key string
}

// render builds the package (with kustomize, or a Helm chart with the Helm SDK), and runs the transforms: the definition's
// typed fields, the registry mirror, the user's patches, the Render extensions, the
// placement in namespaces, and kaddons' labels. Errors caused by the spec or the package (a bad patch, a kind the
// controller does not watch) are terminal.
func (r *Reconciler) render(ctx context.Context, st *reconcileState) outcome {
	in := RenderInput{Addon: st.addon, Package: st.resolved, TargetNamespace: r.def.TargetNamespace(st.addon),
		Inputs: st.defaulted.inputs, Settings: st.settings}
	extensionTargets, extensionsKey, out := r.renderTargets(ctx, st)
	if out.stop {
		return out
	}
	key := strings.Join([]string{st.artifact.Digest, st.resolved.Version, st.defaulted.key, st.settings.RegistryMirror,
		extensionsKey}, "\x00")
	name := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}

	req, out := r.packageRequest(ctx, st, in)
	if out.stop {
		return out
	}
	manifest, err := st.catalog.RenderPackage(ctx, req)
	if err != nil {
		return renderFailure(err, r.gvk.Kind, st.resolved.Version)
	}
	if objects, ok := r.renders.get(name, st.addon, key, manifest); ok {
		st.rendered = rendered{objects: objects, key: key}
		return proceed()
	}
	uncached := false
	objects, err := r.transform(ctx, in, manifest, r.renderByExtensions(st, extensionTargets, &uncached))
	if stop := (*extensionStop)(nil); errors.As(err, &stop) {
		return stop.out
	}
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
	if !uncached {
		r.renders.put(name, st.addon, key, manifest, objects)
	}
	st.rendered = rendered{objects: objects, key: key}
	return proceed()
}

// packageRequest returns what the catalog renders the package with. A Helm chart also
// reads the release (the definition's ReleaseName, or the component name, in the target
// namespace), the values of the typed fields and of spec.values, and the live cluster's
// capabilities; a kustomize package refuses values.
func (r *Reconciler) packageRequest(ctx context.Context, st *reconcileState, in RenderInput) (channels.Request, outcome) {
	req := channels.Request{Package: st.resolved, ReleaseName: st.addon.ComponentName(), Namespace: in.TargetNamespace}
	if r.def.ReleaseName != nil {
		req.ReleaseName = r.def.ReleaseName(st.addon)
	}
	var err error
	if r.def.UserValues != nil {
		if req.UserValues, err = r.def.UserValues(st.addon); err != nil {
			return req, stalled(addonsv1alpha1.ReasonValuesInvalid, err)
		}
	}
	if !st.catalog.IsChart(st.resolved) {
		return req, proceed()
	}
	if r.def.Values != nil {
		if req.Values, err = r.def.Values(in); err != nil {
			return req, stalled(addonsv1alpha1.ReasonValuesInvalid, err)
		}
	}
	if r.opts.Capabilities != nil {
		if req.Capabilities, err = r.opts.Capabilities.Get(ctx); err != nil {
			return req, failed(addonsv1alpha1.ReasonRenderFailed, err)
		}
	}
	return req, proceed()
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
// every transform over a copy of it, in order; extensions is the transform of the Render
// extensions, after the patches and before the placement.
func (r *Reconciler) transform(ctx context.Context, in RenderInput, manifest string, extensions ObjectTransform) (*Objects, error) {
	objects, err := r.parsed.objects(ctx, manifest)
	if err != nil {
		return nil, err
	}
	transforms := append([]ObjectTransform{}, r.def.Transforms...)
	transforms = append(transforms, mirrorImages, ApplyPatches, extensions, setNamespace(r.mapper, r.def), r.addLabels)
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
