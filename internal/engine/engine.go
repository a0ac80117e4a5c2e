// Package engine is the shared reconcile engine of kaddons. Every add-on controller
// declares its kind, its typed-field transforms and the kinds of its children in a
// Definition; everything else (resolving and rendering packages, server-side apply,
// prune, drift, health, status, events and deletion) happens here, once for all add-ons.
//
// A reconcile is a list of phases (gate, resolve, permit, impersonate, default, render,
// plan, apply, health), one file each. A phase takes the reconcile's facts as an
// argument and returns an outcome: continue, or stop with a condition class, a reason
// and an error. One function (outcome.go) turns the outcome into conditions and into a
// terminal or retried error, and one function (status.go) writes the status, by patch,
// when it changed. Data travels in arguments and return values; contexts carry only
// logging and cancellation.
//
// KDP (kubebuilder-declarative-pattern) provides the manifest object types and the
// default object order; they stay behind one adapter (kdp.go).
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine/ssa"
	"github.com/kaddons/kaddons/internal/extensions"
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
	// DriftExclusions are fields the add-on's own program fills in at run time (the
	// Dashboard's CSRF Secret): kaddons sets them on creation only, as with
	// spec.driftExclusions. A target the package does not render is skipped.
	DriftExclusions []addonsv1alpha1.DriftExclusion
	// Follows lists the other add-ons whose settings this add-on's Default hook reads (a
	// NodeLocalDNS follows a CoreDNS). A change to one of them reconciles this add-on.
	Follows func(addon addonsv1alpha1.Addon) []addonsv1alpha1.AddonReference
	// FreeFormFields lists, by path (spec.corefile), the add-on's own spec fields whose
	// content reaches its rendered objects without a schema, as spec.patches does (which
	// every add-on has, and which is not listed here). AddonPolicy rules allow each one by
	// this path; the engine tells the policy which of them an add-on sets.
	FreeFormFields []string
	// Values maps the add-on's typed fields to the values of a package that is a Helm
	// chart; nil means none. Transforms run on a chart's output as on any package's, so
	// a typed field may be either: values where the chart has one for it, transforms
	// for the rest.
	Values func(in RenderInput) (map[string]any, error)
	// UserValues returns the free-form values of the add-on's spec.values, for a package
	// that is a Helm chart with a values.schema.json (which validates them); nil means
	// the kind has no spec.values. The typed fields' Values win over them.
	UserValues func(addon addonsv1alpha1.Addon) (map[string]any, error)
	// ReleaseName returns a chart's .Release.Name for the add-on; nil means its component
	// name (metrics-server), so that a chart names its objects as the kind's other
	// packages do.
	ReleaseName func(addon addonsv1alpha1.Addon) string
	// Hooks are the add-on author's code at fixed points of the lifecycle: Validate,
	// Default, Initialize, BeforeUpgrade, AfterReady and Cleanup. Default fills in what
	// the spec leaves empty and the cluster decides, such as a followed add-on's settings
	// or an existing configuration file to adopt.
	Hooks Hooks
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
	Catalog *channels.Catalog
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
	// reconciled again when one it depends on changes, and so that a deletion waits for
	// the add-ons of every kind that depend on it.
	AddonKinds []client.Object
	// Sources holds the artifacts of the AddonSources that add-ons name in
	// spec.sourceRef. Nil means no AddonSource is served: such add-ons wait with
	// SourceNotReady.
	Artifacts *ArtifactRegistry
	// Operator identifies the running operator to the pre-flight checks of a source's
	// bundle metadata.
	Operator OperatorIdentity
	// Sealer seals every object the engine applies and tells its children from objects
	// that only carry its labels; it must be the one CacheOptions was given. Nil seals
	// nothing and trusts the labels (tools that only render).
	Sealer *ssa.Sealer
	// Extensions answers which AddonExtensions apply to an add-on and calls them. Nil
	// calls none.
	Extensions *extensions.Registry
	// Capabilities reads the live cluster's version and API versions for the packages
	// that are Helm charts. Nil renders charts with Helm's defaults, as `helm template`
	// does (tools that only render).
	Capabilities *ClusterCapabilities
}

