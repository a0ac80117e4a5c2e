package ssa

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

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
// *ConflictError). An object the cache does not hold was not created by kaddons, does not
// exist yet, or (when the inventory lists it) was deleted out of band and may have been
// created again by another tool since. It costs no request here: it is applied
// create-only (own.absent), which the API server refuses, writing nothing, when the
// object exists; resolveExisting then looks it up. Only a Namespace, and every such
// object when req.Adopt may take it over, is looked up on the API server before any
// write (uncached). One that exists without kaddons' labels is never written unless
// req.Adopt takes it over (an *AdoptionError lists them all). A Namespace that exists
// unmanaged is used, never adopted. Modes (ignore, ensure-exists) on the object decide
// the rest; an unknown mode is a *ModeError.
func (m *Manager) handedOver(ctx context.Context, req Request) (ownership, error) {
	own := ownership{skip: map[addonsv1alpha1.ObjectReference]bool{}, external: map[addonsv1alpha1.ObjectReference]bool{},
		live: map[addonsv1alpha1.ObjectReference]liveInfo{}, absent: map[addonsv1alpha1.ObjectReference]bool{}}
	var unmanaged []addonsv1alpha1.ObjectReference
	inventoried := NewObjectSet(UnionObjects(req.Previous, req.Pending))
	for _, u := range req.Objects {
		ref := RefOf(u)
		exists, mode, found, err := m.findOut(ctx, req, u, inventoried, &own)
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
			return own, &ModeError{Ref: ref, Mode: mode}
		}
	}
	if len(unmanaged) > 0 {
		return own, &AdoptionError{Refs: unmanaged}
	}
	return own, nil
}

// findOut decides about one rendered object u, as handedOver describes: whether it exists
// and is the add-on's own, the mode it is managed with, and, when it was looked up past
// the cache, what uncached found (foundUnmanaged and foundExternal leave it out).
func (m *Manager) findOut(ctx context.Context, req Request, u *unstructured.Unstructured, inventoried ObjectSet,
	own *ownership) (exists bool, mode string, found int, err error) {
	ref := RefOf(u)
	mode = u.GetAnnotations()[addonsv1alpha1.AnnotationMode]
	cached := &unstructured.Unstructured{}
	cached.SetGroupVersionKind(ref.GroupVersionKind())
	err = m.Cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, cached)
	lookUp := false
	switch {
	case err == nil && Unsealed(cached) && !inventoried.Has(ref):
		// It carries kaddons' labels, but kaddons did not write it: another tool's, as
		// if unlabelled. spec.adopt may take it over; nothing else writes it.
		lookUp = true
	case err == nil:
		exists = true
		if owner := OwnerOf(cached.GetLabels()); owner != "" && owner != req.ownerKey() {
			return false, mode, 0, &ConflictError{Ref: ref, Owner: owner}
		}
		own.live[ref] = liveInfo{exists: true, resourceVersion: cached.GetResourceVersion(), generation: cached.GetGeneration()}
		if m, ok := cached.GetAnnotations()[addonsv1alpha1.AnnotationMode]; ok {
			mode = m
		}
	case meta.IsNoMatchError(err):
		// A kind the package's own CRD defines is not served yet: nothing exists.
	case !apierrors.IsNotFound(err):
		return false, mode, 0, &WriteError{Err: fmt.Errorf("reading %s: %w", ref, err)}
	case !req.Adopt && (ref.Group != "" || ref.Kind != kindNamespace):
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
		found, err := m.uncached(ctx, req, ref, own)
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
func (m *Manager) uncached(ctx context.Context, req Request, ref addonsv1alpha1.ObjectReference, own *ownership) (int, error) {
	live, err := m.liveMetadata(ctx, ref)
	if err != nil {
		return 0, &WriteError{Err: err}
	}
	if live == nil {
		return foundNothing, nil
	}
	switch owner := m.sealedOwner(ref, live); {
	case owner == req.ownerKey():
		return foundOurs, nil
	case owner != "":
		return 0, &ConflictError{Ref: ref, Owner: owner}
	case ref.Group == "" && ref.Kind == kindNamespace,
		live.GetAnnotations()[addonsv1alpha1.AnnotationMode] != "":
		// A Namespace holds things that are not the add-on's: use it, never adopt or
		// delete it. An object its owner marked not to be managed is left alone too.
		own.external[ref], own.skip[ref] = true, true
		return foundExternal, nil
	case req.Adopt:
		own.adopted = append(own.adopted, adoptedObject(ref, live))
		return foundOurs, nil
	}
	return foundUnmanaged, nil
}

// ownerOf returns the add-on that live's instance labels name, or "" when there is none
// or kaddons did not write it (no valid seal): labels alone prove nothing.
func (m *Manager) sealedOwner(ref addonsv1alpha1.ObjectReference, live metav1.Object) string {
	if m.Sealer != nil && !m.Sealer.verify(ref.GroupVersionKind().GroupKind(), live) {
		return ""
	}
	return OwnerOf(live.GetLabels())
}

// liveMetadata reads ref's metadata from the API server, past the label-filtered cache;
// nil when it does not exist.
func (m *Manager) liveMetadata(ctx context.Context, ref addonsv1alpha1.ObjectReference) (*metav1.PartialObjectMetadata, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	err := m.Reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case apierrors.IsForbidden(err):
		return nil, &ForbiddenError{As: m.As, Denied: []AccessRequest{{Verb: verbGet, Ref: ref}}, Err: err}
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

// Ignored reports whether the live object carries mode ignore, which keeps kaddons from
// pruning or deleting it.
func (m *Manager) Ignored(ctx context.Context, ref addonsv1alpha1.ObjectReference) bool {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	if err := m.Cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live); err != nil {
		return false
	}
	return live.GetAnnotations()[addonsv1alpha1.AnnotationMode] == addonsv1alpha1.ModeIgnore
}
