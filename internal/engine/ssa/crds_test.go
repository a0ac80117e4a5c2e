package ssa

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// ver is one entry of a test CRD's spec.versions.
type ver struct {
	name            string
	served, storage bool
}

// testCRD returns the CustomResourceDefinition widgets.example.com with versions, and,
// when stored is not nil, a status that lists stored and is Established.
func testCRD(stored []string, versions ...ver) *unstructured.Unstructured {
	list := make([]any, 0, len(versions))
	for _, v := range versions {
		list = append(list, map[string]any{"name": v.name, "served": v.served, "storage": v.storage})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced", "versions": list,
			"names": map[string]any{"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
		},
	}}
	if stored != nil {
		s := make([]any, 0, len(stored))
		for _, name := range stored {
			s = append(s, name)
		}
		u.Object["status"] = map[string]any{
			"storedVersions": s,
			"conditions":     []any{map[string]any{"type": "Established", "status": "True"}},
		}
	}
	return u
}

func TestCompareCRDVersions(t *testing.T) {
	v1v2 := testCRD([]string{"v1"}, ver{"v1", true, true}, ver{"v2", true, false})
	for _, tc := range []struct {
		name                    string
		live, next              *unstructured.Unstructured
		unserved, droppedStored []string
	}{
		{name: "the same definition", live: v1v2,
			next: testCRD(nil, ver{"v1", true, true}, ver{"v2", true, false})},
		{name: "a new version", live: v1v2,
			next: testCRD(nil, ver{"v1", true, true}, ver{"v2", true, false}, ver{"v3", true, false})},
		{name: "the storage version moves", live: v1v2,
			next: testCRD(nil, ver{"v1", true, false}, ver{"v2", true, true})},
		{name: "served: false on a stored version is no drop from spec.versions", live: v1v2,
			next:     testCRD(nil, ver{"v1", false, false}, ver{"v2", true, true}),
			unserved: []string{"v1"}},
		{name: "a served version never stored is left out", live: v1v2,
			next:     testCRD(nil, ver{"v1", true, true}),
			unserved: []string{"v2"}},
		{name: "a stored and served version is left out", live: v1v2,
			next:     testCRD(nil, ver{"v2", true, true}),
			unserved: []string{"v1"}, droppedStored: []string{"v1"}},
		{name: "a stored version no longer served is left out",
			live:          testCRD([]string{"v1", "v2"}, ver{"v1", false, false}, ver{"v2", true, true}),
			next:          testCRD(nil, ver{"v2", true, true}),
			droppedStored: []string{"v1"}},
		{name: "a version that was not served stays unserved",
			live: testCRD([]string{"v2"}, ver{"v1", false, false}, ver{"v2", true, true}),
			next: testCRD(nil, ver{"v1", false, false}, ver{"v2", true, true})},
		{name: "a version that was not served is left out, never stored",
			live: testCRD([]string{"v2"}, ver{"v1", false, false}, ver{"v2", true, true}),
			next: testCRD(nil, ver{"v2", true, true})},
		{name: "a version served again",
			live: testCRD([]string{"v2"}, ver{"v1", false, false}, ver{"v2", true, true}),
			next: testCRD(nil, ver{"v1", true, false}, ver{"v2", true, true})},
		{name: "several versions stop",
			live:     testCRD([]string{"v3"}, ver{"v1", true, false}, ver{"v2", true, false}, ver{"v3", true, true}),
			next:     testCRD(nil, ver{"v2", false, false}, ver{"v3", true, true}),
			unserved: []string{"v1", "v2"}},
		{name: "a version without served counts as not served",
			live: testCRD([]string{"v1"}, ver{"v1", true, true}),
			next: &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
				"versions": []any{map[string]any{"name": "v1", "storage": true}}}}},
			unserved: []string{"v1"}},
		{name: "a live definition without status stores nothing",
			live:     testCRD(nil, ver{"v1", true, true}),
			next:     testCRD(nil, ver{"v2", true, true}),
			unserved: []string{"v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := compareCRDVersions(tc.live, tc.next)
			if !reflect.DeepEqual(got.unserved, tc.unserved) || !reflect.DeepEqual(got.droppedStored, tc.droppedStored) {
				t.Errorf("compareCRDVersions = unserved %v, dropped stored %v; want %v, %v",
					got.unserved, got.droppedStored, tc.unserved, tc.droppedStored)
			}
		})
	}
}

