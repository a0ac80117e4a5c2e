// Package engine is the shared reconcile engine of kaddons. Every add-on controller
// declares its kind, its typed-field transforms and the kinds of its children in a
// Definition; everything else (resolving and rendering packages, server-side apply,
// prune, drift, health, status, events and deletion) happens here, once for all add-ons.
//
// The engine builds on KDP's declarative.Reconciler and plugs into its extension points:
// a channels-based ManifestController and object transforms for rendering, and a staged
// server-side-apply Applier with an inventory, which the engine's apply phase calls. Around
// them it adds what KDP lacks: a finalizer for cluster-scoped children, named phases with
// their own failure reasons, terminal errors for bad input, a plan that skips unchanged
// applies, and status written by patch.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/applier"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Definition declares one add-on to the engine. It is the only add-on-specific input.
type Definition struct {
	// Prototype is an empty object of the add-on's kind, for example &CoreDNS{}.
	Prototype addonsv1alpha1.Addon
	// Children lists every kind the add-on's packages contain. The engine watches these
	// kinds (through the shared, label-filtered cache) to undo drift and follow health,
	// and refuses to apply a package that contains any other kind.
	Children []schema.GroupVersionKind
	// HomeNamespace is the namespace the add-on usually runs in (kube-system for CoreDNS).
	// Instances installed elsewhere get namespace-suffixed names for the objects they
	// share with the home instance: cluster-scoped RBAC and objects the package pins to a
	// namespace of their own.
	HomeNamespace string
	// DefaultTargetNamespace is where the add-on's namespaced objects go when its
	// spec.targetNamespace is empty. Empty means the namespace of the add-on resource.
	DefaultTargetNamespace string
	// Transforms are the add-on's typed-field transforms. They run after kustomize and
	// before the user's patches, so a patch can still override them.
	Transforms []ObjectTransform
	// Follows lists the other add-ons whose settings this add-on's transforms read (a
	// NodeLocalDNS follows a CoreDNS). A change to one of them reconciles this add-on.
	Follows func(addon addonsv1alpha1.Addon) []addonsv1alpha1.AddonReference
	// Inputs computes what the transforms read from outside the add-on's own spec, such
	// as a followed add-on's settings, reading through the engine's cache. The result is
	// part of the render cache key and reaches transforms through InputsFrom. A
	// *WaitError stops the reconcile without applying until a followed add-on changes.
	Inputs func(ctx context.Context, c client.Reader, addon addonsv1alpha1.Addon) (any, error)
}

// TargetNamespace returns the namespace addon's namespaced objects are installed in.
func (d Definition) TargetNamespace(addon addonsv1alpha1.Addon) string {
	switch {
	case addon.GetAddonSpec().TargetNamespace != "":
		return addon.GetAddonSpec().TargetNamespace
	case d.DefaultTargetNamespace != "":
		return d.DefaultTargetNamespace
	default:
		return addon.GetNamespace()
	}
}

// Options are the settings every add-on controller shares.
type Options struct {
	// Source resolves and renders the channel packages.
	Source *channels.Source
	// Concurrency returns how many add-ons of a kind may be reconciled in parallel (the
	// configuration's ConcurrencyFor). Nil or a result below 1 means
	// DefaultMaxConcurrentReconciles.
	Concurrency func(kind string) int
	// Settings holds the operator-wide settings each reconcile reads (registry mirror,
	// paused kinds, resync interval). Nil means none of them.
	Settings *SettingsStore
	// Permit, when set, decides whether an add-on may be applied at the version and from
	// the channel it resolved to (AddonPolicy). An add-on it refuses is not applied.
	Permit PermitFunc
	// ReconcileAllOn lists kinds (such as AddonPolicy) whose every change reconciles
	// every add-on.
	ReconcileAllOn []client.Object
	// AddonKinds lists an empty object of every add-on kind, so that an add-on is
	// reconciled again when one it depends on changes.
	AddonKinds []client.Object
}

// DefaultMaxConcurrentReconciles is the per-controller concurrency when Options leaves it unset.
const DefaultMaxConcurrentReconciles = 4

// Reconciler reconciles one add-on kind through the shared phases.
type Reconciler struct {
	def      Definition
	gvk      schema.GroupVersionKind
	name     string
	client   client.Client
	reader   client.Reader
	scheme   *runtime.Scheme
	source   *channels.Source
	recorder events.EventRecorder
	kdp      declarative.Reconciler
	opts     Options
	renders  renderCache
	written  statusCache
	applier  *Applier
}

