package v1alpha1

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

func TestInventoryRoundTrip(t *testing.T) {
	cm := func(ns, name string) ObjectReference {
		return ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: name}
	}
	role := ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "r"}
	for _, tc := range []struct {
		name    string
		refs    []ObjectReference
		entries int
		want    []ObjectReference
	}{
		{name: "empty", refs: nil, entries: 0, want: nil},
		{name: "one kind and namespace share an entry", refs: []ObjectReference{cm("a", "x"), cm("a", "y")}, entries: 1,
			want: []ObjectReference{cm("a", "x"), cm("a", "y")}},
		{name: "namespaces and kinds split entries, in order of first appearance",
			refs:    []ObjectReference{role, cm("b", "x"), cm("a", "y"), cm("b", "z")},
			entries: 3, want: []ObjectReference{role, cm("b", "x"), cm("b", "z"), cm("a", "y")}},
		{name: "a duplicate is kept once", refs: []ObjectReference{cm("a", "x"), cm("a", "x")}, entries: 1,
			want: []ObjectReference{cm("a", "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := NewInventory(tc.refs)
			if len(inv) != tc.entries {
				t.Errorf("entries = %d, want %d: %+v", len(inv), tc.entries, inv)
			}
			if got := inv.Objects(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Objects() = %v, want %v", got, tc.want)
			}
			if inv.Len() != len(tc.want) {
				t.Errorf("Len() = %d, want %d", inv.Len(), len(tc.want))
			}
		})
	}
}

// TestInventoryReadsTheFlatForm decodes an inventory as kaddons wrote it before entries
// had names: every object is kept.
func TestInventoryReadsTheFlatForm(t *testing.T) {
	var status AddonStatus
	flat := `{"inventory":[{"version":"v1","kind":"ConfigMap","namespace":"a","name":"x"},` +
		`{"group":"apps","version":"v1","kind":"Deployment","namespace":"a","name":"d"}]}`
	if err := json.Unmarshal([]byte(flat), &status); err != nil {
		t.Fatal(err)
	}
	want := []ObjectReference{{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "a", Name: "d"}}
	if got := status.Inventory.Objects(); !reflect.DeepEqual(got, want) {
		t.Errorf("Objects() = %v, want %v", got, want)
	}
}

// TestInventoryCapsFitTheLimits checks that the caps are consistent: the most objects
// the inventory holds, with names of a usual length, fit its byte cap, so the object cap
// is the one a package meets first.
func TestInventoryCapsFitTheLimits(t *testing.T) {
	refs := make([]ObjectReference, 0, MaxInventoryObjects)
	for i := range MaxInventoryObjects {
		refs = append(refs, ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: fmt.Sprintf("ns-%d", i%50),
			Name: fmt.Sprintf("a-typical-object-name-%05d", i)})
	}
	if size := NewInventory(refs).EncodedSize(); size > MaxInventoryBytes {
		t.Errorf("%d objects take %d bytes, over MaxInventoryBytes (%d)", MaxInventoryObjects, size, MaxInventoryBytes)
	}
}