// ChildVerbs are the verbs the engine uses on every child kind: read through the cache
// (get, list, watch), server-side apply (create, patch) and prune or delete (delete). An
// add-on controller's RBAC markers must grant them for each kind in Children.
var ChildVerbs = []string{"get", "list", "watch", "create", "patch", "delete"}

// DefaultMaxConcurrentReconciles is the per-controller concurrency when Options leaves it unset.
const DefaultMaxConcurrentReconciles = 4

// Clients are what the engine reads and writes the cluster with.
type Clients struct {
	// Client reads through the manager's label-filtered cache and writes to the API server.
	Client client.Client
	// Reader reads from the API server directly, past the cache.
	Reader client.Reader
	// Scheme knows the add-on kinds.
	Scheme *runtime.Scheme
	// Mapper tells namespaced kinds from cluster-scoped ones.
	Mapper meta.RESTMapper
	// Recorder records events on add-ons.
	Recorder events.EventRecorder
	// Impersonator acts as the ServiceAccounts of add-ons outside the trusted namespaces.
	// Nil refuses such add-ons.
	Impersonator *Impersonator
}

// Reconciler reconciles one add-on kind through the shared phases.
type Reconciler struct {
	def      Definition
	gvk      schema.GroupVersionKind
	name     string
	client   client.Client
	reader   client.Reader
	scheme   *runtime.Scheme
	mapper   meta.RESTMapper
	catalog  *channels.Catalog
	recorder events.EventRecorder
	opts     Options
	renders  renderCache
	parsed   parseCache
	written  statusCache
	// echoes lets the watches drop the events of the reconciler's own writes.
	echoes  *echoes
	manager *ssa.Manager
	// impersonator builds the clients of add-ons applied as a ServiceAccount.
	impersonator *Impersonator
	// targets are the keys the DependencyField index has held, once SetupWithManager
	// registered it.
	targets *dependencyTargets
}

// New builds the reconciler of def on mgr's clients without registering any watch, so
// tests can drive Reconcile directly. SetupWithManager registers the controller.
func New(mgr ctrl.Manager, def Definition, opts Options) (*Reconciler, error) {
	gvk, err := apiutil.GVKForObject(def.Prototype, mgr.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("add-on prototype %T is not registered: %w", def.Prototype, err)
	}
	if opts.Operator.KubernetesVersion == nil {
		d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("creating the discovery client: %w", err)
		}
		opts.Operator.KubernetesVersion = ClusterVersion(d, CapabilitiesTTL)
	}
	return NewWithClients(def, opts, Clients{
		Client: ssa.TypedReads(mgr.GetClient()), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Recorder:     mgr.GetEventRecorder("kaddons-" + strings.ToLower(gvk.Kind)),
		Impersonator: NewImpersonator(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper()),
	})
}

// NewWithClients builds the reconciler of def on the given clients. Tools that only
// render (golden tests, the kubectl plugin) pass clients that need no cluster.
func NewWithClients(def Definition, opts Options, c Clients) (*Reconciler, error) {
	if opts.Catalog == nil {
		return nil, errors.New("engine options need a channels Source")
	}
	gvk, err := apiutil.GVKForObject(def.Prototype, c.Scheme)
	if err != nil {
		return nil, fmt.Errorf("add-on prototype %T is not registered: %w", def.Prototype, err)
	}
	echoes := &echoes{}
	return &Reconciler{
		def:      def,
		gvk:      gvk,
		name:     strings.ToLower(gvk.Kind),
		client:   c.Client,
		reader:   c.Reader,
		scheme:   c.Scheme,
		mapper:   c.Mapper,
		catalog:  opts.Catalog,
		recorder: c.Recorder,
		opts:     opts,
		echoes:   echoes,
		manager: &ssa.Manager{Cache: c.Client, Client: c.Client, Reader: c.Reader, Tracker: echoes, As: "the operator",
			Sealer: opts.Sealer},
		impersonator: c.Impersonator,
	}, nil
}

