package engine

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// DefaultUpgradeTimeout is how long a new version may take to become Ready when
// spec.upgrade.timeout is not set.
const DefaultUpgradeTimeout = 10 * time.Minute

// Event reasons of upgrades.
const (
	// EventRolledBack is recorded when a failed upgrade is rolled back.
	EventRolledBack = "RolledBack"
	// EventUpgradeFailed is recorded when an upgrade fails and rollback is disabled.
	EventUpgradeFailed = "UpgradeFailed"
)

// health reads every child from the cache and computes kstatus. Ready turns True only
// when every child is current for the generation that was just applied. While children
// are not ready it tracks the upgrade timeout and, when it runs out, fails the upgrade
// and asks for a rollback (pinVersion then resolves the last healthy version).
func (r *Reconciler) health(ctx context.Context, st *reconcileState) outcome {
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	// An object the cache has not caught up with is judged from its older copy below,
	// so the event of the write is not an echo: it must reconcile once it comes.
	r.awaitCache(ctx, st.addon, st.applied.Applied)
	h, err := checkHealth(ctx, r.client, status.Inventory.Objects(), st.applied.Applied)
	if err != nil {
		return failed(addonsv1alpha1.ReasonHealthCheckFailed, err)
	}
	now := time.Now()
	if h.ready() {
		status.LastHealthyVersion = st.resolved.Version
		trackUpgrade(status, st.resolved.Version, now)
		out := ready(fmt.Sprintf("%s %s is ready (%d objects)", st.resolved.Addon, st.resolved.Version, status.Inventory.Len()))
		return r.rolledBack(st, r.afterReady(ctx, st, out))
	}
	// Degraded: it was Ready (or already degraded for this reason) and no spec change
	// explains why it no longer is.
	wasReady := meta.IsStatusConditionTrue(status.Conditions, addonsv1alpha1.ConditionReady)
	if d := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionDegraded); d != nil &&
		d.Status == metav1.ConditionTrue && d.Reason == addonsv1alpha1.ReasonChildrenNotReady {
		wasReady = true
	}
	remaining, expired := upgradeExpired(st, now)
	var out outcome
	switch {
	case expired:
		out = r.failUpgrade(st, h.message())
	case remaining > 0:
		out = progressing(addonsv1alpha1.ReasonChildrenNotReady, h.message()).after(remaining)
	default:
		out = progressing(addonsv1alpha1.ReasonChildrenNotReady, h.message())
		if wasReady && status.ObservedGeneration == generation && st.wanted == "" {
			out = out.withDegraded(addonsv1alpha1.ReasonChildrenNotReady, "was Ready, now "+h.message())
		}
	}
	return r.rolledBack(st, out)
}

// rolledBack keeps Degraded with reason UpgradeFailed while a failed version is pinned
// to the last healthy one.
func (r *Reconciler) rolledBack(st *reconcileState, out outcome) outcome {
	if st.wanted == "" {
		return out
	}
	return out.withDegraded(addonsv1alpha1.ReasonUpgradeFailed,
		fmt.Sprintf("upgrade to %s failed to become ready within %s; rolled back to %s. Change the spec to try again",
			st.wanted, upgradeTimeout(st.addon), st.resolved.Version))
}

// upgradeTimeout returns spec.upgrade.timeout or the default.
func upgradeTimeout(obj addonsv1alpha1.Addon) time.Duration {
	if u := obj.GetAddonSpec().Upgrade; u != nil && u.Timeout != nil && u.Timeout.Duration > 0 {
		return u.Timeout.Duration
	}
	return DefaultUpgradeTimeout
}

