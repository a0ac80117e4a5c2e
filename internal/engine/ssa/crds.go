package ssa

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StoredVersionError refuses an apply whose CustomResourceDefinition would cut custom
// resources off from their clients: it drops a version that the API server still stores
// custom resources at (status.storedVersions), which could then no longer be read, or it
// stops serving a version (leaves it out of spec.versions, or sets served: false) while
// objects of the definition exist, whose clients at that version would then fail. Nothing
// is written. Request.AllowCRDVersionRemoval skips both checks.
type StoredVersionError struct {
	// CRD is the CustomResourceDefinition's name.
	CRD string
	// Dropped are the stored versions the new definition leaves out.
	Dropped []string
	// Unserved are the versions the live definition serves and the new one does not;
	// set only when Dropped is empty.
	Unserved []string
	// Objects is how many objects of the definition exist (at least that many when
	// AtLeast), and Example names one of them (namespace/name, or name), when Unserved
	// is set.
	Objects int64
	AtLeast bool
	Example string
}

// Error implements error.
func (e *StoredVersionError) Error() string {
	if len(e.Dropped) > 0 {
		// The API server itself refuses such a definition (the versions of
		// status.storedVersions must stay in spec.versions): spec.upgrade.
		// allowCRDVersionRemoval could not make it apply, so the message does not offer it.
		return fmt.Sprintf("CustomResourceDefinition %s drops the version %s, which the API server still stores custom resources at "+
			"(status.storedVersions), so they could no longer be read; migrate the stored objects to a version the package keeps "+
			"(read and write back each one) and remove %s from the definition's status.storedVersions first: until then the API "+
			"server refuses the new definition",
			e.CRD, strings.Join(e.Dropped, ", "), strings.Join(e.Dropped, ", "))
	}
	var objects string
	switch {
	case e.Objects == 1 && !e.AtLeast:
		objects = "one object of it exists, " + e.Example
	case e.AtLeast:
		objects = fmt.Sprintf("at least %d objects of it exist, %s among them", e.Objects, e.Example)
	default:
		objects = fmt.Sprintf("%d objects of it exist, %s among them", e.Objects, e.Example)
	}
	return fmt.Sprintf("CustomResourceDefinition %s stops serving the version %s while %s: clients that read or write them at %s "+
		"would fail; move the clients to a version the package serves, then set spec.upgrade.allowCRDVersionRemoval: true "+
		"to apply it anyway",
		e.CRD, strings.Join(e.Unserved, ", "), objects, strings.Join(e.Unserved, ", "))
}

// checkCRDVersions reads, past the cache, the live definition of each
// CustomResourceDefinition of crds, and refuses with a StoredVersionError the first one
// whose new definition drops a stored version, or stops serving a version while objects
// of it exist: one metadata list of at most one object, past the cache, finds whether
// any do. A new CRD, or an upgrade that keeps serving every served version, passes;
// allow (Request.AllowCRDVersionRemoval) passes every one without a read. An error of a
// read is returned as it is (wrapped): it is no refusal, and the apply is retried.
func (m *Manager) checkCRDVersions(ctx context.Context, crds []*unstructured.Unstructured, allow bool) error {
	if allow {
		return nil
	}
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
		change := compareCRDVersions(live, u)
		if len(change.droppedStored) > 0 {
			return &StoredVersionError{CRD: u.GetName(), Dropped: change.droppedStored}
		}
		// A definition that is not Established serves nothing: no client can lose a version.
		if len(change.unserved) == 0 || !crdEstablished(live) {
			continue
		}
		n, atLeast, example, err := m.someObject(ctx, live, listVersion(live, u))
		if err != nil {
			return fmt.Errorf("listing the objects of CustomResourceDefinition %s, to find whether any is left for the version %s "+
				"it stops serving: %w", u.GetName(), strings.Join(change.unserved, ", "), err)
		}
		if n > 0 {
			return &StoredVersionError{CRD: u.GetName(), Unserved: change.unserved, Objects: n, AtLeast: atLeast, Example: example}
		}
	}
	return nil
}

