package ssa

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// deleteObjects deletes refs, as the Manager's identity, in reverse stage order, skipping
// objects that are already gone or that no longer carry the owner's instance labels
// (someone else took them over). It returns the refs it deleted or found gone.
//
// It also returns the objects that are still there after the delete, held by finalizers
// (its own or another controller's), with those finalizers; kaddons never removes them.
// Namespaces are left to the namespace controller and never counted as held.
func (m *Manager) deleteObjects(ctx context.Context, refs []addonsv1alpha1.ObjectReference, kind string,
	owner types.NamespacedName) ([]addonsv1alpha1.ObjectReference, []Held, error) {
	logger := log.FromContext(ctx)
	ordered := slices.Clone(refs)
	slices.SortStableFunc(ordered, func(x, y addonsv1alpha1.ObjectReference) int {
		return StageOf(y.Group, y.Kind) - StageOf(x.Group, x.Kind)
	})
	var (
		done []addonsv1alpha1.ObjectReference
		held []Held
		errs []error
	)
	for _, ref := range ordered {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := m.Reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			done = append(done, ref)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !OwnedBy(live.GetLabels(), kind, owner) {
			logger.Info("Not deleting object that is no longer labelled as ours", "object", ref.String())
			done = append(done, ref)
			continue
		}
		if len(live.GetFinalizers()) > 0 && (ref.Group != "" || ref.Kind != kindNamespace) {
			held = append(held, Held{Ref: ref, Finalizers: live.GetFinalizers()})
		}
		if !live.GetDeletionTimestamp().IsZero() {
			done = append(done, ref)
			continue
		}
		err = m.Client.Delete(ctx, live, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrTo(live.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", ref, err))
			continue
		}
		logger.Info("Deleted object", "object", ref.String())
		done = append(done, ref)
	}
	return done, held, errors.Join(errs...)
}

// Held is a child that a finalizer keeps after its deletion.
type Held struct {
	Ref        addonsv1alpha1.ObjectReference
	Finalizers []string
}

// DeleteInStages deletes refs, as the Manager's identity, one apply stage at a time, the
// last stage first (webhooks and APIServices, workloads, bindings, configuration,
// Namespaces, CRDs), and moves to the next stage only once every object of this one is
// gone. It returns the objects that still hold up the deletion.
func (m *Manager) DeleteInStages(ctx context.Context, refs []addonsv1alpha1.ObjectReference, kind string,
	owner types.NamespacedName) ([]Held, error) {
	byStage := map[int][]addonsv1alpha1.ObjectReference{}
	for _, ref := range refs {
		byStage[StageOf(ref.Group, ref.Kind)] = append(byStage[StageOf(ref.Group, ref.Kind)], ref)
	}
	for s := StageAPIEndpoints; s >= StageCRDs; s-- {
		if len(byStage[s]) == 0 {
			continue
		}
		_, held, err := m.deleteObjects(ctx, byStage[s], kind, owner)
		if err != nil || len(held) > 0 {
			return held, err
		}
	}
	return nil, nil
}

// HeldMessage names the children that finalizers hold, and by which finalizers.
func HeldMessage(held []Held) string {
	parts := make([]string, 0, len(held))
	for _, h := range held {
		parts = append(parts, fmt.Sprintf("%s (finalizers: %s)", h.Ref, strings.Join(h.Finalizers, ", ")))
	}
	return "waiting for children to be deleted: " + strings.Join(parts, "; ") +
		"; kaddons never removes another controller's finalizer"
}
