package engine

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// isPaused reports whether the user suspended reconciliation of obj.
func isPaused(obj addonsv1alpha1.Addon) bool {
	return obj.GetAddonSpec().Suspend || obj.GetAnnotations()[addonsv1alpha1.AnnotationPaused] == "true"
}

// gate stops the reconcile while the add-on is paused or its dependencies are not Ready.
// Nothing is applied or pruned then; what runs keeps running.
func (r *Reconciler) gate(ctx context.Context, st *reconcileState) outcome {
	if isPaused(st.addon) {
		return pausedAt(st.addon, pausedMessage)
	}
	if st.settings.kindPaused(r.gvk.Kind) {
		return pausedAt(st.addon, fmt.Sprintf("reconciliation of every %s is paused by the operator configuration", r.gvk.Kind))
	}
	if len(st.addon.GetAddonSpec().DependsOn) == 0 {
		return proceed()
	}
	self := addonKey{kind: r.gvk.Kind, namespace: st.addon.GetNamespace(), name: st.addon.GetName()}
	if cycle := r.findCycle(ctx, self); cycle != nil {
		return stalled(addonsv1alpha1.ReasonDependencyCycle, fmt.Errorf("spec.dependsOn forms a cycle: %s", strings.Join(cycle, " -> ")))
	}
	var waiting []string
	for _, dep := range st.addon.GetAddonSpec().DependsOn {
		key := dependencyKey(st.addon, dep)
		u, err := r.getAddon(ctx, key)
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return failed(addonsv1alpha1.ReasonDependencyNotReady, fmt.Errorf("reading dependency %s: %w", key, err))
		}
		if why := dependencyWait(st.addon, key, u, err); why != "" {
			waiting = append(waiting, key.String()+": "+why)
		}
	}
	if len(waiting) > 0 {
		return progressing(addonsv1alpha1.ReasonDependencyNotReady, "waiting for "+strings.Join(waiting, "; "))
	}
	return proceed()
}

// pausedAt is the paused outcome. When the spec changed since it was last applied (other
// than spec.suspend), the conditions and status.observedGeneration keep the generation
// last applied, so that kstatus, GitOps tools and dependents see that the change is
// not in effect.
func pausedAt(addon addonsv1alpha1.Addon, message string) outcome {
	out := paused(message)
	status := addon.GetAddonStatus()
	if status.ObservedGeneration > 0 && status.ObservedGeneration < addon.GetGeneration() &&
		status.AppliedSpecHash != "" && status.AppliedSpecHash != specHash(addon) {
		out.generation = status.ObservedGeneration
		out.message = fmt.Sprintf("%s; generation %d of the spec is not applied", message, addon.GetGeneration())
	}
	return out
}

// addonKey identifies an add-on of any kind.
type addonKey struct{ kind, namespace, name string }

// String formats the key as Kind namespace/name.
func (k addonKey) String() string { return k.kind + " " + k.namespace + "/" + k.name }

// dependencyKey resolves a reference to another add-on, defaulting its namespace to the
// namespace of from.
func dependencyKey(from addonsv1alpha1.Addon, dep addonsv1alpha1.AddonReference) addonKey {
	return addonKey{kind: dep.Kind, namespace: RefNamespace(from, dep), name: dep.Name}
}

// RefNamespace returns the namespace ref names, defaulting to the namespace of from.
func RefNamespace(from addonsv1alpha1.Addon, ref addonsv1alpha1.AddonReference) string {
	if ref.Namespace != "" {
		return ref.Namespace
	}
	return from.GetNamespace()
}

// getAddon reads an add-on of any kaddons kind from the cache, as its typed object: the
// typed informer is the one whose events wake dependents, so it is never behind them.
func (r *Reconciler) getAddon(ctx context.Context, key addonKey) (addonsv1alpha1.Addon, error) {
	obj, err := r.scheme.New(addonsv1alpha1.GroupVersion.WithKind(key.kind))
	if err != nil {
		return nil, &meta.NoKindMatchError{GroupKind: addonsv1alpha1.GroupVersion.WithKind(key.kind).GroupKind()}
	}
	addon, ok := obj.(addonsv1alpha1.Addon)
	if !ok {
		return nil, fmt.Errorf("%s is not an add-on kind", key.kind)
	}
	err = r.client.Get(ctx, types.NamespacedName{Namespace: key.namespace, Name: key.name}, addon)
	return addon, err
}

// dependencyWait says why the dependency key (read as dep, or not found: getErr) is not
// Ready yet, or "" when it is. For a dependency in another namespace than the dependent
// it says only "not Ready": whether it exists, and its reason and message, belong to that
// namespace, and the dependent's author may not be able to read them.
func dependencyWait(dependent addonsv1alpha1.Addon, key addonKey, dep addonsv1alpha1.Addon, getErr error) string {
	if getErr == nil {
		ok, why := addonReady(dep)
		switch {
		case ok:
			return ""
		case key.namespace == dependent.GetNamespace():
			return why
		}
	} else if key.namespace == dependent.GetNamespace() {
		return "not found"
	}
	return "not Ready"
}

// addonReady reports whether an add-on's Ready condition is True for its generation.
func addonReady(a addonsv1alpha1.Addon) (bool, string) {
	ready := meta.FindStatusCondition(a.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady)
	switch {
	case ready == nil:
		return false, "not Ready yet"
	case ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == a.GetGeneration():
		return true, ""
	default:
		return false, fmt.Sprintf("not Ready (%s: %s)", ready.Reason, ready.Message)
	}
}

// findCycle follows dependsOn from start through the cache and returns the path of a
// cycle that leads back to start, or nil. It does not follow the dependsOn of add-ons in
// other namespaces than start's: their specs are not the dependent's to see, and a cycle
// through another namespace shows as dependencies that are not Ready on both sides.
func (r *Reconciler) findCycle(ctx context.Context, start addonKey) []string {
	visited := map[addonKey]bool{}
	var walk func(k addonKey, path []string) []string
	walk = func(k addonKey, path []string) []string {
		if k.namespace != start.namespace {
			return nil
		}
		a, err := r.getAddon(ctx, k)
		if err != nil {
			return nil
		}
		for _, dep := range a.GetAddonSpec().DependsOn {
			next := dependencyKey(a, dep)
			if next == start {
				return append(path, next.String())
			}
			if visited[next] {
				continue
			}
			visited[next] = true
			if cycle := walk(next, append(path, next.String())); cycle != nil {
				return cycle
			}
		}
		return nil
	}
	return walk(start, []string{start.String()})
}
