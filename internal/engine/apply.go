package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Apply stages. Objects are applied stage by stage so that what others depend on exists
// first; deletes run in the reverse order.
const (
	stageCRDs = iota
	stageNamespaces
	stageConfig
	stageBindings
	stageWorkloads
	stageAPIEndpoints
)

// stageOf returns the apply stage of a kind.
func stageOf(group, kind string) int {
	switch {
	case kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io":
		return stageCRDs
	case kind == "Namespace" && group == "":
		return stageNamespaces
	case group == rbacGroup && (kind == kindRoleBinding || kind == kindClusterRoleBinding):
		// A binding is checked against the role it grants, which must exist first.
		return stageBindings
	case group == rbacGroup,
		group == "" && (kind == kindServiceAccount || kind == "ConfigMap" || kind == "Secret" ||
			kind == "ResourceQuota" || kind == "LimitRange"),
		group == "scheduling.k8s.io", group == "networking.k8s.io" && kind == "NetworkPolicy":
		return stageConfig
	case group == apiRegistrationGroup,
		group == "admissionregistration.k8s.io":
		return stageAPIEndpoints
	default:
		return stageWorkloads
	}
}

// applyConcurrency bounds the parallel writes within one stage.
const applyConcurrency = 4

// waitTimeout bounds the applier's waits: for a CRD of the package to be served, and for
// an object being re-created to be gone.
const waitTimeout = 30 * time.Second

// apply hands the rendered objects, with owner references, to the applier: staged
// server-side apply with inventory prune. It records the new inventory and the applied
// version in the status, and maps a failure to its condition through applyFailures. The
// engine calls its own applier rather than KDP's Reconcile, which would render the
// package a second time and GET every object uncached.
func (r *Reconciler) apply(ctx context.Context, st *reconcileState) outcome {
	if st.plan.skip {
		log.FromContext(ctx).V(1).Info("Nothing to apply: the cache matches the manifests")
		st.addon.GetAddonStatus().AppliedSpecHash = specHash(st.addon)
		recordSource(st.addon.GetAddonStatus(), st.source)
		return proceed()
	}
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	objects := r.withOwnerReferences(st.addon, st.rendered.objects)
	rendered := make([]addonsv1alpha1.ObjectReference, 0, len(objects))
	for _, u := range objects {
		rendered = append(rendered, refOf(u))
	}
	if err := checkInventorySize(rendered); err != nil {
		return stalled(addonsv1alpha1.ReasonInventoryTooLarge, err)
	}
	req := applyRequest{
		objects:  objects,
		previous: status.Inventory.Objects(),
		pending:  st.pending,
		only:     st.plan.only,
		excluded: st.plan.excluded,
		kind:     r.gvk.Kind,
		owner:    types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()},
		inputsChanged: status.ObservedGeneration != generation || status.AppliedVersion != st.resolved.Version ||
			status.Inventory.Len() == 0,
		beforeWrites: func(ctx context.Context, desired []addonsv1alpha1.ObjectReference) error {
			return r.writeAhead(ctx, st, desired)
		},
	}
	if up := st.addon.GetAddonSpec().Upgrade; up != nil {
		req.recreateOnImmutable = up.RecreateOnImmutable
	}
	req.adopt = st.addon.GetAddonSpec().Adopt == addonsv1alpha1.AdoptIfUnmanaged
	res, err := r.actingAs(st).applier.apply(ctx, req)
	st.applied = res
	if res.inventory != nil {
		status.Inventory = addonsv1alpha1.NewInventory(res.inventory)
	}
	if (err == nil || errorIs[*pruneError](err)) && st.record != "" {
		// Every object was written and whatever left the set was pruned or kept in the
		// inventory: the inventory covers the write-ahead record now.
		status.InventoryRecord = st.record
	}
	if err != nil {
		return applyOutcome(err)
	}
	recordApplied(status, generation, st.resolved.Version, time.Now())
	recordSource(status, st.source)
	status.AppliedSpecHash = specHash(st.addon)
	recordAdopted(status, res.adopted)
	return proceed()
}

// withOwnerReferences returns copies of the rendered objects (the render cache's copies
// stay untouched) with the add-on as controller owner of those in its own namespace: a
// namespaced owner cannot own cluster-scoped objects or objects in other namespaces,
// which the inventory and the finalizer clean up instead.
func (r *Reconciler) withOwnerReferences(addon addonsv1alpha1.Addon, objects *Objects) []*unstructured.Unstructured {
	owner := []any{map[string]any{
		"apiVersion": r.gvk.GroupVersion().String(), "kind": r.gvk.Kind,
		"name": addon.GetName(), "uid": string(addon.GetUID()),
		"controller": true, "blockOwnerDeletion": true,
	}}
	out := make([]*unstructured.Unstructured, 0, len(objects.Items))
	for _, o := range objects.Items {
		u := o.UnstructuredObject().DeepCopy()
		if u.GetNamespace() != "" && u.GetNamespace() == addon.GetNamespace() {
			// metadata is a map in every parsed object, so this cannot fail.
			_ = unstructured.SetNestedSlice(u.Object, owner, "metadata", "ownerReferences")
		}
		out = append(out, u)
	}
	return out
}