// New builds the reconciler of def without registering any watch, so tests can drive
// Reconcile directly. SetupWithManager registers the controller.
func New(mgr ctrl.Manager, def Definition, opts Options) (*Reconciler, error) {
	if opts.Source == nil {
		return nil, errors.New("engine options need a channels Source")
	}
	gvk, err := apiutil.GVKForObject(def.Prototype, mgr.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("add-on prototype %T is not registered: %w", def.Prototype, err)
	}
	r := &Reconciler{
		def:      def,
		gvk:      gvk,
		name:     strings.ToLower(gvk.Kind),
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		scheme:   mgr.GetScheme(),
		source:   opts.Source,
		recorder: mgr.GetEventRecorder("kaddons-" + strings.ToLower(gvk.Kind)),
		opts:     opts,
		applier:  NewApplier(mgr.GetClient(), mgr.GetAPIReader()),
	}
	// KDP renders (manifest controller, transforms, labels). Owner references and the
	// applier are the engine's own (applyRendered), as KDP's Reconcile is not called; the
	// applier is still KDP's so anything that runs KDP's Reconcile applies the same way.
	kdpOptions := []declarative.ReconcilerOption{
		declarative.WithManifestController(channels.ManifestController{Source: opts.Source}),
		declarative.WithObjectTransform(def.Transforms...),
		declarative.WithObjectTransform(mirrorImages, ApplyPatches, setNamespace(mgr.GetRESTMapper(), def)),
		declarative.WithLabels(r.labels),
		declarative.WithApplier(r.applier),
	}
	if err := r.kdp.InitWithName(mgr, def.Prototype, r.name, kdpOptions...); err != nil {
		return nil, fmt.Errorf("initialising the KDP reconciler for %s: %w", gvk.Kind, err)
	}
	return r, nil
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
	b := ctrl.NewControllerManagedBy(mgr).
		Named(r.name).
		For(r.def.Prototype, builder.WithPredicates(specOrDeletionChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency})
	for _, gvk := range r.def.Children {
		child := &unstructured.Unstructured{}
		child.SetGroupVersionKind(gvk)
		b = b.Watches(child, handler.EnqueueRequestsFromMapFunc(r.mapChild))
	}
	if r.opts.Settings != nil {
		// A change of the operator's settings (OperatorConfig) reconciles every add-on.
		b = b.WatchesRawSource(source.Channel(r.opts.Settings.subscribe(), handler.EnqueueRequestsFromMapFunc(r.mapAll)))
	}
	for _, obj := range r.opts.ReconcileAllOn {
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(r.mapAll))
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

// CacheOptions restricts the manager's cache, for every child kind of defs, to objects
// that kaddons manages, so memory does not grow with unrelated objects in the cluster.
// Managed fields are stripped from everything cached.
func CacheOptions(defs ...Definition) cache.Options {
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue})
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
			byObject[u] = cache.ByObject{Label: selector}
		}
	}
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

// mapChild maps a child's event to its add-on through the instance labels.
func (r *Reconciler) mapChild(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[LabelManagedBy] != ManagedByValue || l[LabelKind] != r.name || l[LabelName] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelNamespace], Name: l[LabelName]}}}
}

