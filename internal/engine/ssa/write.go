package ssa

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// applyOne server-side applies one object and reports whether it had to be re-created:
// an object whose immutable fields change is deleted and created again when the request
// or the object's AnnotationRecreate allows it.
// An existing object's excluded fields are released first and then left out.
func (w *stageWriter) applyOne(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	if paths := w.req.Excluded[RefOf(u)]; len(paths) > 0 && w.live[RefOf(u)].exists {
		if err := w.release(ctx, u, paths); err != nil {
			return false, err
		}
		*u = *Without(u, paths)
	}
	if w.absent[RefOf(u)] {
		u.SetResourceVersion(absentResourceVersion)
	}
	w.Sealer.sealObject(u)
	err := w.applyRetryingBindings(ctx, u)
	fields := immutableFields(err)
	if fields == "" {
		return false, err
	}
	ref := RefOf(u)
	if !w.req.RecreateOnImmutable && u.GetAnnotations()[addonsv1alpha1.AnnotationRecreate] != addonsv1alpha1.RecreateOnImmutable {
		return false, &ImmutableError{Ref: ref, Fields: fields, Err: err}
	}
	log.FromContext(ctx).Info("Re-creating object to change immutable fields", "object", ref.String(), "fields", fields)
	if err := w.recreate(ctx, u); err != nil {
		return false, fmt.Errorf("re-creating %s to change %s: %w", ref, fields, err)
	}
	return true, w.applyRetryingBindings(ctx, u)
}

// bindingRetryTimeout bounds the retries of a binding whose role the API server's RBAC
// cache has not seen yet.
const bindingRetryTimeout = 10 * time.Second

// recreate deletes the live object and waits until it is gone.
func (m *Manager) recreate(ctx context.Context, u *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	live.SetNamespace(u.GetNamespace())
	live.SetName(u.GetName())
	if err := m.Client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := m.Reader.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live.DeepCopy())
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// applyRetryingBindings server-side applies u, retrying a binding briefly on NotFound.
func (m *Manager) applyRetryingBindings(ctx context.Context, u *unstructured.Unstructured) error {
	applyOnce := func() error { return m.applyForMetadata(ctx, u) }
	if StageOf(u.GroupVersionKind().Group, u.GetKind()) != StageBindings {
		return applyOnce()
	}
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bindingRetryTimeout, true, func(context.Context) (bool, error) {
		err = applyOnce()
		return !apierrors.IsNotFound(err), nil
	})
	return err
}

// applyForMetadata server-side applies u and asks only for the metadata of the result:
// the engine reads nothing else from it (the resource version and generation, for drift
// and echoes), and the API server encodes and the manager decodes a fraction of the
// object. On success, u carries the applied object's resource version, generation and
// UID.
func (m *Manager) applyForMetadata(ctx context.Context, u *unstructured.Unstructured) error {
	body, err := u.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encoding %s: %w", RefOf(u), err)
	}
	applied := &metav1.PartialObjectMetadata{}
	applied.SetGroupVersionKind(u.GroupVersionKind())
	applied.SetNamespace(u.GetNamespace())
	applied.SetName(u.GetName())
	opts := []client.PatchOption{client.FieldOwner(FieldManager), client.ForceOwnership}
	if builtIn(u.GroupVersionKind()) {
		opts = append(opts, client.FieldValidation(metav1.FieldValidationIgnore))
	}
	if err := m.Client.Patch(ctx, applied, client.RawPatch(types.ApplyPatchType, body), opts...); err != nil {
		return err
	}
	u.SetResourceVersion(applied.GetResourceVersion())
	u.SetGeneration(applied.GetGeneration())
	u.SetUID(applied.GetUID())
	return nil
}

// builtIn reports whether gvk is a kind compiled into the API server, as client-go's
// scheme lists them. An apply of such a kind is sent with fieldValidation=Ignore: the API
// server refuses an unknown field in it whatever the directive ("field not declared in
// schema"), and a body encoded from a map cannot repeat a field, so the only effect of
// the default (Warn) would be a second, strict YAML decoding of every apply on the API
// server. Custom resources keep the API server's default: what it does with their unknown
// fields depends on their schema.
func builtIn(gvk schema.GroupVersionKind) bool {
	return clientgoscheme.Scheme.Recognizes(gvk)
}

// drifted reports whether applying unchanged manifests changed the object: it was
// missing, its spec generation moved, or (for kinds without a generation, such as
// ConfigMaps) its resource version moved.
func drifted(before liveInfo, after *unstructured.Unstructured) bool {
	switch {
	case !before.exists:
		return true
	case after.GetGeneration() != 0:
		return after.GetGeneration() != before.generation
	default:
		return after.GetResourceVersion() != before.resourceVersion
	}
}