// applier applies rendered objects: staged server-side apply with the kaddons field
// manager, followed by an inventory-based prune. It replaces KDP's appliers, which apply
// client-side or prune by label selector (see docs/architecture.md).
type applier struct {
	// cache reads through the manager's shared, label-filtered cache.
	cache client.Reader
	// client writes, and reader reads past the cache, as the add-on's identity.
	client client.Client
	reader client.Reader
	// checkAccess asks the API server whether every write is allowed before making any
	// (impersonated appliers).
	checkAccess bool
	// echoes remembers what each write left, so that its watch event costs no reconcile.
	echoes *echoes
	// as names the identity in messages.
	as string
	// sealer seals what the applier writes, and tells the children it wrote from objects
	// that only carry their labels; nil trusts the labels.
	sealer *Sealer
}

// applyRequest is what one apply works on.
type applyRequest struct {
	// objects are the rendered objects, owner references included, in apply order.
	objects []*unstructured.Unstructured
	// previous is the inventory of the last apply: what may be pruned.
	previous []addonsv1alpha1.ObjectReference
	// pending are objects the write-ahead record lists beyond previous: an interrupted
	// apply may have created them. They may be pruned too, but unlike previous they do
	// not count as kaddons' own until the cache or the API server shows them labelled.
	pending []addonsv1alpha1.ObjectReference
	// beforeWrites, when set, runs once the objects to inventory are known and before
	// the first write: the engine records them ahead (writeAhead). Its error stops the
	// apply with nothing written.
	beforeWrites func(ctx context.Context, desired []addonsv1alpha1.ObjectReference) error
	// only, when not nil, limits the writes to these objects (the drifted ones).
	only map[addonsv1alpha1.ObjectReference]bool
	// owner is the add-on's kind and namespace/name, as the instance labels carry them.
	kind  string
	owner types.NamespacedName
	// inputsChanged is true when the generation or version differs from the last apply,
	// so that changed objects count as updated rather than drifted.
	inputsChanged bool
	// recreateOnImmutable lets apply delete and re-create an object to change an
	// immutable field.
	recreateOnImmutable bool
	// adopt takes over existing objects that no add-on owns (spec.adopt: IfUnmanaged).
	adopt bool
	// excluded are fields set only on creation: on later applies they are handed to
	// ReleasedFieldManager and left out.
	excluded exclusions
}

// written is what a write left of an object: its generation and resource version.
type written struct {
	generation      int64
	resourceVersion string
}

// applyResult is what one apply did. After a failed apply it still holds everything
// written so far and the inventory that covers it.
type applyResult struct {
	// applied maps each object written to what the write left.
	applied map[addonsv1alpha1.ObjectReference]written
	// inventory is the inventory to record: after a partial apply or prune it also keeps
	// every object that may still exist.
	inventory []addonsv1alpha1.ObjectReference
	// pruned lists the objects deleted because they left the manifests.
	pruned []addonsv1alpha1.ObjectReference
	// drifted lists the objects an apply changed although the add-on's inputs did not.
	drifted []addonsv1alpha1.ObjectReference
	// recreated lists objects deleted and re-created to change immutable fields.
	recreated []addonsv1alpha1.ObjectReference
	// adopted lists the unmanaged objects this apply took over.
	adopted []addonsv1alpha1.AdoptedObject
}

// ownerKey formats the request's owner the way ownerOf formats a child's owner.
func (req applyRequest) ownerKey() string {
	return ownerOf(instanceLabels(req.kind, req.owner))
}

// apply writes req's objects stage by stage and prunes what left the inventory. Its
// errors are typed: *conflictError, *modeError, *immutableError, *pruneError, and
// *writeError for anything else the API server refused.
func (a *applier) apply(ctx context.Context, req applyRequest) (applyResult, error) {
	res := applyResult{applied: map[addonsv1alpha1.ObjectReference]written{}}
	stages := map[int][]*unstructured.Unstructured{}
	for _, u := range req.objects {
		s := stageOf(u.GroupVersionKind().Group, u.GetKind())
		stages[s] = append(stages[s], u)
	}
	if a.checkAccess {
		if err := a.checkWrites(ctx, req); err != nil {
			return res, err
		}
	}
	own, err := a.handedOver(ctx, req)
	if err != nil {
		return res, err
	}
	skip, external := own.skip, own.external
	desired := make([]addonsv1alpha1.ObjectReference, 0, len(req.objects))
	for s := stageCRDs; s <= stageAPIEndpoints; s++ {
		for _, u := range stages[s] {
			if ref := refOf(u); !external[ref] {
				desired = append(desired, ref)
			}
		}
	}
	for s := range stages {
		stages[s] = slices.DeleteFunc(stages[s], func(u *unstructured.Unstructured) bool {
			ref := refOf(u)
			return skip[ref] || (req.only != nil && !req.only[ref])
		})
	}
	if req.beforeWrites != nil {
		if err := req.beforeWrites(ctx, desired); err != nil {
			return res, err
		}
	}
	w := &stageWriter{applier: a, req: req, live: own.live, absent: own.absent, res: &res}
	for s := stageCRDs; s <= stageAPIEndpoints && err == nil; s++ {
		err = w.writeStage(ctx, &own, stages, s)
	}
	// Objects found to exist and used as they are (resolveExisting) are not the add-on's.
	desired = slices.DeleteFunc(desired, func(ref addonsv1alpha1.ObjectReference) bool { return external[ref] })
	if err != nil {
		// Keep everything we may have created in the inventory, and prune nothing:
		// a partial apply must never delete what is still running.
		res.inventory = mergeInventory(req.previous, desired, res.applied)
		return res, err
	}
	res.inventory = desired
	res.adopted = own.adopted

	stale := slices.DeleteFunc(staleObjects(unionObjects(req.previous, req.pending), desired), func(ref addonsv1alpha1.ObjectReference) bool {
		return a.ignored(ctx, ref)
	})
	pruned, _, err := deleteObjects(ctx, a.client, a.reader, stale, req.kind, req.owner)
	res.pruned = pruned
	if err != nil {
		// What could not be deleted stays in the inventory so the next reconcile retries.
		res.inventory = mergeInventory(staleObjects(stale, pruned), desired, nil)
		return res, &pruneError{err: err}
	}
	return res, nil
}

