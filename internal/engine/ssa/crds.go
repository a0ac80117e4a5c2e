package ssa

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// StoredVersionError refuses an apply whose CustomResourceDefinition no longer lists a
// version that the API server still stores custom resources at (status.storedVersions):
// those resources could no longer be read. Nothing is written. The versions come back
// in the package, or the stored resources are migrated and the version removed from
// status.storedVersions, before the package applies.
type StoredVersionError struct {
	// CRD is the CustomResourceDefinition's name.
	CRD string
	// Dropped are the stored versions the new definition leaves out.
	Dropped []string
}

// Error implements error.
func (e *StoredVersionError) Error() string {
	return fmt.Sprintf("CustomResourceDefinition %s drops the version %s, which the API server still stores custom resources at "+
		"(status.storedVersions); migrate them to a version the package serves and remove the old one from status.storedVersions first",
		e.CRD, strings.Join(e.Dropped, ", "))
}

// checkStoredVersions reads, past the cache, the live definition of each
// CustomResourceDefinition of crds, and refuses with a StoredVersionError the first one
// that would drop a stored version. An upgrade that keeps every stored version, or a new
// CRD, passes.
func (m *Manager) checkStoredVersions(ctx context.Context, crds []*unstructured.Unstructured) error {
	for _, u := range crds {
		if u.GetKind() != "CustomResourceDefinition" || u.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		err := m.Reader.Get(ctx, types.NamespacedName{Name: u.GetName()}, live)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue
		case err != nil:
			return fmt.Errorf("reading CustomResourceDefinition %s: %w", u.GetName(), err)
		}
		stored, _, _ := unstructured.NestedStringSlice(live.Object, "status", "storedVersions")
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		var names []string
		for _, v := range versions {
			if v, ok := v.(map[string]any); ok {
				if name, ok := v["name"].(string); ok {
					names = append(names, name)
				}
			}
		}
		var dropped []string
		for _, s := range stored {
			if !slices.Contains(names, s) {
				dropped = append(dropped, s)
			}
		}
		if len(dropped) > 0 {
			return &StoredVersionError{CRD: u.GetName(), Dropped: dropped}
		}
	}
	return nil
}