// upgradeExpired decides what happens when children are not ready. It returns how long
// to wait before checking again, or true when the upgrade's timeout ran out.
func upgradeExpired(st *reconcileState, now time.Time) (time.Duration, bool) {
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
func (r *Reconciler) failUpgrade(st *reconcileState, notReady string) outcome {
	status := st.addon.GetAddonStatus()
	failedVersion := st.resolved.Version
	status.Upgrade.FailedVersion, status.Upgrade.FailedGeneration = failedVersion, st.addon.GetGeneration()
	status.Upgrade.Version, status.Upgrade.StartedAt = "", nil
	timeout := upgradeTimeout(st.addon)
	if rollbackEnabled(st.addon) {
		msg := fmt.Sprintf("upgrade to %s did not become ready within %s (%s); rolling back to %s",
			failedVersion, timeout, notReady, status.LastHealthyVersion)
		r.event(st.addon, corev1.EventTypeWarning, EventRolledBack, "Rollback", "%s", msg)
		return progressing(addonsv1alpha1.ReasonUpgradeFailed, msg).
			withDegraded(addonsv1alpha1.ReasonUpgradeFailed, msg).after(time.Millisecond)
	}
	msg := fmt.Sprintf("upgrade to %s did not become ready within %s (%s); rollback is disabled", failedVersion, timeout, notReady)
	r.event(st.addon, corev1.EventTypeWarning, EventUpgradeFailed, "Upgrade", "%s", msg)
	return failedMessage(addonsv1alpha1.ReasonUpgradeFailed, msg)
}

// maxNotReadyInMessage bounds how many children a Ready message names.
const maxNotReadyInMessage = 3

// msgCacheBehind is what health says of a child whose cached copy is older than the
// reconcile's own write to it.
const msgCacheBehind = "waiting for the operator's cache to show the applied object"

// health is the outcome of checking every child with kstatus.
type health struct {
	// notReady describes each child that is not current, e.g.
	// "Deployment kube-system/coredns: Available: 1/2".
	notReady []string
}

// ready reports whether every child is current.
func (h health) ready() bool { return len(h.notReady) == 0 }

// message summarises the children that are not ready.
func (h health) message() string {
	if len(h.notReady) <= maxNotReadyInMessage {
		return strings.Join(h.notReady, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(h.notReady[:maxNotReadyInMessage], "; "),
		len(h.notReady)-maxNotReadyInMessage)
}

// checkHealth computes kstatus for every object in refs, read from the informer cache.
// applied holds what this reconcile's writes left: a cached copy older than that has not
// caught up yet and counts as in progress.
func checkHealth(ctx context.Context, reader client.Reader, refs []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]ssa.Written) (health, error) {
	var h health
	for _, ref := range refs {
		live, err := readChild(ctx, reader, ref)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			h.notReady = append(h.notReady, ref.String()+": not found")
			continue
		}
		if err != nil {
			return h, fmt.Errorf("reading %s: %w", ref, err)
		}
		if w, ok := applied[ref]; ok && !w.ShownBy(live) {
			h.notReady = append(h.notReady, ref.String()+": "+msgCacheBehind)
			continue
		}
		ready, msg, err := childHealth(live)
		if err != nil {
			return h, fmt.Errorf("computing status of %s: %w", ref, err)
		}
		if !ready {
			h.notReady = append(h.notReady, ref.String()+": "+msg)
		}
	}
	return h, nil
}

// readChild reads ref for checkHealth: a kind without status (newStatusless) as its Go
// type, straight from the cache without a copy, since only its metadata is looked at;
// any other kind unstructured, for kstatus. A kind the scheme knows is read without a
// copy as well: typedReads converts the cached Go object into new maps, which is all the
// copy there is, rather than copying the object first and converting the copy.
func readChild(ctx context.Context, reader client.Reader, ref addonsv1alpha1.ObjectReference) (client.Object, error) {
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	typed, statusless := newStatusless(ref.GroupVersionKind())
	if statusless {
		return typed, reader.Get(ctx, key, typed, client.UnsafeDisableDeepCopy)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	if typed != nil {
		return live, reader.Get(ctx, key, live, client.UnsafeDisableDeepCopy)
	}
	return live, reader.Get(ctx, key, live)
}

// childHealth is objectHealth for an object readChild read unstructured, and
// statuslessHealth for one it read as a Go type without status.
func childHealth(obj client.Object) (bool, string, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return objectHealth(u)
	}
	ready, msg := statuslessHealth(obj)
	return ready, msg, nil
}

