package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine/ssa"
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
			r.recordEvents(context.Background(), before, after, st)
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

func TestLogChanges(t *testing.T) {
	ref := func(name string) addonsv1alpha1.ObjectReference {
		return addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: name}
	}
	applied := func(n int) map[addonsv1alpha1.ObjectReference]ssa.Written {
		m := map[addonsv1alpha1.ObjectReference]ssa.Written{}
		for i := range n {
			m[ref(fmt.Sprint("applied-", i))] = ssa.Written{}
		}
		return m
	}
	many := make([]addonsv1alpha1.ObjectReference, 0, maxLoggedObjects+5)
	for i := range maxLoggedObjects + 5 {
		many = append(many, ref(fmt.Sprint("old-", i)))
	}
	manyNames := make([]any, 0, maxLoggedObjects+1)
	for _, r := range many[:maxLoggedObjects] {
		manyNames = append(manyNames, r.String())
	}
	manyNames = append(manyNames, "and 5 more")
	failedUpgrade := &addonsv1alpha1.UpgradeStatus{FailedVersion: "1.12.1", FailedGeneration: 1}

	for _, tc := range []struct {
		name          string
		before, after addonsv1alpha1.AddonStatus
		st            reconcileState
		// want are the keys and values of the line beyond the logger's own; nil is no line.
		want map[string]any
	}{
		{name: "nothing changed logs nothing",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"}, after: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"},
			st: reconcileState{resolved: channels.Resolved{Addon: "coredns", Version: "1.12.1"}}},
		{name: "a first install says what it applied",
			after: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"},
			st:    reconcileState{resolved: channels.Resolved{Version: "1.12.1"}, applied: ssa.Result{Applied: applied(5)}},
			want:  map[string]any{"version": "1.12.1", "applied": 5.0}},
		{name: "an upgrade says from which version, and what it pruned",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.11.3"}, after: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"},
			st: reconcileState{resolved: channels.Resolved{Version: "1.12.1"},
				applied: ssa.Result{Applied: applied(2), Pruned: []addonsv1alpha1.ObjectReference{ref("old")}}},
			want: map[string]any{"version": "1.12.1", "applied": 2.0, "upgradedFrom": "1.11.3",
				"pruned": []any{"ConfigMap kube-system/old"}}},
		{name: "drift, re-creation and adoption are named",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"}, after: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"},
			st: reconcileState{resolved: channels.Resolved{Version: "1.12.1"}, applied: ssa.Result{Applied: applied(3),
				Drifted: []addonsv1alpha1.ObjectReference{ref("drifted")}, Recreated: []addonsv1alpha1.ObjectReference{ref("job")},
				Adopted: []addonsv1alpha1.AdoptedObject{{ObjectReference: ref("coredns"), FieldManagers: []string{"kubeadm"}}}}},
			want: map[string]any{"version": "1.12.1", "applied": 3.0,
				"driftCorrected": []any{"ConfigMap kube-system/drifted"}, "recreated": []any{"ConfigMap kube-system/job"},
				"adopted": []any{"ConfigMap kube-system/coredns"}}},
		{name: "a long prune names the first objects and counts the rest",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"}, after: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1"},
			st:   reconcileState{resolved: channels.Resolved{Version: "1.12.1"}, applied: ssa.Result{Pruned: many}},
			want: map[string]any{"version": "1.12.1", "pruned": manyNames}},
		{name: "a failed upgrade says where it rolls back to",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1", LastHealthyVersion: "1.11.3"},
			after:  addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1", LastHealthyVersion: "1.11.3", Upgrade: failedUpgrade},
			st:     reconcileState{resolved: channels.Resolved{Version: "1.12.1"}},
			want:   map[string]any{"version": "1.12.1", "upgradeFailed": "1.12.1", "rollingBackTo": "1.11.3"}},
		{name: "the rollback's apply says it rolled back",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1", LastHealthyVersion: "1.11.3", Upgrade: failedUpgrade},
			after:  addonsv1alpha1.AddonStatus{AppliedVersion: "1.11.3", LastHealthyVersion: "1.11.3", Upgrade: failedUpgrade},
			st:     reconcileState{resolved: channels.Resolved{Version: "1.11.3"}, wanted: "1.12.1", applied: ssa.Result{Applied: applied(1)}},
			want:   map[string]any{"version": "1.11.3", "applied": 1.0, "rolledBackFrom": "1.12.1"}},
		{name: "a status change alone logs nothing",
			before: addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1", LastHealthyVersion: "1.11.3"},
			after:  addonsv1alpha1.AddonStatus{AppliedVersion: "1.12.1", LastHealthyVersion: "1.12.1"},
			st:     reconcileState{resolved: channels.Resolved{Version: "1.12.1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			sink := funcr.NewJSON(func(line string) { lines = append(lines, line) }, funcr.Options{})

			r := &Reconciler{recorder: &events.FakeRecorder{}, name: "coredns",
				gvk: schema.GroupVersionKind{Group: addonsv1alpha1.GroupVersion.Group, Kind: "CoreDNS"}}
			before, after := &addonsv1alpha1.CoreDNS{}, &addonsv1alpha1.CoreDNS{}
			for _, o := range []*addonsv1alpha1.CoreDNS{before, after} {
				o.Namespace, o.Name, o.Generation = "kube-system", "coredns", 1
			}
			before.Status.AddonStatus, after.Status.AddonStatus = tc.before, tc.after
			// The reconcile's logger, as controller-runtime builds it (the manager's
			// logConstructor, with the request).
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "coredns"}}
			ctx := log.IntoContext(context.Background(), r.logConstructor(sink)(&req))
			r.recordEvents(ctx, before, after, &tc.st)

			if tc.want == nil {
				if len(lines) != 0 {
					t.Errorf("logged %q, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("logged %d lines, want 1: %q", len(lines), lines)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"logger": "", "level": 0.0, "msg": logChangedMessage, "controller": "coredns",
				"controllerGroup": addonsv1alpha1.GroupVersion.Group, "controllerKind": "CoreDNS",
				"CoreDNS":   map[string]any{"namespace": "kube-system", "name": "coredns"},
				"namespace": "kube-system", "name": "coredns"}
			maps.Copy(want, tc.want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("logged %s\nwant %v", lines[0], want)
			}
		})
	}
}