// labels is the KDP LabelMaker: the instance labels of the add-on.
func (r *Reconciler) labels(_ context.Context, o declarative.DeclarativeObject) map[string]string {
	return instanceLabels(r.gvk.Kind, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
}

func (r *Reconciler) newObject() addonsv1alpha1.Addon {
	obj := r.def.Prototype.DeepCopyObject().(addonsv1alpha1.Addon)
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	return obj
}

// Reconcile runs the phases for one add-on and writes its status once, by patch, when
// it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	start := time.Now()
	defer func() {
		result := resultSuccess
		switch {
		case errors.Is(retErr, reconcile.TerminalError(nil)):
			result = resultTerminal
		case retErr != nil:
			result = resultError
		}
		reconcilesTotal.WithLabelValues(r.gvk.Kind, result).Inc()
		reconcileDuration.WithLabelValues(r.gvk.Kind).Observe(time.Since(start).Seconds())
	}()
	obj := r.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	if w, ok := r.written.get(req.NamespacedName); ok && w.uid == obj.GetUID() && w.baseResourceVersion == obj.GetResourceVersion() {
		// The cache has not caught up with the engine's last status write: that status,
		// not the cached one, is what the API server holds (and what plan must compare).
		*obj.GetAddonStatus() = *w.status.DeepCopy()
	}

	if !obj.GetDeletionTimestamp().IsZero() {
		return r.reconcileDelete(ctx, obj)
	}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		base := obj.DeepCopyObject().(client.Object)
		controllerutil.AddFinalizer(obj, Finalizer)
		if err := r.client.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	}

	original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
	st := &reconcileState{addon: obj, settings: r.opts.Settings.Load()}
	defer func() {
		if err := r.patchStatus(ctx, original, obj); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.recordEvents(original, obj, st)
		r.recordMetrics(obj, st)
	}()

	ctx = withState(ctx, st)
	for _, p := range r.phases() {
		done, err := p.run(ctx, st)
		if err != nil {
			log.FromContext(ctx).V(1).Info("Phase stopped the reconcile", "phase", p.name, "error", err.Error())
			return ctrl.Result{}, err
		}
		if done {
			break
		}
	}
	requeue := st.requeueAfter
	if resync := st.settings.ResyncInterval; resync > 0 && (requeue == 0 || resync < requeue) {
		requeue = resync
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// phase is one named step of a reconcile. It returns done to end the reconcile early
// without an error.
type phase struct {
	name string
	run  func(ctx context.Context, st *reconcileState) (done bool, err error)
}

// phases lists the reconcile steps in order.
func (r *Reconciler) phases() []phase {
	return []phase{
		{name: "gate", run: r.gate},
		{name: "resolve", run: r.resolve},
		{name: "permit", run: r.permit},
		{name: "pin-version", run: r.pinVersion},
		{name: "inputs", run: r.inputs},
		{name: "render", run: r.render},
		{name: "plan", run: r.plan},
		{name: "apply", run: r.apply},
		{name: "health", run: r.health},
	}
}

// resolve picks the package version. A bad version or channel is terminal: it is
// reported and not retried until the spec changes.
func (r *Reconciler) resolve(_ context.Context, st *reconcileState) (bool, error) {
	spec := st.addon.CommonSpec()
	if spec.Version == "" && spec.Channel == "" {
		spec.Channel = st.settings.DefaultChannel
		if spec.Channel == "" {
			spec.Channel = r.source.DefaultChannel()
		}
	}
	st.channel = spec.Channel
	resolved, err := r.source.Resolve(st.addon.ComponentName(), spec)
	if err != nil {
		markStalled(st.addon.GetAddonStatus(), st.addon.GetGeneration(), channels.ReasonOf(err), err.Error())
		return true, reconcile.TerminalError(err)
	}
	st.resolved = resolved
	return false, nil
}

// render builds the package and runs the transforms through KDP. Errors caused by the
// spec or the package (a bad patch, a kind the controller does not watch) are terminal.
func (r *Reconciler) render(ctx context.Context, st *reconcileState) (bool, error) {
	name := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}
	rendered, err := r.source.Render(st.resolved)
	if err == nil {
		if objects, ok := r.renders.get(name, st.addon, st.renderKey(), rendered); ok {
			st.objects = objects
			return false, nil
		}
	}
	objects, err := r.kdp.BuildDeploymentObjects(st.renderContext(ctx), name, st.addon)
	if err != nil {
		var ce *channels.Error
		if errors.As(err, &ce) {
			markStalled(st.addon.GetAddonStatus(), st.addon.GetGeneration(), ce.Reason, ce.Error())
			return true, reconcile.TerminalError(err)
		}
		markFailed(st.addon.GetAddonStatus(), st.addon.GetGeneration(), addonsv1alpha1.ReasonRenderFailed, err.Error())
		return true, fmt.Errorf("rendering %s %s: %w", r.gvk.Kind, st.resolved.Version, err)
	}
	for _, o := range objects.Items {
		if !r.watches(o.GroupVersionKind()) {
			err := &channels.Error{Reason: addonsv1alpha1.ReasonRenderFailed,
				Message: fmt.Sprintf("package %s/%s contains %s %s, a kind the %s controller does not manage",
					st.resolved.Addon, st.resolved.Version, o.Kind, o.GetName(), r.gvk.Kind)}
			markStalled(st.addon.GetAddonStatus(), st.addon.GetGeneration(), err.Reason, err.Message)
			return true, reconcile.TerminalError(err)
		}
	}
	st.objects = objects
	r.renders.put(name, st.addon, st.renderKey(), rendered, objects)
	return false, nil
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

// apply hands the rendered objects, with owner references, to the engine's KDP applier:
// staged server-side apply with inventory prune. Its outcome comes back through the
// reconcile state. The engine calls the applier itself rather than KDP's Reconcile, which
// would render the package a second time and GET every object uncached only to look for
// KDP's ignore annotation (the applier reads the children from the cache instead).
func (r *Reconciler) apply(ctx context.Context, st *reconcileState) (bool, error) {
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	if st.skipApply {
		log.FromContext(ctx).V(1).Info("Nothing to apply: the cache matches the manifests")
		return false, nil
	}
	st.inputsChanged = status.ObservedGeneration != generation || status.AppliedVersion != st.resolved.Version ||
		len(status.Inventory) == 0
	err := r.applyRendered(ctx, st)
	if st.inventory != nil {
		status.Inventory = st.inventory
	}
	switch {
	case st.modeErr != nil:
		reason := addonsv1alpha1.ReasonInvalidMode
		var conflict *conflictError
		if errors.As(st.modeErr, &conflict) {
			reason = addonsv1alpha1.ReasonOwnershipConflict
		}
		markStalled(status, generation, reason, st.modeErr.Error())
		return true, reconcile.TerminalError(st.modeErr)
	case st.applyErr != nil:
		var immutable *immutableError
		if errors.As(st.applyErr, &immutable) {
			// Retrying cannot help: the spec must change or opt in to re-creation.
			markFailed(status, generation, addonsv1alpha1.ReasonImmutableField, st.applyErr.Error())
			return true, reconcile.TerminalError(st.applyErr)
		}
		markFailed(status, generation, addonsv1alpha1.ReasonApplyFailed, st.applyErr.Error())
		return true, st.applyErr
	case st.pruneErr != nil:
		markFailed(status, generation, addonsv1alpha1.ReasonPruneFailed, st.pruneErr.Error())
		return true, st.pruneErr
	case err != nil || !st.applyCalled:
		if err == nil {
			err = errors.New("the manifests were not applied")
		}
		markFailed(status, generation, addonsv1alpha1.ReasonApplyFailed, err.Error())
		return true, err
	}
	if status.AppliedVersion != st.resolved.Version || status.ObservedGeneration != generation || status.LastAppliedTime == nil {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		status.LastAppliedTime = &now
	}
	status.AppliedVersion = st.resolved.Version
	trackUpgrade(status, st.resolved.Version, time.Now())
	return false, nil
}

// health reads every child from the cache and computes kstatus. Ready turns True only
// when every child is current for the generation that was just applied.
func (r *Reconciler) health(ctx context.Context, st *reconcileState) (bool, error) {
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	waitForCache(ctx, r.client, st.applied, cacheCatchUp)
	h, err := checkHealth(ctx, r.client, st.inventory, st.applied)
	if err != nil {
		markFailed(status, generation, addonsv1alpha1.ReasonHealthCheckFailed, err.Error())
		return true, err
	}
	if !h.ready() {
		// Degraded: it was Ready (or already degraded for this reason) and no spec change
		// explains why it no longer is.
		wasReady := meta.IsStatusConditionTrue(status.Conditions, addonsv1alpha1.ConditionReady)
		if d := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionDegraded); d != nil &&
			d.Status == metav1.ConditionTrue && d.Reason == addonsv1alpha1.ReasonChildrenNotReady {
			wasReady = true
		}
		remaining, expired := r.upgradeExpired(st, time.Now())
		switch {
		case expired:
			r.failUpgrade(st, h.message())
		case remaining > 0:
			markProgressing(status, generation, addonsv1alpha1.ReasonChildrenNotReady, h.message())
			st.requeueAfter = remaining
		default:
			markProgressing(status, generation, addonsv1alpha1.ReasonChildrenNotReady, h.message())
			if wasReady && status.ObservedGeneration == generation && st.wanted == "" {
				markDegraded(status, generation, addonsv1alpha1.ReasonChildrenNotReady, "was Ready, now "+h.message())
			}
		}
		if st.wanted != "" {
			r.markRolledBack(st)
		}
		return true, nil
	}
	status.LastHealthyVersion = st.resolved.Version
	trackUpgrade(status, st.resolved.Version, time.Now())
	markReady(status, generation, fmt.Sprintf("%s %s is ready (%d objects)", st.resolved.Addon, st.resolved.Version, len(st.inventory)))
	if st.wanted != "" {
		r.markRolledBack(st)
	}
	return true, nil
}

