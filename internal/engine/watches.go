package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Retry delays of a failed reconcile: doubled from MinRetryDelay on each failure in a row
// of the same add-on, up to MaxRetryDelay.
const (
	MinRetryDelay = 5 * time.Millisecond
	MaxRetryDelay = time.Minute
)

// RetryRateLimiter is the back-off of a reconcile that failed (a transient error: the
// API server restarting, refusing or timing out): controller-runtime's own exponential
// back-off, but capped at MaxRetryDelay instead of its 1000 s. A storm of failures (every
// watch re-list during an outage wakes every add-on, and each wake fails again) would
// otherwise push an add-on's next retry a quarter of an hour past the end of the outage,
// while it shows a stale failure. A success resets the add-on's delay.
func RetryRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](MinRetryDelay, MaxRetryDelay)
}

// SetupWithManager registers the controller: it watches the add-on kind and, through the
// shared cache, every child kind, mapping child events back to their add-on by label.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	concurrency := 0
	if r.opts.Concurrency != nil {
		concurrency = r.opts.Concurrency(r.gvk.Kind)
	}
	if concurrency <= 0 {
		concurrency = DefaultMaxConcurrentReconciles
	}
	// The add-on kind is watched as For would watch it, but through an echoHandler, so
	// that the events of the engine's own writes cost no reconcile (echoes); the logger
	// carries the keys For would give it.
	b := ctrl.NewControllerManagedBy(mgr).
		Named(r.name).
		Watches(r.def.Prototype, echoHandler{echoes: r.echoes, kind: r.gvk.GroupKind(), mapFn: self},
			builder.WithPredicates(specOrDeletionChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency, RateLimiter: RetryRateLimiter()}).
		WithLogConstructor(r.logConstructor(mgr.GetLogger()))
	for _, gvk := range r.def.Children {
		// The typed informer where the scheme has the kind: the one the engine's reads
		// use (see typedReads).
		b = b.Watches(ssa.TypedPrototype(mgr.GetScheme(), gvk), echoHandler{echoes: r.echoes, kind: gvk.GroupKind(), mapFn: r.mapChild(gvk)})
	}
	if r.opts.Settings != nil {
		// A change of the operator's settings (OperatorConfig) reconciles every add-on.
		b = b.WatchesRawSource(source.Channel(r.opts.Settings.subscribe(), handler.EnqueueRequestsFromMapFunc(r.mapAll)))
	}
	if changes := r.catalog.Changes(ChannelsRecheck); changes != nil {
		// A fixed channel file or package of a directory source reconciles every add-on,
		// so those stalled on it recover without a spec change.
		b = b.WatchesRawSource(source.Channel(changes, handler.EnqueueRequestsFromMapFunc(r.mapAll)))
	}
	if r.opts.Artifacts != nil {
		// A new artifact of an AddonSource (or its loss) reconciles the add-ons that name
		// it, found through the spec.sourceRef field index.
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), r.def.Prototype, SourceRefField,
			func(o client.Object) []string { return sourceRefOf(o.(addonsv1alpha1.Addon)) }); err != nil {
			return fmt.Errorf("indexing %s by %s: %w", r.gvk.Kind, SourceRefField, err)
		}
		b = b.WatchesRawSource(r.opts.Artifacts.watch(r.usersOf))
	}
	for _, obj := range r.opts.ReconcileAllOn {
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(r.mapAll))
	}
	if len(r.opts.AddonKinds) > 0 {
		// An add-on's event wakes the add-ons that depend on it or follow it, found through
		// this index rather than by listing every add-on of the kind on every event.
		r.targets = &dependencyTargets{}
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), r.def.Prototype, DependencyField,
			func(o client.Object) []string { return r.targets.note(r.def.dependencyKeys(o.(addonsv1alpha1.Addon))) }); err != nil {
			return fmt.Errorf("indexing %s by %s: %w", r.gvk.Kind, DependencyField, err)
		}
	}
	for _, kind := range r.opts.AddonKinds {
		gvk, err := apiutil.GVKForObject(kind, mgr.GetScheme())
		if err != nil {
			return fmt.Errorf("add-on kind %T is not registered: %w", kind, err)
		}
		b = b.Watches(kind, handler.EnqueueRequestsFromMapFunc(r.mapDependents(gvk.Kind)))
	}
	return b.Complete(r)
}

// logConstructor returns the reconcile logger a controller built with For gets: the
// controller's name, group and kind, and the add-on's namespace and name.
func (r *Reconciler) logConstructor(base logr.Logger) func(*reconcile.Request) logr.Logger {
	log := base.WithValues("controller", r.name, "controllerGroup", r.gvk.Group, "controllerKind", r.gvk.Kind)
	return func(req *reconcile.Request) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues(r.gvk.Kind, klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
	}
}

// ChannelsRecheck is how often a directory channels source is checked for changes: a
// change reaches the add-ons within it.
const ChannelsRecheck = 10 * time.Second