// liveInfo is the cached state of one child before an apply.
type liveInfo struct {
	exists          bool
	resourceVersion string
	generation      int64
}

// ownership is what handedOver found out about the rendered objects.
type ownership struct {
	// skip are the objects not to write this time (modes ignore and ensure-exists).
	skip map[addonsv1alpha1.ObjectReference]bool
	// external are objects neither written nor recorded in the inventory: a Namespace
	// that existed before the add-on, or an unmanaged object with a mode annotation.
	external map[addonsv1alpha1.ObjectReference]bool
	// live is what the cache knew of each object before the apply.
	live map[addonsv1alpha1.ObjectReference]liveInfo
	// adopted are the unmanaged objects spec.adopt takes over.
	adopted []addonsv1alpha1.AdoptedObject
	// absent are the objects neither the cache nor the inventory knows, assumed not to
	// exist: they are applied create-only (absentResourceVersion), so that one that does
	// exist is refused by the API server, untouched, and looked up then (resolveExisting).
	absent map[addonsv1alpha1.ObjectReference]bool
}

// absentResourceVersion is the resourceVersion precondition of a create-only apply. A
// server-side apply that names a resourceVersion creates the object when it does not
// exist, and is refused with a Conflict, writing nothing, when the live object's
// resourceVersion differs. etcd revisions are int64, so no live object ever has this one.
const absentResourceVersion = "9223372036854775807"

// handedOver finds out, for every rendered object, whether kaddons may write it. An object
// in the cache carries kaddons' labels: it is the add-on's own, or another add-on's (a
// *conflictError). An object the cache does not hold was not created by kaddons, does not
// exist yet, or (when the inventory lists it) was deleted out of band and may have been
// created again by another tool since. It costs no request here: it is applied
// create-only (own.absent), which the API server refuses, writing nothing, when the
// object exists; resolveExisting then looks it up. Only a Namespace, and every such
// object when req.adopt may take it over, is looked up on the API server before any
// write (uncached). One that exists without kaddons' labels is never written unless
// req.adopt takes it over (an *adoptionError lists them all). A Namespace that exists
// unmanaged is used, never adopted. Modes (ignore, ensure-exists) on the object decide
// the rest; an unknown mode is a *modeError.
func (a *applier) handedOver(ctx context.Context, req applyRequest) (ownership, error) {
	own := ownership{skip: map[addonsv1alpha1.ObjectReference]bool{}, external: map[addonsv1alpha1.ObjectReference]bool{},
		live: map[addonsv1alpha1.ObjectReference]liveInfo{}, absent: map[addonsv1alpha1.ObjectReference]bool{}}
	var unmanaged []addonsv1alpha1.ObjectReference
	inventoried := newObjectSet(unionObjects(req.previous, req.pending))
	for _, u := range req.objects {
		ref := refOf(u)
		exists, mode, found, err := a.findOut(ctx, req, u, inventoried, &own)
		switch {
		case err != nil:
			return own, err
		case found == foundUnmanaged:
			unmanaged = append(unmanaged, ref)
			continue
		case found == foundExternal:
			continue
		}
		switch mode {
		case "":
		case addonsv1alpha1.ModeIgnore:
			own.skip[ref] = true
		case addonsv1alpha1.ModeEnsureExists:
			own.skip[ref] = exists
		default:
			return own, &modeError{ref: ref, mode: mode}
		}
	}
	if len(unmanaged) > 0 {
		return own, &adoptionError{refs: unmanaged}
	}
	return own, nil
}

