package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// DefaultUpgradeTimeout is how long a new version may take to become Ready when
// spec.upgrade.timeout is not set.
const DefaultUpgradeTimeout = 10 * time.Minute

// Event reasons of the lifecycle features.
const (
	// EventRolledBack is recorded when a failed upgrade is rolled back.
	EventRolledBack = "RolledBack"
	// EventUpgradeFailed is recorded when an upgrade fails and rollback is disabled.
	EventUpgradeFailed = "UpgradeFailed"
	// EventPaused is recorded when reconciliation is suspended.
	EventPaused = "Paused"
	// EventOrphaned is recorded when an add-on is deleted with deletionPolicy Orphan.
	EventOrphaned = "Orphaned"
)

// paused reports whether the user suspended reconciliation of obj.
func paused(obj addonsv1alpha1.Addon) bool {
	return obj.GetAddonSpec().Suspend || obj.GetAnnotations()[addonsv1alpha1.AnnotationPaused] == "true"
}

// gate stops the reconcile while the add-on is paused or its dependencies are not Ready.
// Nothing is applied or pruned then; what runs keeps running.
func (r *Reconciler) gate(ctx context.Context, st *reconcileState) (bool, error) {
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	if paused(st.addon) {
		markPaused(status, generation, pausedMessage)
		return true, nil
	}
	if st.settings.kindPaused(r.gvk.Kind) {
		markPaused(status, generation, fmt.Sprintf("reconciliation of every %s is paused by the operator configuration", r.gvk.Kind))
		return true, nil
	}
	if len(st.addon.GetAddonSpec().DependsOn) == 0 {
		return false, nil
	}
	self := addonKey{kind: r.gvk.Kind, namespace: st.addon.GetNamespace(), name: st.addon.GetName()}
	if cycle := r.findCycle(ctx, self); cycle != nil {
		msg := "spec.dependsOn forms a cycle: " + strings.Join(cycle, " -> ")
		markStalled(status, generation, addonsv1alpha1.ReasonDependencyCycle, msg)
		return true, reconcile.TerminalError(fmt.Errorf("%s", msg))
	}
	var waiting []string
	for _, dep := range st.addon.GetAddonSpec().DependsOn {
		key := r.dependencyKey(st.addon, dep)
		u, err := r.getAddon(ctx, key)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			waiting = append(waiting, key.String()+": not found")
		case err != nil:
			return true, fmt.Errorf("reading dependency %s: %w", key, err)
		default:
			if ok, why := addonReady(u); !ok {
				waiting = append(waiting, key.String()+": "+why)
			}
		}
	}
	if len(waiting) > 0 {
		markWaiting(status, generation, "waiting for "+strings.Join(waiting, "; "))
		return true, nil
	}
	return false, nil
}

// addonKey identifies an add-on of any kind.
type addonKey struct{ kind, namespace, name string }

// String formats the key as Kind namespace/name.
func (k addonKey) String() string { return k.kind + " " + k.namespace + "/" + k.name }

