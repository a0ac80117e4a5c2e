package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Helpers for add-ons that follow another add-on (Definition.Follows), for their
// Default hook.

// GetAddon reads the add-on ref names (its namespace defaulting to from's) through c into
// into, an empty object of ref's kind.
func GetAddon(ctx context.Context, c client.Reader, from addonsv1alpha1.Addon, ref addonsv1alpha1.AddonReference,
	into addonsv1alpha1.Addon) error {
	return c.Get(ctx, client.ObjectKey{Namespace: RefNamespace(from, ref), Name: ref.Name}, into)
}

// Follow reads the add-on ref names (its namespace defaulting to from's) into into, like
// GetAddon, and returns what a Default hook answers: the zero HookResult once into is
// read; while the add-on does not exist, a hold with reason DependencyNotReady that names
// it and field, the spec field that refers to it, so that the follower waits rather than
// fails; when the read fails, the error as Err.
func Follow(ctx context.Context, c client.Reader, from addonsv1alpha1.Addon, ref addonsv1alpha1.AddonReference,
	field string, into addonsv1alpha1.Addon) HookResult {
	err := GetAddon(ctx, c, from, ref, into)
	switch {
	case apierrors.IsNotFound(err):
		return Hold(addonsv1alpha1.ReasonDependencyNotReady, "waiting for %s %s/%s, named by %s: not found",
			ref.Kind, RefNamespace(from, ref), ref.Name, field)
	case err != nil:
		return HookResult{Err: err}
	}
	return HookResult{}
}

// ServiceAddress returns the cluster IP of the Service named name in addon's inventory,
// read through c (the engine's cache). It returns "" while the Service does not exist
// yet, has no address yet, or is headless.
func ServiceAddress(ctx context.Context, c client.Reader, addon addonsv1alpha1.Addon, name string) (string, error) {
	for _, ref := range addon.GetAddonStatus().Inventory.Objects() {
		if ref.Group != "" || ref.Kind != "Service" || ref.Name != name {
			continue
		}
		svc := &corev1.Service{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, svc)
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", ref, err)
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return "", nil
		}
		return svc.Spec.ClusterIP, nil
	}
	return "", nil
}
