package engine

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestMapChild(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []types.NamespacedName
	}{
		{"a child of a CoreDNS", instanceLabels("CoreDNS", types.NamespacedName{Namespace: "a", Name: "x"}),
			[]types.NamespacedName{{Namespace: "a", Name: "x"}}},
		{"a child of another kind", instanceLabels("Dashboard", types.NamespacedName{Namespace: "a", Name: "x"}), nil},
		{"not managed by kaddons", map[string]string{LabelKind: "coredns", LabelName: "x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			var got []types.NamespacedName
			for _, req := range r.mapChild(context.Background(), cm) {
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
	opts := CacheOptions(def, def)
	if len(opts.ByObject) != 3 {
		t.Fatalf("CacheOptions has %d entries, want one per distinct child kind and the HPAs", len(opts.ByObject))
	}
	for obj, by := range opts.ByObject {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if by.Label == nil || !by.Label.Matches(labels.Set(map[string]string{LabelManagedBy: ManagedByValue})) ||
			by.Label.Matches(labels.Set(map[string]string{})) {
			t.Errorf("%s is not filtered by %s=%s", u.GroupVersionKind(), LabelManagedBy, ManagedByValue)
		}
	}
	if opts.DefaultTransform == nil {
		t.Error("managed fields are not stripped from the cache")
	}
}