// terminatingMessage is what kstatus says of an object that carries a deletion timestamp.
const terminatingMessage = "Resource scheduled for deletion"

// statuslessHealth is what kstatus computes for an object of a kind without status: it
// is current, unless it is being deleted (TestStatuslessHealthMatchesKstatus holds the
// two to each other for every such built-in kind).
func statuslessHealth(obj metav1.Object) (bool, string) {
	if obj.GetDeletionTimestamp() != nil {
		return false, terminatingMessage
	}
	return true, ""
}

// statuslessKinds caches newStatusless's answer per kind.
var statuslessKinds sync.Map

// newStatusless returns a new Go object of gvk when gvk is a built-in kind whose Go type
// has no status (a ConfigMap, a ServiceAccount, a ClusterRole, a ClusterRoleBinding, ...):
// kstatus finds such an object current or, once it has a deletion timestamp, terminating,
// and reads nothing else of it. checkHealth then skips converting it to unstructured,
// which for four of the seven objects of a CoreDNS add-on was most of its cost.
func newStatusless(gvk schema.GroupVersionKind) (client.Object, bool) {
	obj, ok := ssa.NewTyped(clientgoscheme.Scheme, gvk)
	if !ok {
		return nil, false
	}
	if v, seen := statuslessKinds.Load(gvk); seen {
		return obj, v.(bool)
	}
	_, hasStatus := reflect.TypeOf(obj).Elem().FieldByName("Status")
	statuslessKinds.Store(gvk, !hasStatus)
	return obj, !hasStatus
}

// objectHealth reports whether one object is ready, and why not. kstatus decides for
// every kind but two that it reports as current without looking: an APIService must
// report Available (an aggregated API that cannot be reached is exactly what an add-on's
// status must show), and a PodDisruptionBudget must have been observed by the disruption
// controller with enough healthy pods.
func objectHealth(u *unstructured.Unstructured) (bool, string, error) {
	gvk := u.GroupVersionKind()
	switch {
	case gvk.Group == apiRegistrationGroup && gvk.Kind == "APIService":
		return conditionTrue(u, "Available")
	case gvk.Group == "policy" && gvk.Kind == "PodDisruptionBudget":
		return pdbHealth(u), pdbMessage(u), nil
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		return false, "", err
	}
	if res.Status == kstatus.CurrentStatus {
		return true, "", nil
	}
	if res.Message == "" {
		return false, string(res.Status), nil
	}
	return false, res.Message, nil
}

// conditionTrue reports whether u has condition typ with status True, and otherwise the
// condition's reason and message.
func conditionTrue(u *unstructured.Unstructured, typ string) (bool, string, error) {
	conditions, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return false, "", err
	}
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		if m["status"] == "True" {
			return true, "", nil
		}
		return false, fmt.Sprintf("%s=%v (%v: %v)", typ, m["status"], m["reason"], m["message"]), nil
	}
	return false, typ + " not reported yet", nil
}

// pdbHealth reports whether the disruption controller observed the budget's generation
// and counts at least as many healthy pods as it needs.
func pdbHealth(u *unstructured.Unstructured) bool {
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	current, _, _ := unstructured.NestedInt64(u.Object, "status", "currentHealthy")
	desired, _, _ := unstructured.NestedInt64(u.Object, "status", "desiredHealthy")
	return observed >= u.GetGeneration() && current >= desired
}

// pdbMessage explains an unhealthy PodDisruptionBudget.
func pdbMessage(u *unstructured.Unstructured) string {
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if observed < u.GetGeneration() {
		return fmt.Sprintf("generation %d not yet observed by the disruption controller", u.GetGeneration())
	}
	current, _, _ := unstructured.NestedInt64(u.Object, "status", "currentHealthy")
	desired, _, _ := unstructured.NestedInt64(u.Object, "status", "desiredHealthy")
	if current < desired {
		return fmt.Sprintf("Healthy: %d/%d", current, desired)
	}
	return ""
}