func TestListVersion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		live, next *unstructured.Unstructured
		want       string
	}{
		{name: "a version both serve",
			live: testCRD([]string{"v1"}, ver{"v1", true, true}, ver{"v2", true, false}),
			next: testCRD(nil, ver{"v1", false, false}, ver{"v2", true, true}), want: "v2"},
		{name: "no version stays served: the live storage version",
			live: testCRD([]string{"v2"}, ver{"v1", true, false}, ver{"v2", true, true}),
			next: testCRD(nil, ver{"v3", true, true}), want: "v2"},
		{name: "the live storage version is not served: any served one",
			live: testCRD([]string{"v2"}, ver{"v1", true, false}, ver{"v2", false, true}),
			next: testCRD(nil, ver{"v3", true, true}), want: "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listVersion(tc.live, tc.next); got != tc.want {
				t.Errorf("listVersion = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCheckCRDVersions runs checkCRDVersions on a client that answers the live definition
// and the list of its objects: what it refuses, what it passes, which reads it makes, and
// that a failed list is an error to retry, not a refusal.
func TestCheckCRDVersions(t *testing.T) {
	live := testCRD([]string{"v1"}, ver{"v1", true, true}, ver{"v2", true, false})
	unserveV1 := testCRD(nil, ver{"v1", false, false}, ver{"v2", true, true})
	unavailable := apierrors.NewServiceUnavailable("etcd is away")
	object := func(ns, name string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, tc := range []struct {
		name  string
		live  *unstructured.Unstructured // nil: not found
		next  *unstructured.Unstructured
		allow bool
		// list answers the list of the definition's objects; nil fails the test if called.
		list func(*metav1.PartialObjectMetadataList) error
		// want is the refusal, or wantErr the error that is no refusal.
		want    *StoredVersionError
		wantErr error
		message []string
	}{
		{name: "a new definition", next: unserveV1},
		{name: "the same definition", live: live, next: testCRD(nil, ver{"v1", true, true}, ver{"v2", true, false})},
		{name: "a dropped stored version, refused without a list", live: live, next: testCRD(nil, ver{"v2", true, true}),
			want: &StoredVersionError{CRD: "widgets.example.com", Dropped: []string{"v1"}},
			message: []string{"drops the version v1", "status.storedVersions", "migrate the stored objects",
				"remove v1 from the definition's status.storedVersions"}},
		{name: "an unserved version without objects", live: live, next: unserveV1,
			list: func(*metav1.PartialObjectMetadataList) error { return nil }},
		{name: "an unserved version with one object", live: live, next: unserveV1,
			list: func(l *metav1.PartialObjectMetadataList) error {
				l.Items = []metav1.PartialObjectMetadata{object("team-a", "demo")}
				l.RemainingItemCount = ptr.To[int64](0)
				return nil
			},
			want: &StoredVersionError{CRD: "widgets.example.com", Unserved: []string{"v1"}, Objects: 1, Example: "team-a/demo"},
			message: []string{"stops serving the version v1 while one object of it exists, team-a/demo",
				"set spec.upgrade.allowCRDVersionRemoval: true to apply it anyway"}},
		{name: "an unserved version with counted objects", live: live, next: unserveV1,
			list: func(l *metav1.PartialObjectMetadataList) error {
				l.Items = []metav1.PartialObjectMetadata{object("team-a", "demo")}
				l.RemainingItemCount = ptr.To[int64](4)
				l.Continue = "more"
				return nil
			},
			want:    &StoredVersionError{CRD: "widgets.example.com", Unserved: []string{"v1"}, Objects: 5, Example: "team-a/demo"},
			message: []string{"while 5 objects of it exist, team-a/demo among them"}},
		{name: "an unserved version with uncounted objects", live: live, next: unserveV1,
			list: func(l *metav1.PartialObjectMetadataList) error {
				l.Items = []metav1.PartialObjectMetadata{object("", "cluster-wide")}
				l.Continue = "more"
				return nil
			},
			want: &StoredVersionError{CRD: "widgets.example.com", Unserved: []string{"v1"}, Objects: 2, AtLeast: true,
				Example: "cluster-wide"},
			message: []string{"while at least 2 objects of it exist, cluster-wide among them"}},
		{name: "a failed list is retried, not refused", live: live, next: unserveV1,
			list:    func(*metav1.PartialObjectMetadataList) error { return unavailable },
			wantErr: unavailable},
		{name: "a definition deleted meanwhile has no objects", live: live, next: unserveV1,
			list: func(*metav1.PartialObjectMetadataList) error {
				return apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
			}},
		{name: "a definition that is not Established serves nothing to lose",
			live: func() *unstructured.Unstructured {
				u := live.DeepCopy()
				_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Established", "status": "False"}},
					"status", "conditions")
				return u
			}(), next: unserveV1},
		{name: "allowed: no read", next: testCRD(nil, ver{"v2", true, true}), allow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gets := 0
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
					gets++
					if tc.allow {
						t.Error("an allowed apply read the live definition")
					}
					if tc.live == nil {
						return apierrors.NewNotFound(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, key.Name)
					}
					tc.live.DeepCopyInto(obj.(*unstructured.Unstructured))
					return nil
				},
				List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if tc.list == nil {
						t.Fatal("checkCRDVersions listed objects it need not count")
					}
					l := list.(*metav1.PartialObjectMetadataList)
					o := (&client.ListOptions{}).ApplyOptions(opts)
					want := schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "WidgetList"}
					if gvk := l.GroupVersionKind(); gvk != want || o.Limit != 1 || o.Namespace != "" {
						t.Errorf("listed %v, limit %d, namespace %q; want %v, 1, all namespaces", gvk, o.Limit, o.Namespace, want)
					}
					return tc.list(l)
				},
			}).Build()
			m := &Manager{Reader: c}
			err := m.checkCRDVersions(t.Context(), []*unstructured.Unstructured{tc.next}, tc.allow)
			var refused *StoredVersionError
			switch {
			case tc.want != nil:
				if !errors.As(err, &refused) || !reflect.DeepEqual(refused, tc.want) {
					t.Fatalf("checkCRDVersions = %#v, want %#v", err, tc.want)
				}
				for _, s := range tc.message {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the message %q does not say %q", err, s)
					}
				}
			case tc.wantErr != nil:
				if errors.As(err, &refused) || !errors.Is(err, tc.wantErr) {
					t.Fatalf("checkCRDVersions = %v, want an error that wraps %v and is no refusal", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("checkCRDVersions = %v, want it to pass", err)
			}
			if !tc.allow && gets != 1 {
				t.Errorf("read the live definition %d times, want once", gets)
			}
		})
	}
}
