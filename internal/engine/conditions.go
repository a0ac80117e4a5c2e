package engine

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// maxMessageLength keeps condition messages readable in `kubectl get`.
const maxMessageLength = 1024

// Phases written into KDP's CommonStatus.Phase, for tools that read it.
const (
	phaseReady       = "Ready"
	phaseProgressing = "Progressing"
	phaseStalled     = "Stalled"
	phaseFailed      = "Failed"
	phaseDeleting    = "Deleting"
)

// setCondition sets one condition, stamped with the add-on's generation. The transition
// time changes only when the status does.
func setCondition(s *addonsv1alpha1.AddonStatus, generation int64, typ string, status metav1.ConditionStatus, reason, message string) {
	if len(message) > maxMessageLength {
		message = message[:maxMessageLength-3] + "..."
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// setCommon fills KDP's CommonStatus from the outcome.
func setCommon(s *addonsv1alpha1.AddonStatus, generation int64, phase string, errs ...string) {
	s.Healthy = phase == phaseReady
	s.Phase = phase
	s.ObservedGeneration = generation
	s.Errors = errs
}

// markReady records that every child is applied and healthy.
func markReady(s *addonsv1alpha1.AddonStatus, generation int64, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionReady, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionFalse, addonsv1alpha1.ReasonReconciled, message)
	setCondition(s, generation, addonsv1alpha1.ConditionDegraded, metav1.ConditionFalse, addonsv1alpha1.ReasonReconciled, message)
	meta.RemoveStatusCondition(&s.Conditions, addonsv1alpha1.ConditionStalled)
	setCommon(s, generation, phaseReady)
}

// markProgressing records that kaddons is applying or waiting for children to roll out.
func markProgressing(s *addonsv1alpha1.AddonStatus, generation int64, reason, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionDegraded, metav1.ConditionFalse, reason, message)
	meta.RemoveStatusCondition(&s.Conditions, addonsv1alpha1.ConditionStalled)
	setCommon(s, generation, phaseProgressing)
}

// markStalled records a configuration error that only a change of the spec (or of the
// channels) can fix. What is running stays as it was.
func markStalled(s *addonsv1alpha1.AddonStatus, generation int64, reason, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionStalled, metav1.ConditionTrue, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionFalse, reason, message)
	// Nothing changed in the cluster: Degraded stays as it was, restated for this generation.
	degraded := metav1.ConditionFalse
	if c := meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		degraded = metav1.ConditionTrue
	}
	setCondition(s, generation, addonsv1alpha1.ConditionDegraded, degraded, reason, message)
	setCommon(s, generation, phaseStalled, message)
}

// markFailed records a failure that kaddons retries with back-off, such as the API server
// rejecting an object.
func markFailed(s *addonsv1alpha1.AddonStatus, generation int64, reason, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionFalse, reason, message)
	meta.RemoveStatusCondition(&s.Conditions, addonsv1alpha1.ConditionStalled)
	setCommon(s, generation, phaseFailed, message)
}

// markDeleting records that the add-on's children are being removed.
func markDeleting(s *addonsv1alpha1.AddonStatus, generation int64, reason, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, message)
	setCommon(s, generation, phaseDeleting)
}

// phasePaused is the CommonStatus phase of a paused add-on.
const phasePaused = "Paused"

// pausedMessage explains a paused add-on.
const pausedMessage = "reconciliation is paused by spec.suspend or the " + addonsv1alpha1.AnnotationPaused +
	" annotation: nothing is applied or pruned"

// markPaused records that reconciliation is suspended. Ready keeps its status, since
// what runs keeps running, but its reason and message say Paused.
func markPaused(s *addonsv1alpha1.AddonStatus, generation int64, message string) {
	status := metav1.ConditionUnknown
	if ready := meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionReady); ready != nil {
		status = ready.Status
	}
	setCondition(s, generation, addonsv1alpha1.ConditionReady, status, addonsv1alpha1.ReasonPaused, message)
	setCondition(s, generation, addonsv1alpha1.ConditionProgressing, metav1.ConditionFalse, addonsv1alpha1.ReasonPaused, message)
	s.Phase = phasePaused
	s.ObservedGeneration = generation
}

// markDegraded sets Degraded alone, for an add-on that lost health or failed an upgrade
// while the other conditions say what happens now.
func markDegraded(s *addonsv1alpha1.AddonStatus, generation int64, reason, message string) {
	setCondition(s, generation, addonsv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, message)
}