// findOut decides about one rendered object u, as handedOver describes: whether it exists
// and is the add-on's own, the mode it is managed with, and, when it was looked up past
// the cache, what uncached found (foundUnmanaged and foundExternal leave it out).
func (a *applier) findOut(ctx context.Context, req applyRequest, u *unstructured.Unstructured, inventoried objectSet,
	own *ownership) (exists bool, mode string, found int, err error) {
	ref := refOf(u)
	mode = u.GetAnnotations()[addonsv1alpha1.AnnotationMode]
	cached := &unstructured.Unstructured{}
	cached.SetGroupVersionKind(ref.GroupVersionKind())
	err = a.cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, cached)
	lookUp := false
	switch {
	case err == nil && unsealed(cached) && !inventoried.has(ref):
		// It carries kaddons' labels, but kaddons did not write it: another tool's, as
		// if unlabelled. spec.adopt may take it over; nothing else writes it.
		lookUp = true
	case err == nil:
		exists = true
		if owner := ownerOf(cached.GetLabels()); owner != "" && owner != req.ownerKey() {
			return false, mode, 0, &conflictError{ref: ref, owner: owner}
		}
		own.live[ref] = liveInfo{exists: true, resourceVersion: cached.GetResourceVersion(), generation: cached.GetGeneration()}
		if m, ok := cached.GetAnnotations()[addonsv1alpha1.AnnotationMode]; ok {
			mode = m
		}
	case meta.IsNoMatchError(err):
		// A kind the package's own CRD defines is not served yet: nothing exists.
	case !apierrors.IsNotFound(err):
		return false, mode, 0, &writeError{err: fmt.Errorf("reading %s: %w", ref, err)}
	case !req.adopt && (ref.Group != "" || ref.Kind != kindNamespace):
		// Not cached: kaddons did not create it, it does not exist, or (when the
		// inventory lists it) it was deleted out of band and perhaps created again by
		// another tool since. The create-only apply finds out without a request of its
		// own, and never takes over what another tool created.
		own.absent[ref] = true
	default:
		// A Namespace, or an object spec.adopt may take over: does it exist?
		lookUp = true
	}
	if lookUp {
		found, err := a.uncached(ctx, req, ref, own)
		if err != nil || found == foundUnmanaged || found == foundExternal {
			return false, mode, found, err
		}
		exists = found == foundOurs
	}
	return exists, mode, foundNothing, nil
}

// Answers of uncached about an object that neither the cache nor the inventory knows.
const (
	foundNothing   = iota // it does not exist: kaddons creates it
	foundOurs             // it is kaddons' own (the cache lags) or being adopted
	foundExternal         // it is used as it is and not recorded (own.external)
	foundUnmanaged        // it exists unmanaged and waits for adoption
)

// uncached looks up on the API server an object that neither the cache nor the inventory
// knows, and records in own what becomes of it.
func (a *applier) uncached(ctx context.Context, req applyRequest, ref addonsv1alpha1.ObjectReference, own *ownership) (int, error) {
	live, err := a.liveMetadata(ctx, ref)
	if err != nil {
		return 0, &writeError{err: err}
	}
	if live == nil {
		return foundNothing, nil
	}
	switch owner := a.ownerOf(ref, live); {
	case owner == req.ownerKey():
		return foundOurs, nil
	case owner != "":
		return 0, &conflictError{ref: ref, owner: owner}
	case ref.Group == "" && ref.Kind == kindNamespace,
		live.GetAnnotations()[addonsv1alpha1.AnnotationMode] != "":
		// A Namespace holds things that are not the add-on's: use it, never adopt or
		// delete it. An object its owner marked not to be managed is left alone too.
		own.external[ref], own.skip[ref] = true, true
		return foundExternal, nil
	case req.adopt:
		own.adopted = append(own.adopted, adoptedObject(ref, live))
		return foundOurs, nil
	}
	return foundUnmanaged, nil
}

// ownerOf returns the add-on that live's instance labels name, or "" when there is none
// or kaddons did not write it (no valid seal): labels alone prove nothing.
func (a *applier) ownerOf(ref addonsv1alpha1.ObjectReference, live metav1.Object) string {
	if a.sealer != nil && !a.sealer.verify(ref.GroupVersionKind().GroupKind(), live) {
		return ""
	}
	return ownerOf(live.GetLabels())
}

// liveMetadata reads ref's metadata from the API server, past the label-filtered cache;
// nil when it does not exist.
func (a *applier) liveMetadata(ctx context.Context, ref addonsv1alpha1.ObjectReference) (*metav1.PartialObjectMetadata, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	err := a.reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case apierrors.IsForbidden(err):
		return nil, &forbiddenError{as: a.as, denied: []accessRequest{{verb: verbGet, ref: ref}}, err: err}
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	return live, nil
}

