package engine

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestContains(t *testing.T) {
	for _, tc := range []struct {
		name          string
		live, desired any
		want          bool
	}{
		{"equal maps", map[string]any{"a": "x"}, map[string]any{"a": "x"}, true},
		{"live has more fields", map[string]any{"a": "x", "b": "y"}, map[string]any{"a": "x"}, true},
		{"a field changed", map[string]any{"a": "y"}, map[string]any{"a": "x"}, false},
		{"a field missing", map[string]any{}, map[string]any{"a": "x"}, false},
		{"an empty desired map the server dropped", map[string]any{}, map[string]any{"a": map[string]any{}}, true},
		{"numbers compare by value", map[string]any{"n": int64(2)}, map[string]any{"n": float64(2)}, true},
		{"lists must have the same length", []any{"a", "b"}, []any{"a"}, false},
		{"lists match element by element", []any{map[string]any{"a": 1, "b": 2}}, []any{map[string]any{"a": 1}}, true},
		{"an empty desired list matches a missing one", nil, []any{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := contains(tc.live, tc.desired); got != tc.want {
				t.Errorf("contains(%v, %v) = %v, want %v", tc.live, tc.desired, got, tc.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	cmRef := addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm"}
	owned := []metav1.OwnerReference{{APIVersion: "addons.kaddons.dev/v1alpha1", Kind: "CoreDNS", Name: "x", UID: "uid-x"}}
	live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", OwnerReferences: owned},
		Data: map[string]string{"k": "v"}}
	drifted := live.DeepCopy()
	drifted.Data["k"] = "changed"
	stripped := live.DeepCopy()
	stripped.OwnerReferences = nil
	for _, tc := range []struct {
		name      string
		applied   string
		inventory []addonsv1alpha1.ObjectReference
		pending   []addonsv1alpha1.ObjectReference
		live      *corev1.ConfigMap
		wantSkip  bool
		wantOnly  bool
	}{
		{name: "an interrupted apply left pending objects", applied: "1", inventory: []addonsv1alpha1.ObjectReference{cmRef},
			pending: []addonsv1alpha1.ObjectReference{{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "orphan"}}, live: live},
		{name: "nothing changed", applied: "1", inventory: []addonsv1alpha1.ObjectReference{cmRef}, live: live, wantSkip: true},
		{name: "a child drifted", applied: "1", inventory: []addonsv1alpha1.ObjectReference{cmRef}, live: drifted, wantOnly: true},
		{name: "its owner reference was stripped", applied: "1", inventory: []addonsv1alpha1.ObjectReference{cmRef}, live: stripped,
			wantOnly: true},
		{name: "a child is gone", applied: "1", inventory: []addonsv1alpha1.ObjectReference{cmRef}, wantOnly: true},
		{name: "another version", applied: "0", inventory: []addonsv1alpha1.ObjectReference{cmRef}, live: live},
		{name: "the rendered set changed", applied: "1", live: live},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *Reconciler
			if tc.live != nil {
				r, _ = testReconciler(t, Options{}, tc.live)
			} else {
				r, _ = testReconciler(t, Options{})
			}
			objects, err := parseObjects(context.Background(), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: a}\ndata: {k: v}\n")
			if err != nil {
				t.Fatal(err)
			}
			addon := coreDNS("a", "x")
			addon.UID = "uid-x"
			addon.Status.AppliedVersion, addon.Status.Inventory = tc.applied, addonsv1alpha1.NewInventory(tc.inventory)
			st := &reconcileState{addon: addon, resolved: channels.Resolved{Version: "1"}, rendered: rendered{objects: objects},
				pending: tc.pending}
			if out := r.plan(context.Background(), st); out.stop {
				t.Fatalf("plan stopped: %+v", out)
			}
			if st.plan.skip != tc.wantSkip || (st.plan.only != nil) != tc.wantOnly {
				t.Errorf("plan = skip %v only %v, want skip %v only %v", st.plan.skip, st.plan.only, tc.wantSkip, tc.wantOnly)
			}
			if tc.wantOnly && !st.plan.only[cmRef] {
				t.Errorf("plan.only = %v, want the ConfigMap", st.plan.only)
			}
		})
	}
}
