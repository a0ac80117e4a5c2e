package engine

import (
	"context"
	"slices"
	"sync"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The engine's caches in memory, each keyed by add-on or by package output. None is a
// source of truth: losing any of them costs a render, a parse or a status comparison.

// byAddon is a map from add-on to entry, safe for concurrent use: the shape the engine's
// per-add-on caches share. Its entries go with their add-on (forget).
type byAddon[T any] struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]T
}

// load returns name's entry.
func (c *byAddon[T]) load(name types.NamespacedName) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	return e, ok
}

// store records name's entry.
func (c *byAddon[T]) store(name types.NamespacedName, e T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]T{}
	}
	c.entries[name] = e
}

// forget drops the entry of a deleted add-on.
func (c *byAddon[T]) forget(name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// renderCache keeps each add-on's last rendered objects, so that reconciles triggered
// by its children (status changes during a rollout, drift) do not run the transforms
// again. An entry is valid for one add-on UID and generation, one render key (the
// version, what the Default hook filled in and returned, and the registry mirror) and
// one kustomize output of the package; anything else renders afresh. The objects are
// kept as compact JSON, a fraction of the memory of their decoded form (this cache holds
// every add-on's), and each hit decodes a copy of its own, still far cheaper than the
// transforms.
type renderCache struct {
	byAddon[renderEntry]
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
	e, ok := c.load(name)
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
	c.store(name, e)
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

// statusCache remembers the last status the engine wrote for each add-on. Until the
// informer cache shows that write, the cached add-on still carries the status before it,
// and comparing with that would either write the same status twice or, worse, skip a
// write that is needed because the cache's old status happens to match the new one.
type statusCache struct {
	byAddon[writtenStatus]
}

// writtenStatus is one status write: the status, for which add-on UID, and the resource
// version of the add-on it was written over.
type writtenStatus struct {
	uid                 types.UID
	baseResourceVersion string
	status              *addonsv1alpha1.AddonStatus
}

// restore puts the status the engine last wrote into obj when the cache has not caught up
// with that write: that status, not the cached one, is what the API server holds (and
// what plan must compare).
func (c *statusCache) restore(name types.NamespacedName, obj addonsv1alpha1.Addon) {
	if w, ok := c.load(name); ok && w.uid == obj.GetUID() && w.baseResourceVersion == obj.GetResourceVersion() {
		*obj.GetAddonStatus() = *w.status.DeepCopy()
	}
}