// reconcileState is one reconcile's facts, handed from phase to phase as an argument.
type reconcileState struct {
	addon addonsv1alpha1.Addon
	// asStored is the add-on as read, which no phase changes: its spec is the user's,
	// before the Default hook filled in addon's. Nil means addon until the default phase
	// keeps a copy (Render, and states that tests build).
	asStored addonsv1alpha1.Addon
	// settings is this reconcile's snapshot of the operator-wide settings.
	settings Settings
	// artifact is the AddonSource artifact the add-on's packages come from, set by
	// resolve; zero for the packages built into the operator.
	artifact SourceArtifact
	// catalog resolves and renders the packages: the artifact's, or the built-in ones.
	catalog *channels.Catalog
	// resolved is the package to apply, set by resolve.
	resolved channels.Resolved
	// channel is the channel the version was resolved from; empty for a pinned version.
	channel string
	// versionHeld says, on a Ready add-on, why it does not run the version its channel
	// points at (chooseVersion); nil when it does.
	versionHeld *conditionNote
	// upgradeable is the Upgradeable condition preflight found; nil leaves it as it was.
	upgradeable *upgradeableNote
	// wanted is the version the spec asks for when a failed upgrade pinned resolved to
	// the last healthy version.
	wanted string
	// defaulted is what the Default hook produced for render.
	defaulted defaulted
	// rendered is what render produced: the objects and the key of what they came from.
	rendered rendered
	// plan is what plan decided to write.
	plan planResult
	// applied is what apply did; empty when it did not run.
	applied ssa.Result
	// identity is whom the reconcile acts as on the children, set by impersonate.
	identity identity
	// pending are the objects the add-on's write-ahead record lists beyond its inventory
	// (an earlier apply was interrupted, or this one is about to create them), and record
	// is that record's id; both empty when the inventory covers the record.
	pending []addonsv1alpha1.ObjectReference
	record  string
	// readyVersion is the version the add-on had applied when the reconcile began, if it
	// was Ready at its generation then; empty otherwise. AfterReady runs only when the
	// add-on turns Ready at another version or generation.
	readyVersion string
	// ignored says which calls to extensions with failurePolicy Ignore failed in this
	// reconcile: the add-on went on, and is marked Degraded (ExtensionIgnored).
	ignored []string
}

// stored returns the add-on as read, with the spec the user wrote: what permit, admit
// and the applied spec hash judge, whatever the Default hook filled in.
func (st *reconcileState) stored() addonsv1alpha1.Addon {
	if st.asStored != nil {
		return st.asStored
	}
	return st.addon
}

// phase is one named step of a reconcile.
type phase struct {
	name string
	run  func(ctx context.Context, st *reconcileState) outcome
}

// Phase names, in reconcile order.
const (
	phaseGate        = "gate"
	phaseResolve     = "resolve"
	phaseValidate    = "validate"
	phasePermit      = "permit"
	phasePreflight   = "preflight"
	phaseImpersonate = "impersonate"
	phaseDefault     = "default"
	phaseRender      = "render"
	phaseAdmit       = "admit"
	phaseBeforeApply = "before-apply"
	phasePlan        = "plan"
	phaseApply       = "apply"
	phaseHealth      = "health"
)

// phases lists the reconcile steps in order. Render runs the slice of it from resolve
// through render, so what a render shows is what a reconcile applies.
func (r *Reconciler) phases() []phase {
	return []phase{
		{name: phaseGate, run: r.gate},
		{name: phaseResolve, run: r.resolve},
		{name: phaseValidate, run: r.validate},
		{name: phasePermit, run: r.permit},
		{name: phasePreflight, run: r.preflight},
		{name: phaseImpersonate, run: r.impersonate},
		{name: phaseDefault, run: r.defaults},
		{name: phaseRender, run: r.render},
		{name: phaseAdmit, run: r.admit},
		{name: phaseBeforeApply, run: r.beforeApply},
		{name: phasePlan, run: r.plan},
		{name: phaseApply, run: r.apply},
		{name: phaseHealth, run: r.health},
	}
}

