package ssa

import (
	"context"
	"reflect"
	"testing"
	"time"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestWaitForCache(t *testing.T) {
	deployment := addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "coredns"}
	widget := addonsv1alpha1.ObjectReference{Group: "example.com", Version: "v1", Kind: "Widget", Namespace: "ns", Name: "w"}
	cachedWidget := &unstructured.Unstructured{}
	cachedWidget.SetGroupVersionKind(widget.GroupVersionKind())
	cachedWidget.SetNamespace("ns")
	cachedWidget.SetName("w")
	cachedWidget.SetGeneration(3)
	for _, tc := range []struct {
		name    string
		applied map[addonsv1alpha1.ObjectReference]Written
		// caughtUp is whether the cache shows every write.
		caughtUp bool
		// readAs is the Go type each read of the object asks the cache for.
		readAs string
	}{
		{name: "built-in kind read as its Go type", applied: map[addonsv1alpha1.ObjectReference]Written{deployment: {2, "999"}},
			caughtUp: true, readAs: "*v1.Deployment"},
		{name: "built-in kind behind the write", applied: map[addonsv1alpha1.ObjectReference]Written{deployment: {2, "1000"}},
			readAs: "*v1.Deployment"},
		{name: "custom kind read unstructured", applied: map[addonsv1alpha1.ObjectReference]Written{widget: {3, "999"}},
			caughtUp: true, readAs: "*unstructured.Unstructured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads []string
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).
				WithObjects(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coredns", Generation: 2}},
					cachedWidget.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						reads = append(reads, reflect.TypeOf(obj).String())
						return c.Get(ctx, key, obj, opts...)
					},
				}).Build()
			behind := WaitForCache(t.Context(), c, tc.applied, 50*time.Millisecond)
			if tc.caughtUp != (len(behind) == 0) {
				t.Fatalf("waitForCache returned %v behind, want caught up %v", behind, tc.caughtUp)
			}
			if len(reads) == 0 {
				t.Fatal("WaitForCache read nothing")
			}
			for _, r := range reads {
				if r != tc.readAs {
					t.Fatalf("WaitForCache read a %s, want %s", r, tc.readAs)
				}
			}
			// Caught up, one read is enough; behind, it polls until the timeout.
			if tc.caughtUp && len(reads) != 1 {
				t.Fatalf("WaitForCache read %d times an object already caught up, want 1", len(reads))
			}
			if !tc.caughtUp && len(reads) < 2 {
				t.Fatalf("WaitForCache read an object behind its generation %d time(s), want it polled", len(reads))
			}
		})
	}
}

// TestWrittenShownBy: a cached copy shows a write when its resource version is not older
// than the one the write left, compared as integers; where either does not parse, when
// its generation is not older.
func TestWrittenShownBy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		wrote       Written
		rv          string
		generation  int64
		wantShownBy bool
	}{
		{name: "the write's own resource version", wrote: Written{2, "999"}, rv: "999", generation: 2, wantShownBy: true},
		{name: "a later change", wrote: Written{2, "999"}, rv: "1000", generation: 2, wantShownBy: true},
		{name: "an older copy of the same generation", wrote: Written{2, "1000"}, rv: "999", generation: 2},
		{name: "an older copy of an older generation", wrote: Written{2, "1000"}, rv: "999", generation: 1},
		{name: "an object without generations, older", wrote: Written{0, "12"}, rv: "11"},
		{name: "unparsable: the generation decides, caught up", wrote: Written{2, "a1"}, rv: "a0", generation: 2, wantShownBy: true},
		{name: "unparsable: the generation decides, behind", wrote: Written{2, "a1"}, rv: "a0", generation: 1},
		{name: "no resource version written: the generation decides", wrote: Written{Generation: 3}, rv: "5", generation: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := &metav1.ObjectMeta{ResourceVersion: tc.rv, Generation: tc.generation}
			if got := tc.wrote.ShownBy(live); got != tc.wantShownBy {
				t.Fatalf("%+v shownBy resource version %q, generation %d = %v, want %v", tc.wrote, tc.rv, tc.generation, got, tc.wantShownBy)
			}
		})
	}
}
