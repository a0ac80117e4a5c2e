package engine

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

func TestMapChild(t *testing.T) {
	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	listed := addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "listed"}
	owner := coreDNS("a", "x")
	owner.Status.Inventory = addonsv1alpha1.NewInventory([]addonsv1alpha1.ObjectReference{listed})
	r, _ := testReconciler(t, Options{}, owner)
	ofX := ssa.InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "a", Name: "x"})
	for _, tc := range []struct {
		name     string
		object   string
		labels   map[string]string
		unsealed bool
		want     []types.NamespacedName
	}{
		{"a child of a CoreDNS", "c", ofX, false, []types.NamespacedName{{Namespace: "a", Name: "x"}}},
		{"a child of another kind", "c", ssa.InstanceLabels("Dashboard", types.NamespacedName{Namespace: "a", Name: "x"}), false, nil},
		{"not managed by kaddons", "c", map[string]string{ssa.LabelKind: "coredns", ssa.LabelName: "x"}, false, nil},
		{"forged labels, not in the inventory", "forged", ofX, true, nil},
		{"unsealed, but in the inventory", "listed", ofX, true, []types.NamespacedName{{Namespace: "a", Name: "x"}}},
		{"forged labels of an add-on that does not exist", "forged",
			ssa.InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "a", Name: "gone"}), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: tc.object, Labels: tc.labels}}
			if tc.unsealed {
				cm.Annotations = map[string]string{ssa.AnnotationUnsealed: ""}
			}
			var got []types.NamespacedName
			for _, req := range r.mapChild(configMaps)(context.Background(), cm) {
				got = append(got, req.NamespacedName)
			}
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Errorf("mapChild = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDependentsOf(t *testing.T) {
	dependent := coreDNS("a", "dependent", addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "base"})
	other := coreDNS("a", "other")
	r, _ := testReconciler(t, Options{}, dependent, other)
	got := r.dependentsOf(context.Background(), "CoreDNS", coreDNS("a", "base"))
	if len(got) != 1 || got[0].Name != "dependent" {
		t.Errorf("dependentsOf(base) = %v, want only the add-on that depends on it", got)
	}
	if all := r.mapAll(context.Background(), nil); len(all) != 2 {
		t.Errorf("mapAll = %v, want both add-ons", all)
	}
}

func TestCacheOptionsFilterEveryChildKind(t *testing.T) {
	def := Definition{Children: []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Service")}}
	opts := CacheOptions(nil, def, def)
	if len(opts.ByObject) != 3 {
		t.Fatalf("CacheOptions has %d entries, want one per distinct child kind and the HPAs", len(opts.ByObject))
	}
	for obj, by := range opts.ByObject {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if by.Label == nil || !by.Label.Matches(labels.Set(map[string]string{ssa.LabelManagedBy: ssa.ManagedByValue})) ||
			by.Label.Matches(labels.Set(map[string]string{})) {
			t.Errorf("%s is not filtered by %s=%s", u.GroupVersionKind(), ssa.LabelManagedBy, ssa.ManagedByValue)
		}
	}
	if opts.DefaultTransform == nil {
		t.Error("managed fields are not stripped from the cache")
	}
}

// TestRetryRateLimiter: a failing add-on is retried after a delay that doubles with each
// failure in a row, never more than MaxRetryDelay, and starts over after a success.
func TestRetryRateLimiter(t *testing.T) {
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "x"}}
	other := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "b", Name: "x"}}
	for _, tc := range []struct {
		name     string
		failures int
		want     time.Duration
	}{
		{"the first failure", 1, MinRetryDelay},
		{"the second", 2, 2 * MinRetryDelay},
		{"the tenth", 10, 512 * MinRetryDelay},
		{"the fourteenth, still below the cap", 14, 8192 * MinRetryDelay},
		{"the fifteenth, at the cap", 15, MaxRetryDelay},
		{"a storm's fiftieth", 50, MaxRetryDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limiter := RetryRateLimiter()
			var got time.Duration
			for range tc.failures {
				got = limiter.When(req)
			}
			if got != tc.want {
				t.Errorf("delay after %d failures = %s, want %s", tc.failures, got, tc.want)
			}
			if n := limiter.NumRequeues(req); n != tc.failures {
				t.Errorf("NumRequeues = %d, want %d", n, tc.failures)
			}
			if d := limiter.When(other); d != MinRetryDelay {
				t.Errorf("another add-on's first delay = %s, want %s", d, MinRetryDelay)
			}
			limiter.Forget(req)
			if d := limiter.When(req); d != MinRetryDelay {
				t.Errorf("delay after a success and a new failure = %s, want %s", d, MinRetryDelay)
			}
		})
	}
}

func TestDependentsOfSkipsTheListForAKeyTheIndexNeverHeld(t *testing.T) {
	dependent := coreDNS("a", "dependent", addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "base"})
	r, _ := testReconciler(t, Options{}, dependent)
	r.targets = &dependencyTargets{}
	// The fake client's index does not go through r.targets: nothing is noted yet, so
	// dependentsOf answers without listing, even though the index holds the key.
	if got := r.dependentsOf(context.Background(), "CoreDNS", coreDNS("a", "base")); len(got) != 0 {
		t.Errorf("dependentsOf(base) before the key was noted = %v, want none without a list", got)
	}
	// Once the index function noted the add-on's keys, the list runs and finds it.
	if keys := r.targets.note(r.def.dependencyKeys(dependent)); len(keys) != 1 || keys[0] != "CoreDNS a/base" {
		t.Fatalf("note returned %v, want the dependent's one key", keys)
	}
	got := r.dependentsOf(context.Background(), "CoreDNS", coreDNS("a", "base"))
	if len(got) != 1 || got[0].Name != "dependent" {
		t.Errorf("dependentsOf(base) = %v, want the add-on that depends on it", got)
	}
	if got := r.dependentsOf(context.Background(), "CoreDNS", coreDNS("a", "other")); len(got) != 0 {
		t.Errorf("dependentsOf(other) = %v, want none", got)
	}
	var unset *dependencyTargets
	if !unset.mayHave("CoreDNS a/base") {
		t.Error("without recorded keys, every key may have dependents")
	}
}
