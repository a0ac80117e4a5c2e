package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
		name: "a Terminal hold stalls, asked again after its retry", hook: hookInitialize,
		res:   HookResult{Reason: "NodePoolMissing", Message: "no node pool", Terminal: true},
		class: classProgressing, defaultReason: addonsv1alpha1.ReasonInitializationBlocked,
		want: outcome{stop: true, class: classStalled, reason: "NodePoolMissing",
			message: "the Initialize hook holds the add-on: no node pool", requeueAfter: time.Minute},
	}, {
		name: "a Terminal Validate refusal still waits for a spec change", hook: hookValidate,
		res:   HookResult{Message: "spec.replicas must be odd", Terminal: true},
		class: classStalled, defaultReason: addonsv1alpha1.ReasonInvalidSpec,
		want: outcome{stop: true, class: classStalled, reason: addonsv1alpha1.ReasonInvalidSpec,
			message: "the Validate hook holds the add-on: spec.replicas must be odd"},
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

func TestHookDefaultHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  HookResult
		want outcome
	}{{
		name: "a hold waits for a change, Progressing, with its message as it is",
		res:  Hold("", "waiting for CoreDNS a/dns: not found"),
		want: outcome{stop: true, class: classProgressing, reason: addonsv1alpha1.ReasonDependencyNotReady,
			message: "waiting for CoreDNS a/dns: not found"},
	}, {
		name: "a hold that says when is asked again then",
		res:  HookResult{Reason: "NoAddress", Message: "no address yet", RetryAfter: 5 * time.Second},
		want: outcome{stop: true, class: classProgressing, reason: "NoAddress", message: "no address yet", requeueAfter: 5 * time.Second},
	}, {
		name: "a Terminal hold stalls, asked again after a minute",
		res:  HookResult{Reason: addonsv1alpha1.ReasonCorefileMigrationFailed, Message: "cannot migrate", Terminal: true},
		want: outcome{stop: true, class: classStalled, reason: addonsv1alpha1.ReasonCorefileMigrationFailed,
			message: "cannot migrate", requeueAfter: time.Minute},
	}, {
		name: "a Terminal hold without a reason is InvalidSpec",
		res:  HookResult{Message: "spec.clusterDNSIP is outside the service range", Terminal: true, RetryAfter: time.Hour},
		want: outcome{stop: true, class: classStalled, reason: addonsv1alpha1.ReasonInvalidSpec,
			message: "spec.clusterDNSIP is outside the service range", requeueAfter: time.Hour},
	}, {
		name: "a hold without a message says the hook holds",
		res:  HookResult{Reason: "NoAddress"},
		want: outcome{stop: true, class: classProgressing, reason: "NoAddress",
			message: "the Default hook holds the add-on: (no message)"},
	}, {
		name: "Terminal alone does not hold",
		res:  HookResult{Terminal: true},
		want: proceed(),
	}, {
		name: "an error fails with HookFailed, retried",
		res:  HookResult{Err: errors.New("connection refused"), Terminal: true},
		want: outcome{stop: true, class: classFailed, reason: addonsv1alpha1.ReasonHookFailed,
			message: "the Default hook failed: connection refused"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := defaultHold(tc.res)
			if got.stop != tc.want.stop || got.class != tc.want.class || got.reason != tc.want.reason ||
				got.message != tc.want.message || got.requeueAfter != tc.want.requeueAfter || got.terminal != tc.want.terminal {
				t.Errorf("defaultHold = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestHookDefaultFillsTheRender: what the Default hook fills in and the inputs it returns
// reach the transforms and the render key, so that a change of them (in the cluster,
// not the spec) renders again; permit still sees the spec as stored.
func TestHookDefaultFillsTheRender(t *testing.T) {
	ctx := context.Background()
	var permitted []PermitRequest
	r, _ := testReconciler(t, Options{Permit: func(_ context.Context, req PermitRequest) (string, error) {
		permitted = append(permitted, req)
		return "", nil
	}})
	r.def.Children = coreDNSChildren()
	r.def.FreeFormFields = []string{"spec.corefile"}
	address := "10.0.0.10"
	r.def.Hooks.Default = func(_ context.Context, req HookRequest) HookResult {
		if req.API == nil || req.Cache == nil || req.TargetNamespace != "a" {
			return HookResult{Err: errors.New("the Default hook's request lacks a reader or the target namespace")}
		}
		c := req.Addon.(*addonsv1alpha1.CoreDNS)
		c.Spec.Corefile = ".:53 {}"
		return HookResult{Inputs: map[string]string{"address": address}}
	}
	var seen []any
	r.def.Transforms = []ObjectTransform{func(_ context.Context, in RenderInput, _ *Objects) error {
		seen = append(seen, in.Inputs)
		if in.Addon.(*addonsv1alpha1.CoreDNS).Spec.Corefile != ".:53 {}" {
			return errors.New("the transform does not see what Default filled in")
		}
		return nil
	}}
	render := func() (string, outcome) {
		st := &reconcileState{addon: coreDNS("a", "x")}
		out, _ := runPhases(ctx, st, phasesBetween(r.phases(), phaseResolve, phaseAdmit))
		if st.addon.(*addonsv1alpha1.CoreDNS).Spec.Corefile == "" || st.stored().(*addonsv1alpha1.CoreDNS).Spec.Corefile != "" {
			t.Errorf("Default did not fill the reconcile's copy only")
		}
		return st.rendered.key, out
	}

	first, out := render()
	if out.stop {
		t.Fatalf("the phases stopped: %+v", out)
	}
	if !strings.Contains(first, `"corefile":".:53 {}"`) || !strings.Contains(first, `"address":"10.0.0.10"`) {
		t.Errorf("render key %q lacks what Default produced", first)
	}
	if again, _ := render(); again != first || len(seen) != 1 {
		t.Errorf("the same defaults rendered again (%d transforms) or changed the key", len(seen))
	}
	address = "10.0.0.11"
	if changed, _ := render(); changed == first || len(seen) != 2 {
		t.Errorf("a change of the Default hook's inputs did not render again")
	}
	if got := seen[1].(map[string]string)["address"]; got != "10.0.0.11" {
		t.Errorf("the transform got inputs %v, want the new address", seen[1])
	}
	for _, req := range permitted {
		if len(req.FreeFormFields) != 0 {
			t.Errorf("permit counted %v, which only Default set, as set by the user", req.FreeFormFields)
		}
	}
	if len(permitted) != 6 {
		t.Errorf("permit and admit ran %d times in 3 renders, want 6", len(permitted))
	}
}

func TestHookDefaultMayNotChangeTheSharedSpec(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	r.def.Hooks.Default = func(_ context.Context, req HookRequest) HookResult {
		req.Addon.(*addonsv1alpha1.CoreDNS).Spec.Version = "9.9.9"
		return HookResult{}
	}
	st := &reconcileState{addon: coreDNS("a", "x")}
	out := r.defaults(context.Background(), st)
	if out.class != classFailed || out.reason != addonsv1alpha1.ReasonHookFailed ||
		!strings.HasPrefix(out.message, "the Default hook failed: it changed the spec fields every add-on shares") {
		t.Errorf("defaults = %+v, want HookFailed", out)
	}
}

// coreDNSChildren are the kinds of the CoreDNS packages.
func coreDNSChildren() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("ServiceAccount"), corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Service"), rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
		rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"), appsv1.SchemeGroupVersion.WithKind("Deployment"),
		policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	}
}
