package engine

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// conditionClass says which conditions an outcome sets. Each class has one setter in
// conditions.go.
type conditionClass int

const (
	// classNone leaves the conditions as they are.
	classNone conditionClass = iota
	// classReady: every child is applied and healthy.
	classReady
	// classProgressing: applying, rolling out, or waiting for something that will come.
	classProgressing
	// classPaused: reconciliation is suspended.
	classPaused
	// classFailed: a failure kaddons retries with back-off (or, when terminal, one only a
	// spec change can fix while what runs is left changed, such as an immutable field).
	classFailed
	// classStalled: a configuration error that needs a human; nothing was applied.
	classStalled
	// classDeleting: the add-on is being deleted and some children are not gone yet.
	classDeleting
)

// outcome is what a phase returns: continue (the zero value), or stop with a condition
// class, a reason, a message and possibly an error.
type outcome struct {
	// stop ends the reconcile after this phase.
	stop bool
	// class, reason and message are the conditions to set.
	class   conditionClass
	reason  string
	message string
	// err is returned to controller-runtime: retried with back-off unless terminal.
	err      error
	terminal bool
	// degraded, when set, marks Degraded on top of the class's conditions.
	degraded *conditionNote
	// requeueAfter asks for another reconcile, e.g. when an upgrade's timeout runs out.
	requeueAfter time.Duration
	// generation, when set, stamps the conditions with this generation instead of the
	// add-on's: the one last applied, while a paused add-on holds back a change.
	generation int64
}

// conditionNote is a reason and a message for one extra condition.
type conditionNote struct{ reason, message string }

// proceed lets the next phase run.
func proceed() outcome { return outcome{} }

// ready ends the reconcile with Ready=True.
func ready(message string) outcome {
	return outcome{stop: true, class: classReady, reason: addonsv1alpha1.ReasonReconciled, message: message}
}

// progressing ends the reconcile with Progressing=True: it waits for something that
// will happen without a spec change.
func progressing(reason, message string) outcome {
	return outcome{stop: true, class: classProgressing, reason: reason, message: message}
}

// paused ends the reconcile with the Paused reason.
func paused(message string) outcome {
	return outcome{stop: true, class: classPaused, reason: addonsv1alpha1.ReasonPaused, message: message}
}

// failed ends the reconcile with Degraded=True and err, retried with back-off.
func failed(reason string, err error) outcome {
	return outcome{stop: true, class: classFailed, reason: reason, message: err.Error(), err: err}
}

// failedMessage is failed with a message of its own for the condition.
func failedMessage(reason, message string) outcome {
	return outcome{stop: true, class: classFailed, reason: reason, message: message}
}

// stalled ends the reconcile with Stalled=True and a terminal err: only a change of the
// spec, the channels or a policy can help, and each of those triggers a reconcile.
func stalled(reason string, err error) outcome {
	return outcome{stop: true, class: classStalled, reason: reason, message: err.Error(), err: err, terminal: true}
}

// refused ends the reconcile with Stalled=True and no error: a policy refused the
// add-on, and a policy change reconciles it again.
func refused(reason, message string) outcome {
	return outcome{stop: true, class: classStalled, reason: reason, message: message}
}

// deleting ends a deletion that is not finished yet (children held by finalizers, or a
// delete that failed and is retried) with Ready=False and Progressing=True, reason Deleting.
func deleting(message string) outcome {
	return outcome{stop: true, class: classDeleting, reason: addonsv1alpha1.ReasonDeleting, message: message}
}

// asTerminal makes the outcome's error terminal.
func (o outcome) asTerminal() outcome {
	o.terminal = true
	return o
}

// withDegraded adds Degraded=True with its own reason and message.
func (o outcome) withDegraded(reason, message string) outcome {
	o.degraded = &conditionNote{reason: reason, message: message}
	return o
}

// after asks for another reconcile after d.
func (o outcome) after(d time.Duration) outcome {
	o.requeueAfter = d
	return o
}

// summarize is the one place that turns a reconcile's outcome into conditions, and into
// the error controller-runtime sees: terminal errors are not retried, others are.
func (r *Reconciler) summarize(st *reconcileState, out outcome) error {
	generation := st.addon.GetGeneration()
	if out.generation > 0 {
		generation = out.generation
	}
	if out.class == classFailed && !out.terminal && transient(out.err) {
		// It can pass by itself: not Degraded, only still in progress, retried with back-off.
		out.class = classProgressing
		out.message = "retrying after a transient error: " + out.message
	}
	status := st.addon.GetAddonStatus()
	setConditions(status, generation, out)
	if held := st.versionHeld; held != nil {
		if out.class == classReady {
			// It serves on the version it runs: Ready, with the reason it does not move.
			setCondition(status, generation, addonsv1alpha1.ConditionReady, metav1.ConditionTrue, held.reason, held.message)
		} else if ready := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady); ready != nil {
			// Whatever else it waits for, it says why it stays on its version.
			setCondition(status, generation, addonsv1alpha1.ConditionReady, ready.Status, ready.Reason,
				ready.Message+" ("+held.reason+": "+held.message+")")
		}
	}
	if u := st.upgradeable; u != nil {
		setCondition(status, generation, addonsv1alpha1.ConditionUpgradeable, u.status, u.reason, u.message)
	}
	if out.err == nil {
		return nil
	}
	if out.terminal {
		return reconcile.TerminalError(out.err)
	}
	return out.err
}

// setConditions sets the conditions of out's class on s.
func setConditions(s *addonsv1alpha1.AddonStatus, generation int64, out outcome) {
	switch out.class {
	case classReady:
		markReady(s, generation, out.message)
	case classProgressing:
		markProgressing(s, generation, out.reason, out.message)
	case classPaused:
		markPaused(s, generation, out.message)
	case classFailed:
		markFailed(s, generation, out.reason, out.message)
	case classStalled:
		markStalled(s, generation, out.reason, out.message)
	case classDeleting:
		markDeleting(s, generation, out.reason, out.message)
	case classNone:
	}
	if out.degraded != nil {
		markDegraded(s, generation, out.degraded.reason, out.degraded.message)
	}
}

// transient reports whether err can pass without any change to the add-on, the package
// or the cluster's objects: throttling (429), server errors (5xx), timeouts, conflicts
// and lost connections.
func transient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsConflict(err),
		apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 500 {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// errorIs reports whether err wraps an error of type T.
func errorIs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}