// markRolledBack keeps Degraded with reason UpgradeFailed while a failed version is
// pinned to the last healthy one.
func (r *Reconciler) markRolledBack(st *reconcileState) {
	status := st.addon.GetAddonStatus()
	markDegraded(status, st.addon.GetGeneration(), addonsv1alpha1.ReasonUpgradeFailed,
		fmt.Sprintf("upgrade to %s failed to become ready within %s; rolled back to %s. Change the spec to try again",
			st.wanted, upgradeTimeout(st.addon), st.resolved.Version))
}

// reconcileDelete removes every child in the inventory, cluster-scoped ones included, in
// reverse apply order, then releases the finalizer. Children already gone are skipped.
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
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, Finalizer)
	if err := r.client.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	forgetInstance(r.gvk.Kind, obj.GetNamespace(), obj.GetName())
	r.renders.forget(owner)
	r.written.forget(owner)
	log.FromContext(ctx).Info("Deleted add-on and its children", "objects", len(inventory))
	return ctrl.Result{}, nil
}

// recordMetrics updates the per-instance gauges and the drift counter.
func (r *Reconciler) recordMetrics(obj addonsv1alpha1.Addon, st *reconcileState) {
	ready := 0.0
	if meta.IsStatusConditionTrue(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady) {
		ready = 1
	}
	addonReadyGauge.WithLabelValues(r.gvk.Kind, obj.GetNamespace(), obj.GetName()).Set(ready)
	managedObjects.WithLabelValues(r.gvk.Kind, obj.GetNamespace(), obj.GetName()).Set(float64(len(obj.GetAddonStatus().Inventory)))
	if len(st.drifted) > 0 {
		driftCorrections.WithLabelValues(r.gvk.Kind).Add(float64(len(st.drifted)))
	}
}

