package engine

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestSummarize(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name         string
		out          outcome
		wantReady    metav1.ConditionStatus
		wantReason   string
		wantStalled  bool
		wantDegraded metav1.ConditionStatus
		wantErr      bool
		wantTerminal bool
		// wantMessagePrefix is put before the outcome's message in Ready.
		wantMessagePrefix string
	}{
		{name: "ready", out: ready("up"), wantReady: metav1.ConditionTrue, wantReason: addonsv1alpha1.ReasonReconciled,
			wantDegraded: metav1.ConditionFalse},
		{name: "progressing", out: progressing(addonsv1alpha1.ReasonChildrenNotReady, "rolling out"),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonChildrenNotReady, wantDegraded: metav1.ConditionFalse},
		{name: "progressing and degraded", out: progressing(addonsv1alpha1.ReasonChildrenNotReady, "x").
			withDegraded(addonsv1alpha1.ReasonChildrenNotReady, "was Ready"),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonChildrenNotReady, wantDegraded: metav1.ConditionTrue},
		{name: "failed is retried", out: failed(addonsv1alpha1.ReasonApplyFailed, boom),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonApplyFailed, wantDegraded: metav1.ConditionTrue, wantErr: true},
		{name: "failed terminal", out: failed(addonsv1alpha1.ReasonImmutableField, boom).asTerminal(),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonImmutableField, wantDegraded: metav1.ConditionTrue,
			wantErr: true, wantTerminal: true},
		{name: "stalled is terminal", out: stalled(addonsv1alpha1.ReasonVersionNotFound, boom),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonVersionNotFound, wantStalled: true,
			wantDegraded: metav1.ConditionFalse, wantErr: true, wantTerminal: true},
		{name: "a transient API error is still in progress, retried",
			out:       failed(addonsv1alpha1.ReasonApplyFailed, apierrors.NewTooManyRequests("slow down", 1)),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonApplyFailed, wantDegraded: metav1.ConditionFalse,
			wantErr: true, wantMessagePrefix: "retrying after a transient error: "},
		{name: "a 503 too", out: failed(addonsv1alpha1.ReasonApplyFailed, apierrors.NewServiceUnavailable("restarting")),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonApplyFailed, wantDegraded: metav1.ConditionFalse,
			wantErr: true, wantMessagePrefix: "retrying after a transient error: "},
		{name: "refused is stalled without error", out: refused(addonsv1alpha1.ReasonNotPermitted, "no rule"),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonNotPermitted, wantStalled: true,
			wantDegraded: metav1.ConditionFalse},
		{name: "deleting waits without error or Degraded", out: deleting("waiting for children to be deleted"),
			wantReady: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			err := (&Reconciler{}).summarize(&reconcileState{addon: addon}, tc.out)
			conds := addon.Status.Conditions
			r := meta.FindStatusCondition(conds, addonsv1alpha1.ConditionReady)
			if r == nil || r.Status != tc.wantReady || r.Reason != tc.wantReason || r.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want %s/%s at generation 3", r, tc.wantReady, tc.wantReason)
			}
			if r != nil && r.Message != tc.wantMessagePrefix+tc.out.message {
				t.Errorf("Ready message = %q, want %q", r.Message, tc.out.message)
			}
			if got := meta.IsStatusConditionTrue(conds, addonsv1alpha1.ConditionStalled); got != tc.wantStalled {
				t.Errorf("Stalled = %v, want %v", got, tc.wantStalled)
			}
			switch d := meta.FindStatusCondition(conds, addonsv1alpha1.ConditionDegraded); {
			case tc.wantDegraded == "" && d != nil:
				t.Errorf("Degraded = %+v, want none", d)
			case tc.wantDegraded != "" && (d == nil || d.Status != tc.wantDegraded):
				t.Errorf("Degraded = %+v, want %s", d, tc.wantDegraded)
			}
			if tc.out.class == classDeleting {
				expectDeleting(t, &addon.Status.AddonStatus)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if got := errors.Is(err, reconcile.TerminalError(nil)); got != tc.wantTerminal {
				t.Errorf("terminal = %v, want %v", got, tc.wantTerminal)
			}
		})
	}
}

func TestProceedDoesNotStop(t *testing.T) {
	if proceed().stop {
		t.Error("proceed() stops the reconcile")
	}
}

// expectDeleting checks the conditions and phase a deletion in progress sets.
func expectDeleting(t *testing.T, s *addonsv1alpha1.AddonStatus) {
	t.Helper()
	p := meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionProgressing)
	if p == nil || p.Status != metav1.ConditionTrue || p.Reason != addonsv1alpha1.ReasonDeleting {
		t.Errorf("Progressing = %+v, want True/%s", p, addonsv1alpha1.ReasonDeleting)
	}
	if s.Phase != phaseDeleting {
		t.Errorf("phase = %q, want %q", s.Phase, phaseDeleting)
	}
}