// adoptedObject records ref, taken over from the field managers of live.
func adoptedObject(ref addonsv1alpha1.ObjectReference, live *metav1.PartialObjectMetadata) addonsv1alpha1.AdoptedObject {
	var managers []string
	for _, m := range live.GetManagedFields() {
		if m.Manager != "" && !slices.Contains(managers, m.Manager) && len(managers) < 16 {
			managers = append(managers, m.Manager)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	return addonsv1alpha1.AdoptedObject{ObjectReference: ref, FieldManagers: managers, AdoptedAt: &now}
}

// adoptionError reports rendered objects that exist without kaddons' ownership.
type adoptionError struct {
	refs []addonsv1alpha1.ObjectReference
}

func (e *adoptionError) Error() string {
	names := make([]string, 0, len(e.refs))
	for _, ref := range e.refs {
		names = append(names, ref.String())
	}
	return fmt.Sprintf("%s already exist%s and kaddons did not create %s; nothing was changed. "+
		"Set spec.adopt: IfUnmanaged to take %s over, or remove %s",
		strings.Join(names, ", "), map[bool]string{true: "s", false: ""}[len(names) == 1], them(len(names)),
		them(len(names)), them(len(names)))
}

// them is "it" or "them".
func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// conflictError reports a rendered object that another add-on owns.
type conflictError struct {
	ref   addonsv1alpha1.ObjectReference
	owner string
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s already exists and belongs to %s; kaddons does not take it over", e.ref, e.owner)
}

// modeError reports a child with an unknown addons.kaddons.dev/mode annotation.
type modeError struct {
	ref  addonsv1alpha1.ObjectReference
	mode string
}

func (e *modeError) Error() string {
	return fmt.Sprintf("%s has annotation %s=%q; use %q or %q", e.ref, addonsv1alpha1.AnnotationMode, e.mode,
		addonsv1alpha1.ModeEnsureExists, addonsv1alpha1.ModeIgnore)
}

// pruneError reports objects that left the manifests but could not be deleted.
type pruneError struct{ err error }

func (e *pruneError) Error() string { return e.err.Error() }
func (e *pruneError) Unwrap() error { return e.err }

// writeError reports a write (or a read it needs) that the API server refused.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// applyFailures maps each typed apply error to its condition: the one table of apply
// failure reasons. The first entry whose error type matches wins.
var applyFailures = []struct {
	is       func(error) bool
	class    conditionClass
	reason   string
	terminal bool
	// retryAfter, when set, looks again after this long instead of returning the error.
	retryAfter time.Duration
}{
	{is: errorIs[*conflictError], class: classStalled, reason: addonsv1alpha1.ReasonOwnershipConflict, terminal: true},
	{is: errorIs[*modeError], class: classStalled, reason: addonsv1alpha1.ReasonInvalidMode, terminal: true},
	// Retrying cannot help: the spec must change or opt in to re-creation.
	{is: errorIs[*immutableError], class: classFailed, reason: addonsv1alpha1.ReasonImmutableField, terminal: true},
	{is: errorIs[*pruneError], class: classFailed, reason: addonsv1alpha1.ReasonPruneFailed},
	// The package must change: the object, or the whole set, is more than the API
	// server, etcd or the inventory takes.
	{is: errorIs[*objectTooLargeError], class: classStalled, reason: addonsv1alpha1.ReasonObjectTooLarge, terminal: true},
	{is: errorIs[*inventoryTooLargeError], class: classStalled, reason: addonsv1alpha1.ReasonInventoryTooLarge, terminal: true},
	// Nothing was written to them; the objects may go away or spec.adopt may change. The add-on
	// stalls (a human decides) and looks again after adoptionRetry.
	{is: errorIs[*adoptionError], class: classStalled, reason: addonsv1alpha1.ReasonAdoptionRequired, retryAfter: adoptionRetry},
	// The add-on's ServiceAccount lacks a permission; an admin may grant it.
	{is: isForbidden, class: classStalled, reason: addonsv1alpha1.ReasonForbidden, retryAfter: forbiddenRetry},
}

// adoptionRetry is how often an add-on waiting for adoption looks at the cluster again.
const adoptionRetry = time.Minute

// errorIs reports whether err wraps an error of type T.
func errorIs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// applyOutcome maps an apply error to its outcome through applyFailures; anything else
// is ApplyFailed and retried.
func applyOutcome(err error) outcome {
	for _, f := range applyFailures {
		if !f.is(err) {
			continue
		}
		if f.retryAfter > 0 {
			return outcome{stop: true, class: f.class, reason: f.reason, message: err.Error(), requeueAfter: f.retryAfter}
		}
		return outcome{stop: true, class: f.class, reason: f.reason, message: err.Error(), err: err, terminal: f.terminal}
	}
	return failed(addonsv1alpha1.ReasonApplyFailed, err)
}

// ignored reports whether the live object carries mode ignore, which keeps kaddons from
// pruning or deleting it.
func (a *applier) ignored(ctx context.Context, ref addonsv1alpha1.ObjectReference) bool {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	if err := a.cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live); err != nil {
		return false
	}
	return live.GetAnnotations()[addonsv1alpha1.AnnotationMode] == addonsv1alpha1.ModeIgnore
}

// stageWriter applies the stages of one request and collects their results.
type stageWriter struct {
	*applier
	req  applyRequest
	live map[addonsv1alpha1.ObjectReference]liveInfo
	// absent are the objects applied create-only (ownership.absent).
	absent map[addonsv1alpha1.ObjectReference]bool
	mu     sync.Mutex
	res    *applyResult
	// existing are the create-only objects of the last stage that the API server
	// refused with a Conflict, as it refuses an object that exists; nothing was written to
	// them. conflicts are those refusals, in the same order.
	existing  []addonsv1alpha1.ObjectReference
	conflicts []error
}

// writeStage applies stage s, resolves the objects its create-only applies found to
// exist, and waits for the CRDs of the CRD stage to be served.
func (w *stageWriter) writeStage(ctx context.Context, own *ownership, stages map[int][]*unstructured.Unstructured, s int) error {
	if err := w.applyStage(ctx, stages[s]); err != nil {
		return err
	}
	if len(w.existing) > 0 {
		if err := w.resolveExisting(ctx, own, stages, s); err != nil {
			return err
		}
	}
	if s == stageCRDs && len(stages[s]) > 0 {
		return w.waitEstablished(ctx, stages[s])
	}
	return nil
}

// resolveExisting decides about the objects of stage s that were applied create-only
// but exist, and about every object of this and the later stages still assumed absent:
// each is looked up past the cache and decided as handedOver decides for a Namespace
// (uncached). Unmanaged ones make an *adoptionError that lists them all; nothing was
// written to any of them, and the new objects this apply created stay the add-on's (the
// write-ahead record lists them). Objects that turn out to be the add-on's own (the
// cache lagged) are applied again; objects used as they are leave the stages.
func (w *stageWriter) resolveExisting(ctx context.Context, own *ownership, stages map[int][]*unstructured.Unstructured, s int) error {
	existing := newObjectSet(w.existing)
	w.existing, w.conflicts = nil, nil
	var unmanaged []addonsv1alpha1.ObjectReference
	for t := s; t <= stageAPIEndpoints; t++ {
		for _, u := range stages[t] {
			ref := refOf(u)
			if !own.absent[ref] || (t == s && !existing.has(ref)) {
				// Known, or created just now.
				continue
			}
			found, err := w.uncached(ctx, w.req, ref, own)
			if err != nil {
				return err
			}
			switch found {
			case foundUnmanaged:
				unmanaged = append(unmanaged, ref)
			case foundOurs:
				delete(own.absent, ref)
				own.live[ref] = liveInfo{exists: true}
			}
		}
	}
	if len(unmanaged) > 0 {
		return &adoptionError{refs: unmanaged}
	}
	for t := s; t <= stageAPIEndpoints; t++ {
		stages[t] = slices.DeleteFunc(stages[t], func(u *unstructured.Unstructured) bool { return own.skip[refOf(u)] })
	}
	var again []*unstructured.Unstructured
	for _, u := range stages[s] {
		if existing.has(refOf(u)) {
			again = append(again, u)
		}
	}
	if err := w.applyStage(ctx, again); err != nil {
		return err
	}
	if len(w.existing) > 0 {
		// Refused again although the look-up found it absent or the add-on's: created
		// between the look-up and the apply, or a Conflict of another cause. Retried.
		return &writeError{err: errors.Join(w.conflicts...)}
	}
	return nil
}

// applyStage server-side applies one stage's objects with bounded concurrency.
func (w *stageWriter) applyStage(ctx context.Context, objects []*unstructured.Unstructured) error {
	var (
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, applyConcurrency)
	)
	for _, o := range objects {
		wg.Add(1)
		sem <- struct{}{}
		go func(o *unstructured.Unstructured) {
			defer wg.Done()
			defer func() { <-sem }()
			u := o.DeepCopy()
			ref := refOf(u)
			gk := u.GroupVersionKind().GroupKind()
			w.echoes.begin(gk, u)
			recreated, err := w.applyOne(ctx, u)
			w.echoes.end(gk, u, err)
			w.mu.Lock()
			defer w.mu.Unlock()
			if recreated {
				w.res.recreated = append(w.res.recreated, ref)
			}
			if w.absent[ref] && apierrors.IsConflict(err) {
				// It exists: the create-only apply wrote nothing (resolveExisting).
				w.existing = append(w.existing, ref)
				w.conflicts = append(w.conflicts, fmt.Errorf("applying %s: %w", ref, err))
				return
			}
			if err != nil {
				if tooLarge(err) {
					err = &objectTooLargeError{ref: ref, err: err}
				}
				errs = append(errs, fmt.Errorf("applying %s: %w", ref, err))
				return
			}
			w.res.applied[ref] = written{generation: u.GetGeneration(), resourceVersion: u.GetResourceVersion()}
			if !w.req.inputsChanged && drifted(w.live[ref], u) {
				w.res.drifted = append(w.res.drifted, ref)
			}
		}(o)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errorIs[*immutableError](err) || errorIs[*objectTooLargeError](err) {
			return err
		}
		return &writeError{err: err}
	}
	return nil
}

