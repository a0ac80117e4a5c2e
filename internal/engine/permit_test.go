package engine

import (
	"context"
	"errors"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestPermit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		permit     PermitFunc
		wantStop   bool
		wantClass  conditionClass
		wantErr    bool
		wantReason string
	}{
		{name: "no policy hook"},
		{name: "permitted", permit: func(context.Context, PermitRequest) (string, error) { return "", nil }},
		{name: "refused", permit: func(context.Context, PermitRequest) (string, error) { return "rule r forbids it", nil },
			wantStop: true, wantClass: classStalled, wantReason: addonsv1alpha1.ReasonNotPermitted},
		{name: "policy unreadable", permit: func(context.Context, PermitRequest) (string, error) { return "", errors.New("cache down") },
			wantStop: true, wantClass: classFailed, wantErr: true, wantReason: addonsv1alpha1.ReasonNotPermitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got PermitRequest
			permit := tc.permit
			if permit != nil {
				permit = func(ctx context.Context, req PermitRequest) (string, error) {
					got = req
					return tc.permit(ctx, req)
				}
			}
			r, _ := testReconciler(t, Options{Permit: permit})
			st := &reconcileState{addon: coreDNS("a", "x"), channel: "stable", resolved: channels.Resolved{Addon: "coredns", Version: "1.0.0"}}
			out := r.permit(context.Background(), st)
			if out.stop != tc.wantStop || out.class != tc.wantClass || (out.err != nil) != tc.wantErr || out.reason != tc.wantReason {
				t.Fatalf("permit = %+v", out)
			}
			if out.terminal {
				t.Error("a refusal must not be terminal: a policy change reconciles the add-on again")
			}
			if permit != nil && (got.Version != "1.0.0" || got.Channel != "stable") {
				t.Errorf("the policy saw %+v, want the resolved version and channel", got)
			}
		})
	}
}