// someObject lists, past the cache and in all namespaces, the metadata of at most one
// object of the live CustomResourceDefinition at version, and returns how many objects
// exist (a lower bound when atLeast: the API server did not count the rest) and the name
// of one. A definition deleted meanwhile has none.
func (m *Manager) someObject(ctx context.Context, live *unstructured.Unstructured, version string) (n int64, atLeast bool, example string, err error) {
	group, _, _ := unstructured.NestedString(live.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(live.Object, "spec", "names", "kind")
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind + "List"})
	if err := m.Reader.List(ctx, list, client.Limit(1)); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, false, "", nil
		}
		return 0, false, "", err
	}
	if len(list.Items) == 0 {
		return 0, false, "", nil
	}
	example = list.Items[0].Name
	if ns := list.Items[0].Namespace; ns != "" {
		example = ns + "/" + example
	}
	n = int64(len(list.Items))
	switch {
	case list.RemainingItemCount != nil:
		n += *list.RemainingItemCount
	case list.Continue != "":
		n, atLeast = n+1, true
	}
	return n, atLeast, example, nil
}

// crdVersionChange is what a new definition of a CustomResourceDefinition does to the
// versions of the live one.
type crdVersionChange struct {
	// unserved are the versions the live definition serves and the new one does not:
	// it leaves them out of spec.versions, or sets served: false.
	unserved []string
	// droppedStored are the versions of the live status.storedVersions that the new
	// definition leaves out of spec.versions.
	droppedStored []string
}

// compareCRDVersions compares the live definition of a CustomResourceDefinition with the
// new one. It reads only the objects.
func compareCRDVersions(live, next *unstructured.Unstructured) crdVersionChange {
	var change crdVersionChange
	liveVersions, nextVersions := crdVersions(live), crdVersions(next)
	for _, v := range liveVersions {
		if !v.served {
			continue
		}
		if i := slices.IndexFunc(nextVersions, func(n crdVersion) bool { return n.name == v.name }); i < 0 || !nextVersions[i].served {
			change.unserved = append(change.unserved, v.name)
		}
	}
	stored, _, _ := unstructured.NestedStringSlice(live.Object, "status", "storedVersions")
	for _, s := range stored {
		if !slices.ContainsFunc(nextVersions, func(n crdVersion) bool { return n.name == s }) {
			change.droppedStored = append(change.droppedStored, s)
		}
	}
	return change
}

// listVersion returns the version to list the live definition's objects at: one that
// both definitions serve, else the live storage version if it is served, else any
// version the live one serves (the API server converts every object to it).
func listVersion(live, next *unstructured.Unstructured) string {
	liveVersions, nextVersions := crdVersions(live), crdVersions(next)
	for _, v := range liveVersions {
		if v.served && slices.ContainsFunc(nextVersions, func(n crdVersion) bool { return n.name == v.name && n.served }) {
			return v.name
		}
	}
	for _, v := range liveVersions {
		if v.served && v.storage {
			return v.name
		}
	}
	for _, v := range liveVersions {
		if v.served {
			return v.name
		}
	}
	return ""
}

// crdVersion is one entry of a CustomResourceDefinition's spec.versions.
type crdVersion struct {
	name            string
	served, storage bool
}

// crdVersions returns the spec.versions of a CustomResourceDefinition.
func crdVersions(crd *unstructured.Unstructured) []crdVersion {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	out := make([]crdVersion, 0, len(versions))
	for _, v := range versions {
		v, ok := v.(map[string]any)
		if !ok {
			continue
		}
		name, _ := v["name"].(string)
		served, _ := v["served"].(bool)
		storage, _ := v["storage"].(bool)
		if name != "" {
			out = append(out, crdVersion{name: name, served: served, storage: storage})
		}
	}
	return out
}

// crdEstablished reports whether the live definition's Established condition is True:
// the API server serves its versions.
func crdEstablished(live *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, c := range conditions {
		if c, ok := c.(map[string]any); ok && c["type"] == "Established" {
			return c["status"] == "True"
		}
	}
	return false
}
