package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	key := strings.Join([]string{st.source.Digest, st.resolved.Version, inputsKey, st.settings.RegistryMirror}, "\x00")
	name := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}

	manifest, err := st.channels.Render(st.resolved)
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
	r.renders.put(name, st.addon, key, manifest, objects)
	st.rendered = rendered{objects: objects, key: key}
	return proceed()
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

// renderCache keeps each add-on's last rendered objects, so that reconciles triggered
// by its children (status changes during a rollout, drift) do not run the transforms
// again. An entry is valid for one add-on UID and generation, one render key (the
// version, the definition's inputs and the registry mirror) and one kustomize output of
// the package; anything else renders afresh. The objects are kept as compact JSON, a
// fraction of the memory of their decoded form (this cache holds every add-on's), and
// each hit decodes a copy of its own, still far cheaper than the transforms.
type renderCache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]renderEntry
}

type renderEntry struct {
	uid        types.UID
	generation int64
	key        string
	manifest   string
	objects    [][]byte
	blobs      [][]byte
}

// get returns the cached objects of name when they were rendered from the same inputs.
func (c *renderCache) get(name types.NamespacedName, obj addonsv1alpha1.Addon, key, manifest string) (*Objects, bool) {
	c.mu.Lock()
	e, ok := c.entries[name]
	c.mu.Unlock()
	if !ok || e.uid != obj.GetUID() || e.generation != obj.GetGeneration() || e.key != key || e.manifest != manifest {
		return nil, false
	}
	objects := &Objects{Blobs: e.blobs, Items: make([]*Object, 0, len(e.objects))}
	for _, data := range e.objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, false
		}
		o, err := newObject(u)
		if err != nil {
			return nil, false
		}
		objects.Items = append(objects.Items, o)
	}
	return objects, true
}

// put records the objects rendered for name from these inputs. Objects that cannot be
// encoded are not cached: the next reconcile renders them again.
func (c *renderCache) put(name types.NamespacedName, obj addonsv1alpha1.Addon, key, manifest string, objects *Objects) {
	if manifest == "" {
		return
	}
	e := renderEntry{uid: obj.GetUID(), generation: obj.GetGeneration(), key: key, manifest: manifest,
		objects: make([][]byte, 0, len(objects.Items)), blobs: objects.Blobs}
	for _, o := range objects.Items {
		data, err := o.UnstructuredObject().MarshalJSON()
		if err != nil {
			return
		}
		e.objects = append(e.objects, data)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]renderEntry{}
	}
	c.entries[name] = e
}

// forget drops the entry of a deleted add-on.
func (c *renderCache) forget(name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// parseCache keeps the parsed objects of the last few package outputs, so that the
// add-ons of one package version, however many, parse its YAML once: each render gets
// deep copies, which cost a fraction of parsing. The add-ons of a kind use few versions
// at a time; a version beyond parseCacheSize pushes out the oldest.
type parseCache struct {
	mu      sync.Mutex
	entries []parsedManifest
}

type parsedManifest struct {
	manifest string
	objects  []*unstructured.Unstructured
	blobs    [][]byte
}

// parseCacheSize bounds the package outputs parseCache keeps per add-on kind.
const parseCacheSize = 8

// objects returns a fresh copy of manifest's objects, parsing it only when it is not
// cached.
func (c *parseCache) objects(ctx context.Context, manifest string) (*Objects, error) {
	c.mu.Lock()
	var hit parsedManifest
	found := false
	for _, e := range c.entries {
		if e.manifest == manifest {
			hit, found = e, true
			break
		}
	}
	c.mu.Unlock()
	if !found {
		parsed, err := parseObjects(ctx, manifest)
		if err != nil {
			return nil, err
		}
		entry := parsedManifest{manifest: manifest, blobs: parsed.Blobs}
		for _, o := range parsed.Items {
			entry.objects = append(entry.objects, o.UnstructuredObject().DeepCopy())
		}
		c.mu.Lock()
		c.entries = append(c.entries, entry)
		if len(c.entries) > parseCacheSize {
			c.entries = slices.Delete(c.entries, 0, 1)
		}
		c.mu.Unlock()
		// The parsed objects are this render's own; the cache keeps copies.
		return parsed, nil
	}
	out := &Objects{Blobs: slices.Clone(hit.blobs), Items: make([]*Object, 0, len(hit.objects))}
	for _, u := range hit.objects {
		o, err := newObject(u.DeepCopy())
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}
