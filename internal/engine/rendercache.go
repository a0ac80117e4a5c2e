package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// renderCache keeps each add-on's last rendered objects, so that reconciles triggered
// by its children (status changes during a rollout, drift) do not run the transforms
// again. An entry is valid for one add-on UID and generation, one render key (the version
// and the definition's inputs) and one kustomize output of the package; anything else renders afresh. The objects are shared
// and must not be modified.
type renderCache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]renderEntry
}

type renderEntry struct {
	uid        types.UID
	generation int64
	key        string
	manifest   string
	objects    *manifest.Objects
}

// get returns the cached objects of name when they were rendered from the same inputs.
func (c *renderCache) get(name types.NamespacedName, obj addonsv1alpha1.Addon, key, rendered string) (*manifest.Objects, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok || e.uid != obj.GetUID() || e.generation != obj.GetGeneration() || e.key != key || e.manifest != rendered {
		return nil, false
	}
	return e.objects, true
}

// put records the objects rendered for name from these inputs.
func (c *renderCache) put(name types.NamespacedName, obj addonsv1alpha1.Addon, key, rendered string, objects *manifest.Objects) {
	if rendered == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]renderEntry{}
	}
	c.entries[name] = renderEntry{uid: obj.GetUID(), generation: obj.GetGeneration(), key: key, manifest: rendered, objects: objects}
}

// forget drops the entry of a deleted add-on.
func (c *renderCache) forget(name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// statusCache remembers the last status the engine wrote for each add-on. Until the
// informer cache shows that write, the cached add-on still carries the status before it,
// and comparing with that would either write the same status twice or, worse, skip a
// write that is needed because the cache's old status happens to match the new one.
type statusCache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]writtenStatus
}

// writtenStatus is one status write: the status, for which add-on UID, and the resource
// version of the add-on it was written over.
type writtenStatus struct {
	uid                 types.UID
	baseResourceVersion string
	status              *addonsv1alpha1.AddonStatus
}

func (c *statusCache) get(name types.NamespacedName) (writtenStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.entries[name]
	return w, ok
}

func (c *statusCache) put(name types.NamespacedName, w writtenStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]writtenStatus{}
	}
	c.entries[name] = w
}

func (c *statusCache) forget(name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}
