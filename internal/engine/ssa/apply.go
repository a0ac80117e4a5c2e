package ssa

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Manager applies rendered objects for one identity: staged server-side apply with the
// kaddons field manager, an inventory-based prune, and staged deletion. It replaces KDP's
// appliers, which apply client-side or prune by label selector (see
// docs/architecture.md). The engine builds one for the operator and one for each
// impersonated ServiceAccount; a Manager never reaches back into the engine.
type Manager struct {
	// Cache reads through the manager's shared, label-filtered cache.
	Cache client.Reader
	// Client writes, and Reader reads past the cache, as the identity.
	Client client.Client
	Reader client.Reader
	// CheckAccess asks the API server whether every write is allowed before making any
	// (impersonated identities).
	CheckAccess bool
	// Tracker is told of every write before and after it, so that its watch event costs
	// no reconcile; nil tracks nothing.
	Tracker Tracker
	// As names the identity in messages.
	As string
	// Sealer seals what the Manager writes, and tells the children it wrote from objects
	// that only carry their labels; nil trusts the labels.
	Sealer *Sealer
}

// Tracker follows the Manager's writes: Begin before a write of obj, End after it with
// the write's error (obj then carries what the write left).
type Tracker interface {
	Begin(gk schema.GroupKind, obj client.Object)
	End(gk schema.GroupKind, obj client.Object, err error)
}

// Request is what one Apply works on.
type Request struct {
	// Objects are the rendered objects, owner references included, in apply order.
	Objects []*unstructured.Unstructured
	// Previous is the inventory of the last apply: what may be pruned.
	Previous []addonsv1alpha1.ObjectReference
	// Pending are objects a write-ahead record lists beyond Previous: an interrupted
	// apply may have created them. They may be pruned too, but unlike Previous they do
	// not count as kaddons' own until the cache or the API server shows them labelled.
	Pending []addonsv1alpha1.ObjectReference
	// BeforeWrites, when set, runs once the objects to inventory are known and before
	// the first write: the engine records them ahead. Its error stops the apply with
	// nothing written.
	BeforeWrites func(ctx context.Context, desired []addonsv1alpha1.ObjectReference) error
	// Only, when not nil, limits the writes to these objects (the drifted ones).
	Only map[addonsv1alpha1.ObjectReference]bool
	// Kind and Owner name the add-on, as the instance labels carry them.
	Kind  string
	Owner types.NamespacedName
	// InputsChanged is true when the generation or version differs from the last apply,
	// so that changed objects count as updated rather than drifted.
	InputsChanged bool
	// RecreateOnImmutable lets Apply delete and re-create an object to change an
	// immutable field.
	RecreateOnImmutable bool
	// Adopt takes over existing objects that no add-on owns (spec.adopt: IfUnmanaged).
	Adopt bool
	// Excluded are fields set only on creation: on later applies they are handed to
	// ReleasedFieldManager and left out.
	Excluded Exclusions
	// WaveReady, when set, is asked before a wave is applied whether each wave it waits
	// for is healthy; nil applies the waves in order without waiting.
	WaveReady WaveReadyFunc
	// AllowCRDVersionRemoval skips Apply's checks of CustomResourceDefinitions
	// (spec.upgrade.allowCRDVersionRemoval): without it a definition that stops serving a
	// version while objects of it exist, or drops a version of its status.storedVersions,
	// is refused with a *StoredVersionError before anything is written. With it the
	// definition is written; the API server itself still refuses one that drops a stored
	// version.
	AllowCRDVersionRemoval bool
}

// Written is what a write left of an object: its generation and resource version.
type Written struct {
	Generation      int64
	ResourceVersion string
}