// applyOne server-side applies one object and reports whether it had to be re-created.
// An existing object's excluded fields are released first and then left out.
func (w *stageWriter) applyOne(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	if paths := w.req.excluded[refOf(u)]; len(paths) > 0 && w.live[refOf(u)].exists {
		if err := w.release(ctx, u, paths); err != nil {
			return false, err
		}
		*u = *without(u, paths)
	}
	if w.absent[refOf(u)] {
		u.SetResourceVersion(absentResourceVersion)
	}
	w.sealer.sealObject(u)
	err := w.applyRetryingBindings(ctx, u)
	fields := immutableFields(err)
	if fields == "" {
		return false, err
	}
	ref := refOf(u)
	if !w.req.recreateOnImmutable {
		return false, &immutableError{ref: ref, fields: fields, err: err}
	}
	log.FromContext(ctx).Info("Re-creating object to change immutable fields", "object", ref.String(), "fields", fields)
	if err := w.recreate(ctx, u); err != nil {
		return false, fmt.Errorf("re-creating %s to change %s: %w", ref, fields, err)
	}
	return true, w.applyRetryingBindings(ctx, u)
}

// bindingRetryTimeout bounds the retries of a binding whose role the API server's RBAC
// cache has not seen yet.
const bindingRetryTimeout = 10 * time.Second