// dependencyKey resolves a dependsOn entry, defaulting its namespace to the add-on's.
func (r *Reconciler) dependencyKey(obj addonsv1alpha1.Addon, dep addonsv1alpha1.AddonReference) addonKey {
	ns := dep.Namespace
	if ns == "" {
		ns = obj.GetNamespace()
	}
	return addonKey{kind: dep.Kind, namespace: ns, name: dep.Name}
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
// cycle that leads back to start, or nil.
func (r *Reconciler) findCycle(ctx context.Context, start addonKey) []string {
	visited := map[addonKey]bool{}
	var walk func(k addonKey, path []string) []string
	walk = func(k addonKey, path []string) []string {
		a, err := r.getAddon(ctx, k)
		if err != nil {
			return nil
		}
		for _, dep := range a.GetAddonSpec().DependsOn {
			next := r.dependencyKey(a, dep)
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

// mapDependents returns a map function for events of add-ons of kind: it finds the
// add-ons of this controller's kind that depend on the changed one, so they are
// re-evaluated when it appears or becomes Ready.
func (r *Reconciler) mapDependents(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.dependentsOf(ctx, kind, o)
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

// listAddons lists every add-on of this controller's kind from the cache (nil on error:
// it serves event mapping, which cannot report one).
func (r *Reconciler) listAddons(ctx context.Context) []addonsv1alpha1.Addon {
	obj, err := r.scheme.New(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err != nil {
		return nil
	}
	list, ok := obj.(client.ObjectList)
	if !ok || r.client.List(ctx, list) != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	addons := make([]addonsv1alpha1.Addon, 0, len(items))
	for _, item := range items {
		if a, ok := item.(addonsv1alpha1.Addon); ok {
			addons = append(addons, a)
		}
	}
	return addons
}

// dependentsOf lists the add-ons of this controller's kind whose dependsOn names o, or
// that follow o (Definition.Follows).
func (r *Reconciler) dependentsOf(ctx context.Context, kind string, o client.Object) []reconcile.Request {
	target := addonKey{kind: kind, namespace: o.GetNamespace(), name: o.GetName()}
	var requests []reconcile.Request
	for _, a := range r.listAddons(ctx) {
		if slices.ContainsFunc(a.GetAddonSpec().DependsOn, func(dep addonsv1alpha1.AddonReference) bool {
			return r.dependencyKey(a, dep) == target
		}) || r.follows(a, target) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
		}
	}
	return requests
}

// upgradeTimeout returns spec.upgrade.timeout or the default.
func upgradeTimeout(obj addonsv1alpha1.Addon) time.Duration {
	if u := obj.GetAddonSpec().Upgrade; u != nil && u.Timeout != nil && u.Timeout.Duration > 0 {
		return u.Timeout.Duration
	}
	return DefaultUpgradeTimeout
}

// rollbackEnabled returns spec.upgrade.rollback, true by default.
func rollbackEnabled(obj addonsv1alpha1.Addon) bool {
	if u := obj.GetAddonSpec().Upgrade; u != nil && u.Rollback != nil {
		return *u.Rollback
	}
	return true
}

// pinVersion keeps a failed upgrade rolled back: while the spec still asks for the
// version that failed, the last healthy version is rendered instead.
func (r *Reconciler) pinVersion(_ context.Context, st *reconcileState) (bool, error) {
	status := st.addon.GetAddonStatus()
	up := status.Upgrade
	if up == nil || up.FailedVersion == "" {
		return false, nil
	}
	if up.FailedVersion != st.resolved.Version || up.FailedGeneration != st.addon.GetGeneration() {
		// The spec changed since the failure: try what it asks for now.
		up.FailedVersion, up.FailedGeneration = "", 0
		if up.Version == "" {
			status.Upgrade = nil
		}
		return false, nil
	}
	if rollbackEnabled(st.addon) && status.LastHealthyVersion != "" && status.LastHealthyVersion != st.resolved.Version {
		st.wanted = st.resolved.Version
		st.resolved.Version = status.LastHealthyVersion
	}
	return false, nil
}

// trackUpgrade records when a version that is not yet known to be healthy was first
// applied, so the health phase can tell when its upgrade timeout runs out.
func trackUpgrade(status *addonsv1alpha1.AddonStatus, version string, now time.Time) {
	if version == status.LastHealthyVersion {
		if status.Upgrade != nil {
			status.Upgrade.Version, status.Upgrade.StartedAt = "", nil
			if status.Upgrade.FailedVersion == "" {
				status.Upgrade = nil
			}
		}
		return
	}
	if status.Upgrade == nil {
		status.Upgrade = &addonsv1alpha1.UpgradeStatus{}
	}
	if status.Upgrade.Version != version || status.Upgrade.StartedAt == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		status.Upgrade.Version, status.Upgrade.StartedAt = version, &t
	}
}

// upgradeExpired decides what happens when children are not ready. It returns how long
// to wait before checking again, or zero when the upgrade just failed (and was handled).
func (r *Reconciler) upgradeExpired(st *reconcileState, now time.Time) (time.Duration, bool) {
	status := st.addon.GetAddonStatus()
	up := status.Upgrade
	if up == nil || up.StartedAt == nil || up.Version != st.resolved.Version || status.LastHealthyVersion == "" {
		return 0, false
	}
	remaining := upgradeTimeout(st.addon) - now.Sub(up.StartedAt.Time)
	if remaining > 0 {
		return remaining, false
	}
	return 0, true
}

// failUpgrade records a failed upgrade and, unless disabled, asks for a rollback.
func (r *Reconciler) failUpgrade(st *reconcileState, notReady string) {
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	failed := st.resolved.Version
	status.Upgrade.FailedVersion, status.Upgrade.FailedGeneration = failed, generation
	status.Upgrade.Version, status.Upgrade.StartedAt = "", nil
	timeout := upgradeTimeout(st.addon)
	if rollbackEnabled(st.addon) {
		msg := fmt.Sprintf("upgrade to %s did not become ready within %s (%s); rolling back to %s",
			failed, timeout, notReady, status.LastHealthyVersion)
		markProgressing(status, generation, addonsv1alpha1.ReasonUpgradeFailed, msg)
		markDegraded(status, generation, addonsv1alpha1.ReasonUpgradeFailed, msg)
		r.event(st.addon, corev1.EventTypeWarning, EventRolledBack, "Rollback", "%s", msg)
		st.requeueAfter = time.Millisecond
		return
	}
	msg := fmt.Sprintf("upgrade to %s did not become ready within %s (%s); rollback is disabled", failed, timeout, notReady)
	markFailed(status, generation, addonsv1alpha1.ReasonUpgradeFailed, msg)
	r.event(st.addon, corev1.EventTypeWarning, EventUpgradeFailed, "Upgrade", "%s", msg)
}

// orphan hands the children over: it removes kaddons' instance labels and the owner
// reference to obj from each of them, and leaves them running.
func (r *Reconciler) orphan(ctx context.Context, obj addonsv1alpha1.Addon, inventory []addonsv1alpha1.ObjectReference) error {
	owner := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	var errs []error
	for _, ref := range inventory {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := r.reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !ownedBy(live.GetLabels(), r.gvk.Kind, owner) {
			continue
		}
		base := live.DeepCopy()
		labels := live.GetLabels()
		for k := range instanceLabels(r.gvk.Kind, owner) {
			delete(labels, k)
		}
		live.SetLabels(labels)
		refs := slices.DeleteFunc(live.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == obj.GetUID() })
		live.SetOwnerReferences(refs)
		if err := r.client.Patch(ctx, live, client.MergeFrom(base), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("orphaning %s: %w", ref, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.event(obj, corev1.EventTypeNormal, EventOrphaned, "Delete", "Left %d objects running without kaddons labels or owner references", len(inventory))
	return nil
}
