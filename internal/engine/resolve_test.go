package engine

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestPinVersion(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      addonsv1alpha1.AddonStatus
		generation  int64
		rollback    *bool
		resolved    string
		wantVersion string
		wantWanted  string
		wantFailed  string
	}{
		{name: "no failure", resolved: "2", wantVersion: "2"},
		{name: "failed version still asked for", generation: 4, resolved: "2",
			status:      addonsv1alpha1.AddonStatus{LastHealthyVersion: "1", Upgrade: &addonsv1alpha1.UpgradeStatus{FailedVersion: "2", FailedGeneration: 4}},
			wantVersion: "1", wantWanted: "2", wantFailed: "2"},
		{name: "rollback disabled", generation: 4, resolved: "2", rollback: ptr.To(false),
			status:      addonsv1alpha1.AddonStatus{LastHealthyVersion: "1", Upgrade: &addonsv1alpha1.UpgradeStatus{FailedVersion: "2", FailedGeneration: 4}},
			wantVersion: "2", wantFailed: "2"},
		{name: "the spec changed since the failure", generation: 5, resolved: "3",
			status:      addonsv1alpha1.AddonStatus{LastHealthyVersion: "1", Upgrade: &addonsv1alpha1.UpgradeStatus{FailedVersion: "2", FailedGeneration: 4}},
			wantVersion: "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Generation: tc.generation}, Status: addonsv1alpha1.CoreDNSStatus{AddonStatus: tc.status}}
			if tc.rollback != nil {
				addon.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Rollback: tc.rollback}
			}
			resolved := channels.Resolved{Addon: "coredns", Version: tc.resolved}
			wanted := pinVersion(addon, &resolved)
			if resolved.Version != tc.wantVersion || wanted != tc.wantWanted {
				t.Errorf("pinVersion = version %q wanted %q, want %q and %q", resolved.Version, wanted, tc.wantVersion, tc.wantWanted)
			}
			failed := ""
			if addon.Status.Upgrade != nil {
				failed = addon.Status.Upgrade.FailedVersion
			}
			if failed != tc.wantFailed {
				t.Errorf("failed version = %q, want %q", failed, tc.wantFailed)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		version, channel     string
		settings             Settings
		wantStop             bool
		wantReason           string
		wantChannel          string
		wantResolvedNotEmpty bool
	}{
		{name: "default channel", wantChannel: "stable", wantResolvedNotEmpty: true},
		{name: "default channel from the settings", settings: Settings{DefaultChannel: "rapid"}, wantChannel: "rapid",
			wantResolvedNotEmpty: true},
		{name: "a pinned version has no channel", version: "1.12.1", channel: "stable", wantResolvedNotEmpty: true},
		{name: "unknown version", version: "9.9.9", wantStop: true, wantReason: addonsv1alpha1.ReasonVersionNotFound},
		{name: "unknown channel", channel: "nope", wantStop: true, wantReason: addonsv1alpha1.ReasonChannelNotFound, wantChannel: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := testReconciler(t, Options{})
			addon := coreDNS("a", "x")
			addon.Spec.Version, addon.Spec.Channel = tc.version, tc.channel
			st := &reconcileState{addon: addon, settings: tc.settings}
			out := r.resolve(context.Background(), st)
			if out.stop != tc.wantStop || out.reason != tc.wantReason {
				t.Fatalf("resolve = stop %v reason %q (%v), want %v %q", out.stop, out.reason, out.err, tc.wantStop, tc.wantReason)
			}
			if tc.wantStop && (out.class != classStalled || !out.terminal) {
				t.Errorf("a bad version or channel must be Stalled and terminal, got class %v terminal %v", out.class, out.terminal)
			}
			if st.channel != tc.wantChannel {
				t.Errorf("channel = %q, want %q", st.channel, tc.wantChannel)
			}
			if (st.resolved.Version != "") != tc.wantResolvedNotEmpty {
				t.Errorf("resolved version = %q", st.resolved.Version)
			}
			if tc.version != "" && !tc.wantStop && st.resolved.Version != tc.version {
				t.Errorf("resolved version = %q, want the pinned %q", st.resolved.Version, tc.version)
			}
		})
	}
}
