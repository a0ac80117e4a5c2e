package engine

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// TestKstatusSeesWhatAGitOpsToolShould runs kstatus (sigs.k8s.io/cli-utils), as Flux and
// kpt do, on an add-on in every state the engine can leave it in, the status built by the
// engine's own summarizer, and checks the result a GitOps tool or a dependent should see.
func TestKstatusSeesWhatAGitOpsToolShould(t *testing.T) {
	applied := func(a *addonsv1alpha1.CoreDNS) {
		a.Status.AppliedSpecHash = specHash(a)
		a.Status.AppliedVersion = "1.12.1"
	}
	for _, tc := range []struct {
		name    string
		prepare func(a *addonsv1alpha1.CoreDNS) // before the outcome, with generation 1
		bump    func(a *addonsv1alpha1.CoreDNS) // a spec change after it, if any
		out     func(a *addonsv1alpha1.CoreDNS) outcome
		held    *conditionNote   // why it stays on its version, if it does
		upgrade *upgradeableNote // its Upgradeable condition, if any
		want    status.Status
	}{
		{name: "creating", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return progressing(addonsv1alpha1.ReasonChildrenNotReady, "Deployment x: Available: 0/2")
		}, want: status.InProgressStatus},
		{name: "ready", out: func(*addonsv1alpha1.CoreDNS) outcome { return ready("up") }, want: status.CurrentStatus},
		{name: "degraded after being ready", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return progressing(addonsv1alpha1.ReasonChildrenNotReady, "x").withDegraded(addonsv1alpha1.ReasonChildrenNotReady, "was Ready")
		}, want: status.InProgressStatus},
		{name: "stalled on an unknown version", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return stalled(addonsv1alpha1.ReasonVersionNotFound, errors.New("no version 9"))
		}, want: status.FailedStatus},
		{name: "paused without a pending change", prepare: applied,
			out:  func(a *addonsv1alpha1.CoreDNS) outcome { return pausedAt(a, pausedMessage) },
			want: status.CurrentStatus},
		{name: "paused after suspend was set", prepare: applied,
			bump: func(a *addonsv1alpha1.CoreDNS) { a.Spec.Suspend = true },
			out:  func(a *addonsv1alpha1.CoreDNS) outcome { return pausedAt(a, pausedMessage) },
			want: status.CurrentStatus},
		{name: "paused with a pending change", prepare: applied,
			bump: func(a *addonsv1alpha1.CoreDNS) { a.Spec.Suspend = true; a.Spec.Replicas = ptrTo[int32](3) },
			out:  func(a *addonsv1alpha1.CoreDNS) outcome { return pausedAt(a, pausedMessage) },
			want: status.InProgressStatus},
		{name: "upgrading", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return progressing(addonsv1alpha1.ReasonChildrenNotReady, "rolling out 1.12.1").after(1)
		}, want: status.InProgressStatus},
		{name: "rolling back", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return progressing(addonsv1alpha1.ReasonUpgradeFailed, "rolling back").withDegraded(addonsv1alpha1.ReasonUpgradeFailed, "x")
		}, want: status.InProgressStatus},
		{name: "an upgrade awaiting approval", out: func(*addonsv1alpha1.CoreDNS) outcome { return ready("up") },
			held: &conditionNote{reason: addonsv1alpha1.ReasonUpgradeAwaitingApproval, message: "1.14.6 waits"},
			want: status.CurrentStatus},
		{name: "a channel that moved down", out: func(*addonsv1alpha1.CoreDNS) outcome { return ready("up") },
			held: &conditionNote{reason: addonsv1alpha1.ReasonDowngradeRefused, message: "stays on 1.12.1"},
			want: status.CurrentStatus},
		{name: "a pinned downgrade", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return stalled(addonsv1alpha1.ReasonDowngradeRefused, errors.New("1.11.3 is older"))
		}, want: status.FailedStatus},
		{name: "not upgradeable to the next minor", out: func(*addonsv1alpha1.CoreDNS) outcome { return ready("up") },
			upgrade: &upgradeableNote{status: metav1.ConditionFalse, reason: addonsv1alpha1.ReasonNextKubernetesVersionUnsupported, message: "x"},
			want:    status.CurrentStatus},
		{name: "retrying an apply", out: func(*addonsv1alpha1.CoreDNS) outcome {
			return failed(addonsv1alpha1.ReasonApplyFailed, errors.New("the API server said no"))
		}, want: status.InProgressStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := coreDNS("kube-system", "coredns")
			a.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
				Reason: addonsv1alpha1.ReasonReconciled, ObservedGeneration: 1}}
			a.Status.ObservedGeneration = 1
			if tc.prepare != nil {
				tc.prepare(a)
			}
			if tc.bump != nil {
				tc.bump(a)
				a.Generation++
			}
			_ = (&Reconciler{}).summarize(&reconcileState{addon: a, versionHeld: tc.held, upgradeable: tc.upgrade}, tc.out(a))
			syncReady(a)
			got := kstatusOf(t, a)
			if got != tc.want {
				t.Errorf("kstatus = %s, want %s (status %+v)", got, tc.want, a.Status)
			}
			if a.Status.Ready != (tc.want == status.CurrentStatus) {
				t.Errorf("status.ready = %v, want %v", a.Status.Ready, tc.want == status.CurrentStatus)
			}
		})
	}
	t.Run("deleting", func(t *testing.T) {
		a := coreDNS("kube-system", "coredns")
		now := metav1.Now()
		a.DeletionTimestamp = &now
		markDeleting(&a.Status.AddonStatus, a.Generation, addonsv1alpha1.ReasonDeleting, "deleting children")
		if got := kstatusOf(t, a); got != status.TerminatingStatus {
			t.Errorf("kstatus = %s, want %s", got, status.TerminatingStatus)
		}
	})
}

func kstatusOf(t *testing.T, a *addonsv1alpha1.CoreDNS) status.Status {
	t.Helper()
	a.APIVersion, a.Kind = addonsv1alpha1.GroupVersion.String(), "CoreDNS"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}