// runPhases runs phases in order until one stops, and returns that outcome (or the
// zero outcome when all of them continued) and the name of the phase that stopped.
func runPhases(ctx context.Context, st *reconcileState, phases []phase) (outcome, string) {
	for _, p := range phases {
		if out := p.run(ctx, st); out.stop {
			return out, p.name
		}
	}
	return outcome{}, ""
}

// phasesBetween returns the phases from first through last, inclusive.
func phasesBetween(all []phase, first, last string) []phase {
	start, end := -1, -1
	for i, p := range all {
		if p.name == first {
			start = i
		}
		if p.name == last {
			end = i
		}
	}
	if start < 0 || end < start {
		return nil
	}
	return all[start : end+1]
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
	defer func() { r.recordReconcile(start, retErr) }()
	obj := r.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone, perhaps before it ever had a finalizer: its series go with it.
			forgetInstance(r.gvk.Kind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	r.written.restore(req.NamespacedName, obj)

	pending, record := pendingObjects(ctx, obj)
	if !obj.GetDeletionTimestamp().IsZero() {
		return r.reconcileDelete(ctx, obj, pending)
	}
	// A new add-on gets its finalizer with the write-ahead record, right before its first
	// apply; one that has children and lost its finalizer gets it back here.
	if !controllerutil.ContainsFinalizer(obj, Finalizer) && (obj.GetAddonStatus().Inventory.Len() > 0 || len(pending) > 0) {
		if err := r.addFinalizer(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}

	original := obj.DeepCopyObject().(addonsv1alpha1.Addon)
	st := &reconcileState{addon: obj, asStored: original, settings: r.opts.Settings.Load(), pending: pending, record: record,
		readyVersion: readyVersion(obj)}
	out, stoppedAt := runPhases(ctx, st, r.phases())
	if stoppedAt != "" && out.err != nil {
		log.FromContext(ctx).V(1).Info("Phase stopped the reconcile", "phase", stoppedAt, "error", out.err.Error())
	}
	out = st.withIgnored(out)
	err := r.summarize(st, out)
	if requested, ok := obj.GetAnnotations()[addonsv1alpha1.AnnotationRequestedAt]; ok {
		// Handled, whatever the outcome: the conditions say how it went.
		obj.GetAddonStatus().LastHandledReconcileAt = requested
	}
	if perr := r.patchStatus(ctx, original, obj); perr != nil {
		err = errors.Join(err, perr)
	}
	r.recordEvents(ctx, original, obj, st)
	r.recordMetrics(obj, st)
	if err != nil {
		return ctrl.Result{}, err
	}
	requeue := out.requeueAfter
	if resync := st.settings.ResyncInterval; resync > 0 && (requeue == 0 || resync < requeue) {
		requeue = resync
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// Render resolves and renders obj's package exactly as a reconcile would, through the
// reconcile's own phases from resolve through admit, without writing to the cluster.
// Golden tests and the kubectl plugin use it to show what would be applied.
func (r *Reconciler) Render(ctx context.Context, obj addonsv1alpha1.Addon) (*Objects, error) {
	st := &reconcileState{addon: obj.DeepCopyObject().(addonsv1alpha1.Addon), settings: r.opts.Settings.Load()}
	st.addon.GetObjectKind().SetGroupVersionKind(r.gvk)
	out, _ := runPhases(ctx, st, phasesBetween(r.phases(), phaseResolve, phaseAdmit))
	switch {
	case out.err != nil:
		return nil, out.err
	case out.stop:
		return nil, fmt.Errorf("%s cannot be rendered yet: %s", client.ObjectKeyFromObject(obj), out.message)
	}
	return st.rendered.objects, nil
}

// recordReconcile counts one reconcile and its duration by result.
func (r *Reconciler) recordReconcile(start time.Time, err error) {
	result := resultSuccess
	switch {
	case errors.Is(err, reconcile.TerminalError(nil)):
		result = resultTerminal
	case err != nil:
		result = resultError
	}
	reconcilesTotal.WithLabelValues(r.gvk.Kind, result).Inc()
	reconcileDuration.WithLabelValues(r.gvk.Kind).Observe(time.Since(start).Seconds())
}
