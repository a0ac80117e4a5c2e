package engine

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestSyncReady(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     metav1.ConditionStatus
		observed   int64
		generation int64
		want       bool
	}{
		{"ready for this generation", metav1.ConditionTrue, 2, 2, true},
		{"ready for an older generation", metav1.ConditionTrue, 1, 2, false},
		{"not ready", metav1.ConditionFalse, 2, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Generation: tc.generation}}
			a.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: tc.status, ObservedGeneration: tc.observed}}
			syncReady(a)
			if a.Status.Ready != tc.want {
				t.Errorf("status.ready = %v, want %v", a.Status.Ready, tc.want)
			}
		})
	}
}

func TestRecordApplied(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &addonsv1alpha1.AddonStatus{LastHealthyVersion: "1"}
	recordApplied(s, 3, "2", now)
	if s.AppliedVersion != "2" || s.LastAppliedTime == nil || !s.LastAppliedTime.Time.Equal(now) {
		t.Fatalf("recordApplied = %+v", s)
	}
	if s.Upgrade == nil || s.Upgrade.Version != "2" {
		t.Errorf("an upgrade to a version not yet healthy is tracked, got %+v", s.Upgrade)
	}
	s.ObservedGeneration = 3
	recordApplied(s, 3, "2", now.Add(time.Hour))
	if !s.LastAppliedTime.Time.Equal(now) {
		t.Errorf("re-applying the same generation and version moved lastAppliedTime to %v", s.LastAppliedTime)
	}
}

func TestStatusCacheRestore(t *testing.T) {
	name := types.NamespacedName{Namespace: "a", Name: "x"}
	var c statusCache
	c.store(name, writtenStatus{uid: "u", baseResourceVersion: "5", status: &addonsv1alpha1.AddonStatus{AppliedVersion: "written"}})
	for _, tc := range []struct {
		name, uid, rv, want string
	}{
		{"the cache is behind the write", "u", "5", "written"},
		{"the cache caught up", "u", "6", "cached"},
		{"a re-created add-on", "v", "5", "cached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{UID: types.UID(tc.uid), ResourceVersion: tc.rv}}
			a.Status.AppliedVersion = "cached"
			c.restore(name, a)
			if a.Status.AppliedVersion != tc.want {
				t.Errorf("status after restore = %q, want %q", a.Status.AppliedVersion, tc.want)
			}
		})
	}
}

func TestFinalizerKeepsOtherFinalizers(t *testing.T) {
	addon := coreDNS("a", "x")
	addon.Finalizers = []string{"example.com/other"}
	r, c := testReconciler(t, Options{}, addon)
	ctx := context.Background()
	got := &addonsv1alpha1.CoreDNS{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(addon), got); err != nil {
		t.Fatal(err)
	}
	if err := r.addFinalizer(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(addon), got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/other", Finalizer}; !equalStrings(got.Finalizers, want) {
		t.Fatalf("finalizers after add = %v, want %v", got.Finalizers, want)
	}
	stale := got.DeepCopy()
	stale.ResourceVersion = "1"
	if err := r.addFinalizer(ctx, stale); err == nil {
		t.Error("adding the finalizer over a stale resource version succeeded")
	}
	if err := r.removeFinalizer(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(addon), got); err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(got, Finalizer) || !controllerutil.ContainsFinalizer(got, "example.com/other") {
		t.Errorf("finalizers after remove = %v, want only example.com/other", got.Finalizers)
	}
}

func TestRemoveFinalizerOfAGoneAddon(t *testing.T) {
	gone := coreDNS("a", "x")
	gone.Finalizers = []string{Finalizer}
	r, _ := testReconciler(t, Options{})
	// The add-on is no longer on the server: nothing is left to remove, and no error.
	if err := r.removeFinalizer(context.Background(), gone); err != nil {
		t.Errorf("removing the finalizer of a gone add-on: %v, want no error", err)
	}
}

func TestPatchStatusOfAGoneAddon(t *testing.T) {
	original := coreDNS("a", "x")
	gone := original.DeepCopy()
	gone.Status.AppliedVersion = "1.12.1"
	r, _ := testReconciler(t, Options{})
	// The add-on was deleted during the reconcile: no status to write, and no error.
	if err := r.patchStatus(context.Background(), original, gone); err != nil {
		t.Errorf("writing the status of a gone add-on: %v, want no error", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