// release hands the excluded fields of the live object u names to ReleasedFieldManager,
// at their live values, so that kaddons leaving them out of its apply keeps them as they
// are and any other manager (an HPA, the add-on itself) can change them.
func (w *stageWriter) release(ctx context.Context, u *unstructured.Unstructured, paths [][]string) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	if err := w.cache.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	held := only(live, paths)
	if len(held.Object) <= 3 {
		// Only apiVersion, kind and metadata: nothing to hold.
		return nil
	}
	return w.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(held),
		client.FieldOwner(ReleasedFieldManager), client.ForceOwnership)
}

// objectTooLargeError reports an object the API server or etcd refused for its size.
type objectTooLargeError struct {
	ref addonsv1alpha1.ObjectReference
	err error
}

func (e *objectTooLargeError) Error() string {
	return fmt.Sprintf("%s is too large for the API server (%v); make it smaller in the package or split it", e.ref, e.err)
}

func (e *objectTooLargeError) Unwrap() error { return e.err }

// tooLarge reports whether err says that a request or object exceeds a size limit: the
// API server's 413, etcd's "request is too large" (a 500), or a validation error on the
// total size of an object's data (a ConfigMap or Secret over 1 MiB).
func tooLarge(err error) bool {
	if apierrors.IsRequestEntityTooLargeError(err) || strings.Contains(err.Error(), "request is too large") ||
		// The API server's etcd client refuses to send more than 2 MiB (gRPC's
		// ResourceExhausted), which the API server answers with a 500.
		strings.Contains(err.Error(), "trying to send message larger than max") {
		return true
	}
	var apiStatus apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &apiStatus) || apiStatus.Status().Details == nil {
		return false
	}
	for _, c := range apiStatus.Status().Details.Causes {
		// The whole object's size is reported on the empty path ("[]" once formatted); the
		// 256 KiB cap on all of an object's annotations on metadata.annotations.
		if c.Type == metav1.CauseType(field.ErrorTypeTooLong) && (c.Field == "" || c.Field == "[]" || c.Field == "metadata.annotations") {
			return true
		}
	}
	return false
}

// immutableError reports an apply refused because it changes immutable fields.
type immutableError struct {
	ref    addonsv1alpha1.ObjectReference
	fields string
	err    error
}

func (e *immutableError) Error() string {
	return fmt.Sprintf("the new manifest changes %s, which cannot be changed in place; "+
		"set spec.upgrade.recreateOnImmutable to let kaddons delete and re-create %s", e.fields, e.ref)
}

func (e *immutableError) Unwrap() error { return e.err }

// immutableFields returns the fields an Invalid error says are immutable, or "".
func immutableFields(err error) string {
	var apiStatus apierrors.APIStatus
	if err == nil || !apierrors.IsInvalid(err) || !errors.As(err, &apiStatus) {
		return ""
	}
	var fields []string
	if details := apiStatus.Status().Details; details != nil {
		for _, c := range details.Causes {
			if strings.Contains(c.Message, "immutable") {
				fields = append(fields, c.Field)
			}
		}
	}
	if len(fields) == 0 && strings.Contains(err.Error(), "field is immutable") {
		fields = append(fields, "an immutable field")
	}
	return strings.Join(fields, ", ")
}

// recreate deletes the live object and waits until it is gone.
func (a *applier) recreate(ctx context.Context, u *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	live.SetNamespace(u.GetNamespace())
	live.SetName(u.GetName())
	if err := a.client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := a.reader.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live.DeepCopy())
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// applyRetryingBindings server-side applies u, retrying a binding briefly on NotFound.
func (a *applier) applyRetryingBindings(ctx context.Context, u *unstructured.Unstructured) error {
	applyOnce := func() error { return a.applyForMetadata(ctx, u) }
	if stageOf(u.GroupVersionKind().Group, u.GetKind()) != stageBindings {
		return applyOnce()
	}
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bindingRetryTimeout, true, func(context.Context) (bool, error) {
		err = applyOnce()
		return !apierrors.IsNotFound(err), nil
	})
	return err
}

