package ssa

import (
	"context"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// waitEstablished waits until the CRDs of the package are served, so that custom
// resources of the same package can be applied right after.
func (m *Manager) waitEstablished(ctx context.Context, crds []*unstructured.Unstructured) error {
	for _, o := range crds {
		name := o.GetName()
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitTimeout, true,
			func(ctx context.Context) (bool, error) {
				crd := &unstructured.Unstructured{}
				crd.SetGroupVersionKind(o.GroupVersionKind())
				if err := m.Reader.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
					return false, client.IgnoreNotFound(err)
				}
				res, err := kstatus.Compute(crd)
				if err != nil {
					return false, err
				}
				return res.Status == kstatus.CurrentStatus, nil
			})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not established: %w", name, err)
		}
	}
	return nil
}

// CacheCatchUp bounds how long health waits for the informer cache to show the objects
// just applied. The watch usually delivers them within milliseconds; judging health from
// the older copies instead would report them as not yet observed, and write a status that
// the next reconcile takes back.
const CacheCatchUp = 2 * time.Second

// ShownBy reports whether live, a cached copy, shows the write w or a later change: its
// resource version is not older than the one the write left. Resource versions of one
// resource compare as integers (CompareResourceVersion); where one does not parse, the
// generation decides.
func (w Written) ShownBy(live metav1.Object) bool {
	if w.ResourceVersion != "" {
		if cmp, err := resourceversion.CompareResourceVersion(live.GetResourceVersion(), w.ResourceVersion); err == nil {
			return cmp >= 0
		}
	}
	return live.GetGeneration() >= w.Generation
}

// WaitForCache waits, at most timeout, until c's cache shows every write of applied
// (Written.ShownBy), and returns the writes it still does not show (an older copy, or
// none). It reads only the metadata, so it reads kinds the scheme knows as Go
// types, without a copy: typedReads then hands out the cached struct rather than
// converting it to unstructured on every poll.
func WaitForCache(ctx context.Context, c client.Client, applied map[addonsv1alpha1.ObjectReference]Written,
	timeout time.Duration) map[addonsv1alpha1.ObjectReference]Written {
	if len(applied) == 0 {
		return nil
	}
	// Each object is read until it has caught up once, not on every poll.
	behind := maps.Clone(applied)
	caughtUp := func(ctx context.Context) (bool, error) {
		for ref, w := range behind {
			live := TypedPrototype(c.Scheme(), ref.GroupVersionKind())
			// Only the metadata is read: the cache's own object needs no copy.
			err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live, client.UnsafeDisableDeepCopy)
			if err != nil || !w.ShownBy(live) {
				return false, nil
			}
			delete(behind, ref)
		}
		return true, nil
	}
	// A timeout is no error: health then reports what the cache shows.
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, timeout, true, caughtUp)
	return behind
}
