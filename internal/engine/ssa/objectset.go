package ssa

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// RefOf returns the inventory reference of u.
func RefOf(u *unstructured.Unstructured) addonsv1alpha1.ObjectReference {
	gvk := u.GroupVersionKind()
	return addonsv1alpha1.ObjectReference{
		Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
		Namespace: u.GetNamespace(), Name: u.GetName(),
	}
}

// SameObject compares references ignoring the API version, which may change between
// package versions without making it another object.
func SameObject(x, y addonsv1alpha1.ObjectReference) bool {
	return x.Group == y.Group && x.Kind == y.Kind && x.Namespace == y.Namespace && x.Name == y.Name
}

// ObjectSet holds references by object, whatever their API version (see SameObject), so
// that set operations on inventories of thousands of objects stay linear.
type ObjectSet map[addonsv1alpha1.ObjectReference]bool

// NewObjectSet returns the set of refs.
func NewObjectSet(refs []addonsv1alpha1.ObjectReference) ObjectSet {
	s := make(ObjectSet, len(refs))
	for _, ref := range refs {
		s.Add(ref)
	}
	return s
}

// Add puts ref in the set.
func (s ObjectSet) Add(ref addonsv1alpha1.ObjectReference) {
	ref.Version = ""
	s[ref] = true
}

// Has reports whether the set holds ref, in any API version.
func (s ObjectSet) Has(ref addonsv1alpha1.ObjectReference) bool {
	ref.Version = ""
	return s[ref]
}

// StaleObjects returns the entries of previous that desired no longer contains.
func StaleObjects(previous, desired []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	keep := NewObjectSet(desired)
	var stale []addonsv1alpha1.ObjectReference
	for _, p := range previous {
		if !keep.Has(p) {
			stale = append(stale, p)
		}
	}
	return stale
}

// MergeInventory returns desired plus the entries of extra it lacks. When applied is not
// nil, desired entries count only if they were applied.
func MergeInventory(extra, desired []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]Written) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, d := range desired {
		if _, ok := applied[d]; applied == nil || ok {
			out = append(out, d)
		}
	}
	return UnionObjects(out, extra)
}

func ptrTo[T any](v T) *T { return &v }

// UnionObjects returns a plus the entries of b it lacks.
func UnionObjects(a, b []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	out := slices.Clone(a)
	seen := NewObjectSet(a)
	for _, ref := range b {
		if !seen.Has(ref) {
			seen.Add(ref)
			out = append(out, ref)
		}
	}
	return out
}
