package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// maxNotReadyInMessage bounds how many children a Ready message names.
const maxNotReadyInMessage = 3

// cacheCatchUp bounds how long health waits for the informer cache to show the objects
// just applied. The watch usually delivers them within milliseconds; judging health from
// the older copies instead would report them as not yet observed, and write a status that
// the next reconcile takes back.
const cacheCatchUp = 2 * time.Second

// waitForCache waits, at most timeout, until reader holds every object of applied at least
// at the generation it was applied with.
func waitForCache(ctx context.Context, reader client.Reader, applied map[addonsv1alpha1.ObjectReference]int64,
	timeout time.Duration) {
	if len(applied) == 0 {
		return
	}
	caughtUp := func(ctx context.Context) (bool, error) {
		for ref, generation := range applied {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(ref.GroupVersionKind())
			err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
			if err != nil || live.GetGeneration() < generation {
				return false, nil
			}
		}
		return true, nil
	}
	// A timeout is no error: health then reports what the cache shows.
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, timeout, true, caughtUp)
}

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
// minGeneration holds the generation each object had right after it was applied: a cached
// copy older than that has not caught up yet and counts as in progress.
func checkHealth(ctx context.Context, reader client.Reader, refs []addonsv1alpha1.ObjectReference,
	minGeneration map[addonsv1alpha1.ObjectReference]int64) (health, error) {
	var h health
	for _, ref := range refs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			h.notReady = append(h.notReady, ref.String()+": not found")
			continue
		}
		if err != nil {
			return h, fmt.Errorf("reading %s: %w", ref, err)
		}
		if live.GetGeneration() < minGeneration[ref] {
			h.notReady = append(h.notReady, ref.String()+": waiting for the applied generation to be observed")
			continue
		}
		ready, msg, err := objectHealth(live)
		if err != nil {
			return h, fmt.Errorf("computing status of %s: %w", ref, err)
		}
		if !ready {
			h.notReady = append(h.notReady, ref.String()+": "+msg)
		}
	}
	return h, nil
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
	res, err := status.Compute(u)
	if err != nil {
		return false, "", err
	}
	if res.Status == status.CurrentStatus {
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
