package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

const (
	eventuallyTimeout = 30 * time.Second
	pollInterval      = 100 * time.Millisecond
)

// getAddon reads obj fresh from the API server.
func getAddon(g Gomega, obj client.Object) {
	g.ExpectWithOffset(1, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// readyCondition returns the add-on's Ready condition, or an empty one.
func readyCondition(status *addonsv1alpha1.AddonStatus) metav1.Condition {
	if c := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// waitApplied waits until the add-on reports version applied for its current generation.
func waitApplied(t *testing.T, obj addonsv1alpha1.Addon, version string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		getAddon(g, obj)
		status := obj.GetAddonStatus()
		g.Expect(status.AppliedVersion).To(Equal(version))
		g.Expect(status.ObservedGeneration).To(Equal(obj.GetGeneration()))
		g.Expect(readyCondition(status).ObservedGeneration).To(Equal(obj.GetGeneration()))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// waitReason waits until the add-on's Ready condition has reason for its current generation.
func waitReason(t *testing.T, obj addonsv1alpha1.Addon, reason string) metav1.Condition {
	t.Helper()
	g := NewWithT(t)
	var ready metav1.Condition
	g.Eventually(func(g Gomega) {
		getAddon(g, obj)
		ready = readyCondition(obj.GetAddonStatus())
		g.Expect(ready.ObservedGeneration).To(Equal(obj.GetGeneration()))
		g.Expect(ready.Reason).To(Equal(reason), "Ready: %s", ready.Message)
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return ready
}

// markWorkloadsAvailable writes the status that the kube-controller-manager would write
// for the namespace's Deployments, DaemonSets and PodDisruptionBudgets once their pods run. envtest
// has no controller-manager, so the test plays its part.
func markWorkloadsAvailable(t *testing.T, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Eventually(func(g Gomega) {
		deployments := &appsv1.DeploymentList{}
		g.Expect(k8sClient.List(ctx, deployments, client.InNamespace(ns))).To(Succeed())
		for i := range deployments.Items {
			d := &deployments.Items[i]
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			d.Status = appsv1.DeploymentStatus{
				ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas,
				ReadyReplicas: replicas, AvailableReplicas: replicas,
				Conditions: []appsv1.DeploymentCondition{
					{Type: appsv1.DeploymentAvailable, Status: "True", Reason: "MinimumReplicasAvailable",
						LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
					{Type: appsv1.DeploymentProgressing, Status: "True", Reason: "NewReplicaSetAvailable",
						LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
				},
			}
			g.Expect(k8sClient.Status().Update(ctx, d)).To(Succeed())
		}
		daemonSets := &appsv1.DaemonSetList{}
		g.Expect(k8sClient.List(ctx, daemonSets, client.InNamespace(ns))).To(Succeed())
		g.Expect(len(deployments.Items) + len(daemonSets.Items)).NotTo(BeZero())
		for i := range daemonSets.Items {
			d := &daemonSets.Items[i]
			d.Status = appsv1.DaemonSetStatus{
				ObservedGeneration: d.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
				UpdatedNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2,
			}
			g.Expect(k8sClient.Status().Update(ctx, d)).To(Succeed())
		}
		pdbs := &policyv1.PodDisruptionBudgetList{}
		g.Expect(k8sClient.List(ctx, pdbs, client.InNamespace(ns))).To(Succeed())
		for i := range pdbs.Items {
			p := &pdbs.Items[i]
			p.Status = policyv1.PodDisruptionBudgetStatus{
				ObservedGeneration: p.Generation, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2, DisruptionsAllowed: 1,
				Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: "True",
					Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now()}},
			}
			g.Expect(k8sClient.Status().Update(ctx, p)).To(Succeed())
		}
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// liveObject reads one object by reference straight from the API server.
func liveObject(ref addonsv1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GroupVersionKind())
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, u)
	return u, err
}

// expectGone waits until every referenced object is deleted. envtest runs no namespace
// controller, so a deleted Namespace only gets as far as Terminating.
func expectGone(t *testing.T, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	g := NewWithT(t)
	for _, ref := range refs {
		g.Eventually(func() bool {
			live, err := liveObject(ref)
			if ref.Group == "" && ref.Kind == "Namespace" && err == nil {
				return !live.GetDeletionTimestamp().IsZero()
			}
			return apierrors.IsNotFound(err)
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue(), "%s still exists", ref)
	}
}

// unstructuredObject builds add-ons from raw JSON, so tests can send what a typed client
// cannot (unknown fields, wrong types).
type unstructuredObject = unstructured.Unstructured

// engineOptions are the options the suite's manager runs with.
func engineOptions() engine.Options {
	return engine.Options{Catalog: source, Sealer: testSealer}
}

// waitPausedWithPendingChange waits until a paused add-on reports a spec change it holds
// back: Ready keeps reason Paused and the generation last applied, behind the current one.
func waitPausedWithPendingChange(t *testing.T, obj addonsv1alpha1.Addon) metav1.Condition {
	t.Helper()
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, obj)
		ready = readyCondition(obj.GetAddonStatus())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonPaused))
		g.Expect(ready.Message).To(ContainSubstring("is not applied"))
		g.Expect(ready.ObservedGeneration).To(BeNumerically("<", obj.GetGeneration()))
		g.Expect(obj.GetAddonStatus().ObservedGeneration).To(Equal(ready.ObservedGeneration))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return ready
}
