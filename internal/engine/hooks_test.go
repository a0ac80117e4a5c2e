package engine

import (
	"errors"
	"testing"
	"time"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestHookOutcome(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hook          string
		res           HookResult
		class         conditionClass
		defaultReason string
		want          outcome
		wantErr       string
	}{{
		name: "the zero result goes on", hook: hookValidate, class: classStalled, defaultReason: addonsv1alpha1.ReasonInvalidSpec,
		want: proceed(),
	}, {
		name: "a Validate refusal stalls without an error or a retry", hook: hookValidate,
		res:   HookResult{Message: "spec.replicas must be odd", RetryAfter: time.Second},
		class: classStalled, defaultReason: addonsv1alpha1.ReasonInvalidSpec,
		want: outcome{stop: true, class: classStalled, reason: addonsv1alpha1.ReasonInvalidSpec,
			message: "the Validate hook holds the add-on: spec.replicas must be odd"},
	}, {
		name: "a hold keeps its own reason and retry", hook: hookBeforeUpgrade,
		res:   HookResult{Reason: "OutsideMaintenanceWindow", Message: "upgrades run on Sundays", RetryAfter: 5 * time.Minute},
		class: classProgressing, defaultReason: addonsv1alpha1.ReasonUpgradeBlocked,
		want: outcome{stop: true, class: classProgressing, reason: "OutsideMaintenanceWindow",
			message: "the BeforeUpgrade hook holds the add-on: upgrades run on Sundays", requeueAfter: 5 * time.Minute},
	}, {
		name: "a hold without a retry is asked again after a minute", hook: hookInitialize,
		res:   HookResult{Reason: "WaitingForNodes"},
		class: classProgressing, defaultReason: addonsv1alpha1.ReasonInitializationBlocked,
		want: outcome{stop: true, class: classProgressing, reason: "WaitingForNodes",
			message: "the Initialize hook holds the add-on: (no message)", requeueAfter: time.Minute},
	}, {
		name: "an error fails with HookFailed, retried", hook: hookAfterReady,
		res:   HookResult{Err: errors.New("connection refused"), Reason: "Ignored"},
		class: classProgressing, defaultReason: addonsv1alpha1.ReasonNotServing,
		want:    outcome{stop: true, class: classFailed, reason: addonsv1alpha1.ReasonHookFailed, message: "the AfterReady hook failed: connection refused"},
		wantErr: "the AfterReady hook failed: connection refused",
	}, {
		name: "a Cleanup error keeps the add-on deleting", hook: hookCleanup,
		res:   HookResult{Err: errors.New("timeout")},
		class: classDeleting, defaultReason: addonsv1alpha1.ReasonDeletionBlocked,
		want:    outcome{stop: true, class: classDeleting, reason: addonsv1alpha1.ReasonHookFailed, message: "the Cleanup hook failed: timeout"},
		wantErr: "the Cleanup hook failed: timeout",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := hookOutcome(tc.hook, tc.res, tc.class, tc.defaultReason)
			gotErr := ""
			if got.err != nil {
				gotErr = got.err.Error()
			}
			if gotErr != tc.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tc.wantErr)
			}
			got.err = nil
			if got.stop != tc.want.stop || got.class != tc.want.class || got.reason != tc.want.reason ||
				got.message != tc.want.message || got.requeueAfter != tc.want.requeueAfter || got.terminal != tc.want.terminal {
				t.Errorf("hookOutcome = %+v, want %+v", got, tc.want)
			}
		})
	}
}