// patchStatus writes the status when it differs from original. It replaces the whole
// status with a JSON patch: a merge patch could not remove fields that became empty, and
// a diff would leave out KDP's required status.healthy while it is false.
func (r *Reconciler) patchStatus(ctx context.Context, original, obj addonsv1alpha1.Addon) error {
	if equality.Semantic.DeepEqual(original.GetAddonStatus(), obj.GetAddonStatus()) {
		return nil
	}
	key, base := client.ObjectKeyFromObject(obj), original.GetResourceVersion()
	body, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": obj.GetAddonStatus()}})
	if err != nil {
		return err
	}
	if err := r.client.Status().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body)); err != nil {
		return fmt.Errorf("writing status: %w", client.IgnoreNotFound(err))
	}
	r.written.put(key, writtenStatus{uid: obj.GetUID(), baseResourceVersion: base, status: obj.GetAddonStatus().DeepCopy()})
	return nil
}

// Render resolves and renders obj's package exactly as a reconcile would, without
// touching the cluster. Golden tests and tools use it to show what would be applied.
func (r *Reconciler) Render(ctx context.Context, obj addonsv1alpha1.Addon) (*manifest.Objects, error) {
	st := &reconcileState{addon: obj, settings: r.opts.Settings.Load()}
	if _, err := r.resolve(ctx, st); err != nil {
		return nil, err
	}
	for _, step := range []func(context.Context, *reconcileState) (bool, error){r.inputs, r.render} {
		done, err := step(ctx, st)
		if err != nil {
			return nil, err
		}
		if done {
			msg := ""
			if c := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionProgressing); c != nil {
				msg = c.Message
			}
			return nil, fmt.Errorf("%s cannot be rendered yet: %s", client.ObjectKeyFromObject(obj), msg)
		}
	}
	return st.objects, nil
}

// applyRendered applies a copy of the rendered objects (the render cache's copy stays
// untouched) with the add-on as controller owner of those in its own namespace: a
// namespaced owner cannot own cluster-scoped objects or objects in other namespaces,
// which the inventory and the finalizer clean up instead.
func (r *Reconciler) applyRendered(ctx context.Context, st *reconcileState) error {
	items := make([]*manifest.Object, 0, len(st.objects.Items))
	owner := []any{map[string]any{
		"apiVersion": r.gvk.GroupVersion().String(), "kind": r.gvk.Kind,
		"name": st.addon.GetName(), "uid": string(st.addon.GetUID()),
		"controller": true, "blockOwnerDeletion": true,
	}}
	for _, o := range st.objects.Items {
		u := o.UnstructuredObject().DeepCopy()
		if u.GetNamespace() != "" && u.GetNamespace() == st.addon.GetNamespace() {
			if err := unstructured.SetNestedSlice(u.Object, owner, "metadata", "ownerReferences"); err != nil {
				return err
			}
		}
		obj, err := manifest.NewObject(u)
		if err != nil {
			return err
		}
		items = append(items, obj)
	}
	return r.applier.Apply(withState(ctx, st), applier.ApplierOptions{Objects: items, Namespace: st.addon.GetNamespace()})
}