// applyForMetadata server-side applies u and asks only for the metadata of the result:
// the engine reads nothing else from it (the resource version and generation, for drift
// and echoes), and the API server encodes and the manager decodes a fraction of the
// object. On success, u carries the applied object's resource version, generation and
// UID.
func (a *applier) applyForMetadata(ctx context.Context, u *unstructured.Unstructured) error {
	body, err := u.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encoding %s: %w", refOf(u), err)
	}
	applied := &metav1.PartialObjectMetadata{}
	applied.SetGroupVersionKind(u.GroupVersionKind())
	applied.SetNamespace(u.GetNamespace())
	applied.SetName(u.GetName())
	opts := []client.PatchOption{client.FieldOwner(FieldManager), client.ForceOwnership}
	if builtIn(u.GroupVersionKind()) {
		opts = append(opts, client.FieldValidation(metav1.FieldValidationIgnore))
	}
	if err := a.client.Patch(ctx, applied, client.RawPatch(types.ApplyPatchType, body), opts...); err != nil {
		return err
	}
	u.SetResourceVersion(applied.GetResourceVersion())
	u.SetGeneration(applied.GetGeneration())
	u.SetUID(applied.GetUID())
	return nil
}

// builtIn reports whether gvk is a kind compiled into the API server, as client-go's
// scheme lists them. An apply of such a kind is sent with fieldValidation=Ignore: the API
// server refuses an unknown field in it whatever the directive ("field not declared in
// schema"), and a body encoded from a map cannot repeat a field, so the only effect of
// the default (Warn) would be a second, strict YAML decoding of every apply on the API
// server. Custom resources keep the API server's default: what it does with their unknown
// fields depends on their schema.
func builtIn(gvk schema.GroupVersionKind) bool {
	return clientgoscheme.Scheme.Recognizes(gvk)
}

// waitEstablished waits until the CRDs of the package are served, so that custom
// resources of the same package can be applied right after.
func (a *applier) waitEstablished(ctx context.Context, crds []*unstructured.Unstructured) error {
	for _, o := range crds {
		name := o.GetName()
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitTimeout, true,
			func(ctx context.Context) (bool, error) {
				crd := &unstructured.Unstructured{}
				crd.SetGroupVersionKind(o.GroupVersionKind())
				if err := a.reader.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
					return false, client.IgnoreNotFound(err)
				}
				res, err := kstatus.Compute(crd)
				if err != nil {
					return false, err
				}
				return res.Status == kstatus.CurrentStatus, nil
			})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not established: %w", name, err)
		}
	}
	return nil
}

// drifted reports whether applying unchanged manifests changed the object: it was
// missing, its spec generation moved, or (for kinds without a generation, such as
// ConfigMaps) its resource version moved.
func drifted(before liveInfo, after *unstructured.Unstructured) bool {
	switch {
	case !before.exists:
		return true
	case after.GetGeneration() != 0:
		return after.GetGeneration() != before.generation
	default:
		return after.GetResourceVersion() != before.resourceVersion
	}
}

// refOf returns the inventory reference of u.
func refOf(u *unstructured.Unstructured) addonsv1alpha1.ObjectReference {
	gvk := u.GroupVersionKind()
	return addonsv1alpha1.ObjectReference{
		Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
		Namespace: u.GetNamespace(), Name: u.GetName(),
	}
}

// sameObject compares references ignoring the API version, which may change between
// package versions without making it another object.
func sameObject(x, y addonsv1alpha1.ObjectReference) bool {
	return x.Group == y.Group && x.Kind == y.Kind && x.Namespace == y.Namespace && x.Name == y.Name
}

// objectSet holds references by object, whatever their API version (see sameObject), so
// that set operations on inventories of thousands of objects stay linear.
type objectSet map[addonsv1alpha1.ObjectReference]bool

// newObjectSet returns the set of refs.
func newObjectSet(refs []addonsv1alpha1.ObjectReference) objectSet {
	s := make(objectSet, len(refs))
	for _, ref := range refs {
		s.add(ref)
	}
	return s
}

func (s objectSet) add(ref addonsv1alpha1.ObjectReference) {
	ref.Version = ""
	s[ref] = true
}

func (s objectSet) has(ref addonsv1alpha1.ObjectReference) bool {
	ref.Version = ""
	return s[ref]
}

// staleObjects returns the entries of previous that desired no longer contains.
func staleObjects(previous, desired []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	keep := newObjectSet(desired)
	var stale []addonsv1alpha1.ObjectReference
	for _, p := range previous {
		if !keep.has(p) {
			stale = append(stale, p)
		}
	}
	return stale
}

// mergeInventory returns desired plus the entries of extra it lacks. When applied is not
// nil, desired entries count only if they were applied.
func mergeInventory(extra, desired []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]written) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, d := range desired {
		if _, ok := applied[d]; applied == nil || ok {
			out = append(out, d)
		}
	}
	return unionObjects(out, extra)
}

func ptrTo[T any](v T) *T { return &v }