// Result is what one Apply did. After a failed Apply it still holds everything written
// so far and the inventory that covers it.
type Result struct {
	// Applied maps each object written to what the write left.
	Applied map[addonsv1alpha1.ObjectReference]Written
	// Inventory is the inventory to record: after a partial apply or prune it also keeps
	// every object that may still exist.
	Inventory []addonsv1alpha1.ObjectReference
	// Pruned lists the objects deleted because they left the manifests.
	Pruned []addonsv1alpha1.ObjectReference
	// Drifted lists the objects an apply changed although the add-on's inputs did not.
	Drifted []addonsv1alpha1.ObjectReference
	// Recreated lists objects deleted and re-created to change immutable fields.
	Recreated []addonsv1alpha1.ObjectReference
	// Adopted lists the unmanaged objects this apply took over.
	Adopted []addonsv1alpha1.AdoptedObject
}

// ownerKey formats the request's owner the way ownerOf formats a child's owner.
func (req Request) ownerKey() string {
	return OwnerOf(InstanceLabels(req.Kind, req.Owner))
}

// Apply writes req's objects stage by stage and prunes what left the inventory. Its
// errors are typed: *ConflictError, *ModeError, *ImmutableError, *PruneError, and
// *WriteError for anything else the API server refused.
func (m *Manager) Apply(ctx context.Context, req Request) (Result, error) {
	res := Result{Applied: map[addonsv1alpha1.ObjectReference]Written{}}
	waves, err := PlanWaves(req.Objects)
	if err != nil {
		return res, err
	}
	stages := map[int][]*unstructured.Unstructured{}
	for _, u := range req.Objects {
		s := StageOf(u.GroupVersionKind().Group, u.GetKind())
		stages[s] = append(stages[s], u)
	}
	if m.CheckAccess {
		if err := m.checkWrites(ctx, req); err != nil {
			return res, err
		}
	}
	if err := m.checkCRDVersions(ctx, stages[StageCRDs], req.AllowCRDVersionRemoval); err != nil {
		return res, err
	}
	own, err := m.handedOver(ctx, req)
	if err != nil {
		return res, err
	}
	external := own.external
	desired := make([]addonsv1alpha1.ObjectReference, 0, len(req.Objects))
	for s := StageCRDs; s <= StageAPIEndpoints; s++ {
		for _, u := range stages[s] {
			if ref := RefOf(u); !external[ref] {
				desired = append(desired, ref)
			}
		}
	}
	if req.BeforeWrites != nil {
		if err := req.BeforeWrites(ctx, desired); err != nil {
			return res, err
		}
	}
	w := &stageWriter{Manager: m, req: req, live: own.live, absent: own.absent, res: &res}
	err = w.writeWaves(ctx, &own, waves)
	// Objects found to exist and used as they are (resolveExisting) are not the add-on's.
	desired = slices.DeleteFunc(desired, func(ref addonsv1alpha1.ObjectReference) bool { return external[ref] })
	if err != nil {
		// Keep everything we may have created in the inventory, and prune nothing:
		// a partial apply must never delete what is still running.
		res.Inventory = MergeInventory(req.Previous, desired, res.Applied)
		// What was taken over before the apply stopped (at a wave that waits, say) is the
		// add-on's now: the next apply finds it so, and does not adopt it again.
		res.Adopted = slices.DeleteFunc(slices.Clone(own.adopted), func(a addonsv1alpha1.AdoptedObject) bool {
			_, written := res.Applied[a.ObjectReference]
			return !written
		})
		return res, err
	}
	res.Inventory = desired
	res.Adopted = own.adopted

	stale := slices.DeleteFunc(StaleObjects(UnionObjects(req.Previous, req.Pending), desired), func(ref addonsv1alpha1.ObjectReference) bool {
		return m.Ignored(ctx, ref)
	})
	pruned, _, err := m.deleteObjects(ctx, stale, req.Kind, req.Owner)
	res.Pruned = pruned
	if err != nil {
		// What could not be deleted stays in the inventory so the next reconcile retries.
		res.Inventory = MergeInventory(StaleObjects(stale, pruned), desired, nil)
		return res, &PruneError{Err: err}
	}
	return res, nil
}

