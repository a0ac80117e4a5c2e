package engine

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestEventNote(t *testing.T) {
	long := strings.Repeat("Secret ns/kubernetes-dashboard-csrf (from another-tool); ", 40)
	for _, tc := range []struct {
		name    string
		message string
		want    string
	}{
		{name: "short is kept", message: "Applied CoreDNS 1.12.1", want: "Applied CoreDNS 1.12.1"},
		{name: "exactly at the limit is kept", message: strings.Repeat("x", maxEventNote), want: strings.Repeat("x", maxEventNote)},
		{name: "over the limit is cut and says so", message: long,
			want: long[:maxEventNote-len(truncatedSuffix)] + truncatedSuffix},
		{name: "a multi-byte character is not split", message: strings.Repeat("x", maxEventNote-len(truncatedSuffix)-1) + strings.Repeat("é", 100),
			want: strings.Repeat("x", maxEventNote-len(truncatedSuffix)-1) + truncatedSuffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := eventNote(tc.message)
			if got != tc.want {
				t.Errorf("eventNote = %q, want %q", got, tc.want)
			}
			if len(got) > maxEventNote || !utf8.ValidString(got) {
				t.Errorf("note of %d bytes (valid UTF-8: %v), the API server takes at most %d", len(got), utf8.ValidString(got), maxEventNote)
			}
		})
	}
}

func TestRecordEvents(t *testing.T) {
	progressing := metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: addonsv1alpha1.ReasonChildrenNotReady, Message: "waiting for Deployment ns/coredns"}
	ready := metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: addonsv1alpha1.ReasonReconciled, Message: "coredns 1.12.1 is ready"}
	status := func(version string, conditions ...metav1.Condition) addonsv1alpha1.AddonStatus {
		return addonsv1alpha1.AddonStatus{AppliedVersion: version, Conditions: conditions}
	}
	for _, tc := range []struct {
		name          string
		before, after addonsv1alpha1.AddonStatus
		want          []string
	}{
		{name: "a first install that waits for its children records nothing",
			after: status("1.12.1", progressing)},
		{name: "a first install that is ready at once records Ready only",
			after: status("1.12.1", ready),
			want:  []string{"Normal Ready coredns 1.12.1 is ready"}},
		{name: "becoming ready later records Ready",
			before: status("1.12.1", progressing), after: status("1.12.1", ready),
			want: []string{"Normal Ready coredns 1.12.1 is ready"}},
		{name: "a version change records Upgraded",
			before: status("1.11.3", ready), after: status("1.12.1", ready),
			want: []string{"Normal Upgraded Changed coredns from 1.11.3 to 1.12.1"}},
		{name: "no transition records nothing",
			before: status("1.12.1", ready), after: status("1.12.1", ready)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &events.FakeRecorder{Events: make(chan string, 10)}
			r := &Reconciler{recorder: rec}
			before, after := &addonsv1alpha1.CoreDNS{}, &addonsv1alpha1.CoreDNS{}
			before.Status.AddonStatus, after.Status.AddonStatus = tc.before, tc.after
			st := &reconcileState{resolved: channels.Resolved{Addon: "coredns"}}
			r.recordEvents(before, after, st)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events = %q, want %q", got, tc.want)
			}
		})
	}
}