// CacheOptions restricts the manager's cache, for every child kind of defs, to objects
// that kaddons manages, so memory does not grow with unrelated objects in the cluster.
// HorizontalPodAutoscalers are cached unfiltered.
// Managed fields are stripped from everything cached.
func CacheOptions(sealer *ssa.Sealer, defs ...Definition) cache.Options {
	selector := labels.SelectorFromSet(labels.Set{ssa.LabelManagedBy: ssa.ManagedByValue})
	byObject := map[client.Object]cache.ByObject{}
	seen := map[schema.GroupVersionKind]bool{}
	for _, def := range defs {
		for _, gvk := range def.Children {
			if seen[gvk] {
				continue
			}
			seen[gvk] = true
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			byObject[u] = cache.ByObject{Label: selector, Transform: sealer.Transform(gvk.GroupKind())}
		}
	}
	// HorizontalPodAutoscalers are the user's, not kaddons': cached whole (they are few),
	// so that the plan phase can leave spec.replicas of the workloads they scale alone.
	byObject[&autoscalingv2.HorizontalPodAutoscaler{}] = cache.ByObject{}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
}

// specOrDeletionChanged passes add-on events that can change what to apply: a new
// generation, changed annotations or labels, or the start of deletion. Status writes,
// including the engine's own, do not trigger a reconcile.
func specOrDeletionChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
			},
		},
	)
}

// mapChild returns the map function of the events of children of kind gvk: to their
// add-on, through the instance labels. An object the cache holds as unsealed (kaddons did
// not write it, whatever its labels say) wakes its add-on only when the add-on's inventory
// or write-ahead record lists it: one that kaddons wrote before seals existed, or one it
// lost to an out-of-band change. Forged labels wake nothing.
func (r *Reconciler) mapChild(gvk schema.GroupVersionKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		if l[ssa.LabelManagedBy] != ssa.ManagedByValue || l[ssa.LabelKind] != r.name || l[ssa.LabelName] == "" {
			return nil
		}
		owner := types.NamespacedName{Namespace: l[ssa.LabelNamespace], Name: l[ssa.LabelName]}
		if ssa.Unsealed(o) {
			addon := r.newObject()
			ref := addonsv1alpha1.ObjectReference{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
				Namespace: o.GetNamespace(), Name: o.GetName()}
			if err := r.client.Get(ctx, owner, addon); err != nil || !inventoried(addon, ref) {
				return nil
			}
		}
		return []reconcile.Request{{NamespacedName: owner}}
	}
}

// mapDependents returns a map function for events of add-ons of kind: it finds the
// add-ons of this controller's kind that depend on the changed one, so they are
// re-evaluated when it appears or becomes Ready, and those whose deletion waits for it
// (deletionWaits), so they go on once it is gone or no longer names them.
func (r *Reconciler) mapDependents(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		requests := r.dependentsOf(ctx, kind, o)
		key := addonKey{kind: kind, namespace: o.GetNamespace(), name: o.GetName()}.String()
		return append(requests, r.targets.deletions().waiting(key)...)
	}
}

// mapAll lists every add-on of this controller's kind, from the cache.
func (r *Reconciler) mapAll(ctx context.Context, _ client.Object) []reconcile.Request {
	addons := r.listAddons(ctx)
	requests := make([]reconcile.Request, 0, len(addons))
	for _, a := range addons {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
	}
	return requests
}

// usersOf lists the add-ons of this controller's kind whose spec.sourceRef names the
// AddonSource name.
func (r *Reconciler) usersOf(ctx context.Context, name string) []reconcile.Request {
	addons := r.listAddons(ctx, client.MatchingFields{SourceRefField: name})
	requests := make([]reconcile.Request, 0, len(addons))
	for _, a := range addons {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
	}
	return requests
}

// listAddons lists the add-ons of this controller's kind from the cache (nil on error:
// it serves event mapping, which cannot report one).
func (r *Reconciler) listAddons(ctx context.Context, opts ...client.ListOption) []addonsv1alpha1.Addon {
	addons, err := r.listAddonsOf(ctx, r.gvk, opts...)
	if err != nil {
		return nil
	}
	return addons
}

// listAddonsOf lists the add-ons of kind gvk from the cache. Read only: the items are the
// cache's own, not copies.
func (r *Reconciler) listAddonsOf(ctx context.Context, gvk schema.GroupVersionKind, opts ...client.ListOption) ([]addonsv1alpha1.Addon, error) {
	obj, err := r.scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	list, ok := obj.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%sList is not a list", gvk.Kind)
	}
	opts = append(opts, client.UnsafeDisableDeepCopy)
	if err := r.client.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	addons := make([]addonsv1alpha1.Addon, 0, len(items))
	for _, item := range items {
		if a, ok := item.(addonsv1alpha1.Addon); ok {
			addons = append(addons, a)
		}
	}
	return addons, nil
}