// writeWaves applies the waves in order, each in stages; a wave waits until the waves
// it names are healthy. Objects the ownership checks skip, and those outside req.Only,
// are not written; own.skip may grow as the stages find objects that exist.
func (w *stageWriter) writeWaves(ctx context.Context, own *ownership, waves []Wave) error {
	ready := map[string]bool{}
	for i := range waves {
		if err := w.waitForWaves(ctx, waves, i, own.external, ready); err != nil {
			return err
		}
		w.later = waves[i+1:]
		stages := map[int][]*unstructured.Unstructured{}
		for _, u := range waves[i].Objects {
			if ref := RefOf(u); !own.skip[ref] && (w.req.Only == nil || w.req.Only[ref]) {
				s := StageOf(u.GroupVersionKind().Group, u.GetKind())
				stages[s] = append(stages[s], u)
			}
		}
		for s := StageCRDs; s <= StageAPIEndpoints; s++ {
			if err := w.writeStage(ctx, own, stages, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitForWaves checks, before wave i is applied, that every wave it waits for is
// healthy (req.WaveReady); ready remembers the waves found healthy in this Apply. The
// objects used as they are (external) are not the add-on's and are not waited for.
func (w *stageWriter) waitForWaves(ctx context.Context, waves []Wave, i int, external map[addonsv1alpha1.ObjectReference]bool,
	ready map[string]bool) error {
	if w.req.WaveReady == nil {
		return nil
	}
	for _, name := range waves[i].After {
		if ready[name] {
			continue
		}
		j := slices.IndexFunc(waves, func(wave Wave) bool { return wave.Name == name })
		refs := make([]addonsv1alpha1.ObjectReference, 0, len(waves[j].Objects))
		for _, u := range waves[j].Objects {
			if ref := RefOf(u); !external[ref] {
				refs = append(refs, ref)
			}
		}
		ok, message, err := w.req.WaveReady(ctx, refs, w.res.Applied)
		switch {
		case err != nil:
			return fmt.Errorf("checking wave %q before wave %q: %w", name, waves[i].Name, err)
		case !ok:
			return &WaveNotReadyError{Wave: waves[i].Name, Waits: name, Message: message}
		}
		ready[name] = true
	}
	return nil
}

// liveInfo is the cached state of one child before an apply.
type liveInfo struct {
	exists          bool
	resourceVersion string
	generation      int64
}

// stageWriter applies the stages of one request and collects their results.
type stageWriter struct {
	*Manager
	req  Request
	live map[addonsv1alpha1.ObjectReference]liveInfo
	// absent are the objects applied create-only (ownership.absent).
	absent map[addonsv1alpha1.ObjectReference]bool
	// later are the waves after the one being written, which resolveExisting looks
	// through as well.
	later []Wave
	mu    sync.Mutex
	res   *Result
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
	if s == StageCRDs && len(stages[s]) > 0 {
		return w.waitEstablished(ctx, stages[s])
	}
	return nil
}

// resolveExisting decides about the objects of stage s that were applied create-only
// but exist, and about every object of this and the later stages, and of the later
// waves, still assumed absent: each is looked up past the cache and decided as
// handedOver decides for a Namespace (uncached). Unmanaged ones make an *AdoptionError
// that lists them all, those of waves not applied yet included; nothing was written to
// any of them, and the new objects this apply created stay the add-on's (the write-ahead
// record lists them). Objects that turn out to be the add-on's own (the cache lagged)
// are applied again; objects used as they are leave the stages.
func (w *stageWriter) resolveExisting(ctx context.Context, own *ownership, stages map[int][]*unstructured.Unstructured, s int) error {
	existing := NewObjectSet(w.existing)
	w.existing, w.conflicts = nil, nil
	var unmanaged []addonsv1alpha1.ObjectReference
	for _, ref := range w.toLookUp(own, stages, s, existing) {
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
	if len(unmanaged) > 0 {
		return &AdoptionError{Refs: unmanaged}
	}
	for t := s; t <= StageAPIEndpoints; t++ {
		stages[t] = slices.DeleteFunc(stages[t], func(u *unstructured.Unstructured) bool { return own.skip[RefOf(u)] })
	}
	var again []*unstructured.Unstructured
	for _, u := range stages[s] {
		if existing.Has(RefOf(u)) {
			again = append(again, u)
		}
	}
	if err := w.applyStage(ctx, again); err != nil {
		return err
	}
	if len(w.existing) > 0 {
		// Refused again although the look-up found it absent or the add-on's: created
		// between the look-up and the apply, or a Conflict of another cause. Retried.
		return &WriteError{Err: errors.Join(w.conflicts...)}
	}
	return nil
}

// toLookUp lists, for resolveExisting, the objects still assumed absent: those of stage
// s that its create-only applies found to exist (existing; the others were created just
// now), those of the later stages, and those of the later waves that this apply writes.
func (w *stageWriter) toLookUp(own *ownership, stages map[int][]*unstructured.Unstructured, s int,
	existing ObjectSet) []addonsv1alpha1.ObjectReference {
	var refs []addonsv1alpha1.ObjectReference
	for t := s; t <= StageAPIEndpoints; t++ {
		for _, u := range stages[t] {
			if ref := RefOf(u); own.absent[ref] && (t != s || existing.Has(ref)) {
				refs = append(refs, ref)
			}
		}
	}
	for _, wave := range w.later {
		for _, u := range wave.Objects {
			if ref := RefOf(u); own.absent[ref] && !own.skip[ref] && (w.req.Only == nil || w.req.Only[ref]) {
				refs = append(refs, ref)
			}
		}
	}
	return refs
}

// applyStage server-side applies one stage's objects with bounded concurrency. The last
// object is applied on the calling goroutine: a new goroutine's stack grows, copied each
// time, to the depth of an apply (encoding the object, the HTTP/2 request, decoding the
// answer), while the reconcile's own has grown already; most stages hold one object.
func (w *stageWriter) applyStage(ctx context.Context, objects []*unstructured.Unstructured) error {
	var (
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, applyConcurrency)
	)
	for i, o := range objects {
		sem <- struct{}{}
		if i == len(objects)-1 {
			w.applyInStage(ctx, o, &errs)
			<-sem
			break
		}
		wg.Add(1)
		go func(o *unstructured.Unstructured) {
			defer wg.Done()
			defer func() { <-sem }()
			w.applyInStage(ctx, o, &errs)
		}(o)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errorIs[*ImmutableError](err) || errorIs[*ObjectTooLargeError](err) {
			return err
		}
		return &WriteError{Err: err}
	}
	return nil
}

// applyInStage applies a copy of o for applyStage and records the outcome, adding an
// error to errs; it may run concurrently with the other objects of the stage.
func (w *stageWriter) applyInStage(ctx context.Context, o *unstructured.Unstructured, errs *[]error) {
	u := o.DeepCopy()
	ref := RefOf(u)
	gk := u.GroupVersionKind().GroupKind()
	w.begin(gk, u)
	recreated, err := w.applyOne(ctx, u)
	w.end(gk, u, err)
	w.mu.Lock()
	defer w.mu.Unlock()
	if recreated {
		w.res.Recreated = append(w.res.Recreated, ref)
	}
	if w.absent[ref] && apierrors.IsConflict(err) {
		// It exists: the create-only apply wrote nothing (resolveExisting).
		w.existing = append(w.existing, ref)
		w.conflicts = append(w.conflicts, fmt.Errorf("applying %s: %w", ref, err))
		return
	}
	if err != nil {
		if tooLarge(err) {
			err = &ObjectTooLargeError{Ref: ref, Err: err}
		}
		*errs = append(*errs, fmt.Errorf("applying %s: %w", ref, err))
		return
	}
	w.res.Applied[ref] = Written{Generation: u.GetGeneration(), ResourceVersion: u.GetResourceVersion()}
	if !w.req.InputsChanged && drifted(w.live[ref], u) {
		w.res.Drifted = append(w.res.Drifted, ref)
	}
}

// begin and end tell the Tracker, if any, of a write.
func (m *Manager) begin(gk schema.GroupKind, obj client.Object) {
	if m.Tracker != nil {
		m.Tracker.Begin(gk, obj)
	}
}

func (m *Manager) end(gk schema.GroupKind, obj client.Object, err error) {
	if m.Tracker != nil {
		m.Tracker.End(gk, obj, err)
	}
}