// DependencyField is the field index on every add-on kind that maps another add-on
// ("Kind namespace/name") to the add-ons that depend on it (spec.dependsOn) or follow it
// (Definition.Follows).
const DependencyField = "kaddons.dependencies"

// dependencyKeys is the DependencyField index function of the definition's kind.
func (d Definition) dependencyKeys(a addonsv1alpha1.Addon) []string {
	var keys []string
	for _, dep := range a.GetAddonSpec().DependsOn {
		keys = append(keys, dependencyKey(a, dep).String())
	}
	if d.Follows != nil {
		for _, ref := range d.Follows(a) {
			keys = append(keys, dependencyKey(a, ref).String())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// dependentsOf lists the add-ons of this controller's kind whose dependsOn names o, or
// that follow o (Definition.Follows), through the DependencyField index.
func (r *Reconciler) dependentsOf(ctx context.Context, kind string, o client.Object) []reconcile.Request {
	target := addonKey{kind: kind, namespace: o.GetNamespace(), name: o.GetName()}.String()
	if !r.targets.mayHave(target) {
		return nil
	}
	addons := r.listAddons(ctx, client.MatchingFields{DependencyField: target})
	requests := make([]reconcile.Request, 0, len(addons))
	for _, a := range addons {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
	}
	return requests
}

// dependencyTargets is every key the DependencyField index of one add-on kind has held:
// the add-ons that some add-on of the kind depends on or follows. Every event of every
// add-on kind asks each controller for the add-ons of its kind that depend on the changed
// one (dependentsOf), and almost always none does: a key the index never held answers
// that without listing the index, which cost an allocated list, a field selector and an
// index look-up per controller and event, a few percent of the manager's CPU per new
// add-on.
//
// The index function records each key before the informer's indexer stores the add-on
// that names it, under the same lock as the store, so a list that could find a dependent
// never finds the key missing here. Keys are never dropped: a key no add-on names any
// more costs the list it cost before.
//
// It also holds the add-ons of the kind whose deletion waits for their dependents
// (deletionWaits): it exists exactly when the watches that wake them are registered.
type dependencyTargets struct {
	keys  sync.Map
	waits deletionWaits
}

// deletions returns the deletions that wait for dependents; nil (which records nothing)
// when t is.
func (t *dependencyTargets) deletions() *deletionWaits {
	if t == nil {
		return nil
	}
	return &t.waits
}

// note records keys and returns them, for the index function.
func (t *dependencyTargets) note(keys []string) []string {
	for _, k := range keys {
		t.keys.LoadOrStore(k, struct{}{})
	}
	return keys
}

// mayHave reports whether key may have dependents: it was noted, or nothing records the
// keys (t is nil: a reconciler whose watches SetupWithManager did not register, as in
// tests that index the add-ons themselves).
func (t *dependencyTargets) mayHave(key string) bool {
	if t == nil {
		return true
	}
	_, ok := t.keys.Load(key)
	return ok
}

// deletionWaits records the add-ons of one kind whose deletion waits for their dependents
// (awaitDependents), with the dependents each waits for, so that an event of one of them,
// its deletion above all, wakes the add-on at once. The DependencyField index finds an
// add-on's dependents, not the add-ons it depends on; and what a dependent of another kind
// follows only its own kind's Definition.Follows knows, so the waiting add-on keeps the
// keys it found. The record lives in memory: a manager that starts reconciles every
// add-on, and the waiting ones record themselves again.
type deletionWaits struct {
	mu sync.Mutex
	// waits maps a waiting add-on to the keys ("Kind namespace/name") of its dependents;
	// a nil set means any add-on.
	waits map[types.NamespacedName]map[string]bool
}

// expect records that owner's deletion waits for the add-ons keys; nil keys means any
// add-on, until owner knows which.
func (w *deletionWaits) expect(owner types.NamespacedName, keys []string) {
	if w == nil {
		return
	}
	var set map[string]bool
	if keys != nil {
		set = make(map[string]bool, len(keys))
		for _, k := range keys {
			set[k] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits == nil {
		w.waits = map[types.NamespacedName]map[string]bool{}
	}
	w.waits[owner] = set
}

// done forgets owner: its deletion no longer waits.
func (w *deletionWaits) done(owner types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waits, owner)
}

// waiting returns the add-ons whose deletion waits for the add-on key.
func (w *deletionWaits) waiting(key string) []reconcile.Request {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var requests []reconcile.Request
	for owner, keys := range w.waits {
		if keys == nil || keys[key] {
			requests = append(requests, reconcile.Request{NamespacedName: owner})
		}
	}
	return requests
}

// inventoried reports whether ref is one of addon's children: in its inventory, or in the
// write-ahead record of an apply under way.
func inventoried(addon addonsv1alpha1.Addon, ref addonsv1alpha1.ObjectReference) bool {
	if ssa.NewObjectSet(addon.GetAddonStatus().Inventory.Objects()).Has(ref) {
		return true
	}
	pending, _ := pendingObjects(context.Background(), addon)
	return ssa.NewObjectSet(pending).Has(ref)
}
