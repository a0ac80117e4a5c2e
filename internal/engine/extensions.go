package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/extensions"
)

// Extensions are the second implementation of hooks: programs an admin registers with an
// AddonExtension, called over HTTPS after the definition's own hooks at the same points
// (Validate in validate, Render in render, BeforeUpgrade in before-apply, AfterReady in
// health, BeforeDelete before Cleanup). What they answer becomes an outcome as a Go
// hook's result does; what Render returns passes the gates of spec.patches.

// extensionNotReadyRetry is how soon an add-on held by an extension that is not
// Discovered looks again (a status change of the AddonExtension reconciles it sooner).
const extensionNotReadyRetry = 30 * time.Second

// extensionIgnoredRetry is how soon an add-on that went on without an extension that
// failed (failurePolicy Ignore) calls it again.
const extensionIgnoredRetry = time.Minute

// ignoredNote records that a call to an extension with failurePolicy Ignore failed: the
// add-on went on, and is marked Degraded with reason ExtensionIgnored.
func (st *reconcileState) ignoredNote(message string) {
	st.ignored = append(st.ignored, message)
}

// withIgnored marks out Degraded when extensions were ignored during the reconcile, unless
// out already says something worse, and asks again within extensionIgnoredRetry, so the
// extension is called again once it answers.
func (st *reconcileState) withIgnored(out outcome) outcome {
	if len(st.ignored) == 0 || out.degraded != nil || (out.class != classReady && out.class != classProgressing) {
		return out
	}
	if out.requeueAfter == 0 || out.requeueAfter > extensionIgnoredRetry {
		out.requeueAfter = extensionIgnoredRetry
	}
	return out.withDegraded(addonsv1alpha1.ReasonExtensionIgnored, strings.Join(st.ignored, "; "))
}

// extensionTargets returns the extensions that serve hook for the add-on and can be
// called. One with failurePolicy Fail that cannot (not Discovered, an unusable spec)
// stops the reconcile as Progressing, ExtensionNotReady; one with Ignore is skipped
// with a note.
func (r *Reconciler) extensionTargets(ctx context.Context, st *reconcileState, addon addonsv1alpha1.Addon,
	hook hooksv1alpha1.Hook) ([]extensions.Target, outcome) {
	targets, err := r.opts.Extensions.For(ctx, hook, r.gvk.Kind, addon.GetNamespace())
	if err != nil {
		return nil, failed(addonsv1alpha1.ReasonExtensionNotReady, err)
	}
	callable := targets[:0]
	for _, t := range targets {
		if t.NotReady == "" {
			callable = append(callable, t)
			continue
		}
		message := fmt.Sprintf("the extension %s (%s) cannot be called: %s", t.Name, hook, t.NotReady)
		if t.Ignore {
			r.event(addon, corev1.EventTypeWarning, addonsv1alpha1.ReasonExtensionIgnored, string(hook), "%s; ignored", message)
			st.ignoredNote(message)
			continue
		}
		return nil, progressing(addonsv1alpha1.ReasonExtensionNotReady, message+"; nothing is applied until it is").
			after(extensionNotReadyRetry)
	}
	return callable, proceed()
}

// extensionFailed turns a failed call into an outcome: with failurePolicy Ignore the
// add-on goes on with a note, with Fail it stops, nothing applied, retried with back-off.
// Either way the failure is an event on the add-on.
func (r *Reconciler) extensionFailed(st *reconcileState, addon addonsv1alpha1.Addon, t extensions.Target,
	hook hooksv1alpha1.Hook, err error) outcome {
	reason := addonsv1alpha1.ReasonExtensionUnreachable
	var ce *extensions.CallError
	if errors.As(err, &ce) {
		reason = ce.Reason
	}
	if t.Ignore {
		r.event(addon, corev1.EventTypeWarning, addonsv1alpha1.ReasonExtensionIgnored, string(hook), "%v; ignored", err)
		st.ignoredNote(fmt.Sprintf("%v (%s, ignored)", err, reason))
		return proceed()
	}
	r.event(addon, corev1.EventTypeWarning, reason, string(hook), "%v", err)
	out := failed(reason, err)
	out.message = fmt.Sprintf("%v; nothing was applied", err)
	if hook == hooksv1alpha1.BeforeDelete {
		out.message = fmt.Sprintf("%v; nothing was deleted", err)
	}
	return out
}

// wireAddon is the add-on as extensions see it: the user's own spec.
func (r *Reconciler) wireAddon(addon addonsv1alpha1.Addon) (hooksv1alpha1.Addon, error) {
	return extensions.AddonOf(addon, r.gvk.Kind, r.gvk.GroupVersion().String())
}

// validateByExtensions calls the Validate extensions; a violation refuses the spec.
func (r *Reconciler) validateByExtensions(ctx context.Context, st *reconcileState) outcome {
	targets, out := r.extensionTargets(ctx, st, st.addon, hooksv1alpha1.Validate)
	if out.stop || len(targets) == 0 {
		return out
	}
	addon, err := r.wireAddon(st.stored())
	if err != nil {
		return failed(addonsv1alpha1.ReasonHookFailed, err)
	}
	for _, t := range targets {
		resp, err := r.opts.Extensions.Caller.Validate(ctx, t.Endpoint, addon, st.resolved.Version)
		if err != nil {
			if out := r.extensionFailed(st, st.addon, t, hooksv1alpha1.Validate, err); out.stop {
				return out
			}
			continue
		}
		if len(resp.Violations) > 0 {
			violations := make([]string, 0, len(resp.Violations))
			for _, v := range resp.Violations {
				violations = append(violations, extensions.Truncate(v))
			}
			return refused(addonsv1alpha1.ReasonInvalidSpec, extensions.Truncate(fmt.Sprintf(
				"the extension %s refuses the spec: %s", t.Name, strings.Join(violations, "; "))))
		}
	}
	return proceed()
}

// renderTargets returns the Render extensions of the add-on and the part of the render
// cache key they decide.
func (r *Reconciler) renderTargets(ctx context.Context, st *reconcileState) ([]extensions.Target, string, outcome) {
	targets, out := r.extensionTargets(ctx, st, st.addon, hooksv1alpha1.Render)
	if out.stop || len(targets) == 0 {
		return nil, "", out
	}
	keys := make([]string, 0, len(targets))
	for _, t := range targets {
		keys = append(keys, t.Key)
	}
	return targets, strings.Join(keys, ","), proceed()
}

// renderByExtensions is the transform that hands the objects, after the patches and
// before their placement in namespaces, to each Render extension in turn. An ignored
// failure leaves the objects as they were and keeps the result out of the render cache
// (*uncached), so the next reconcile asks again.
func (r *Reconciler) renderByExtensions(st *reconcileState, targets []extensions.Target, uncached *bool) ObjectTransform {
	return func(ctx context.Context, _ RenderInput, objects *Objects) error {
		if len(targets) == 0 {
			return nil
		}
		addon, err := r.wireAddon(st.stored())
		if err != nil {
			return err
		}
		for _, t := range targets {
			err := r.renderBy(ctx, t, addon, st.resolved.Version, objects)
			if err == nil {
				continue
			}
			var ce *extensions.CallError
			if !errors.As(err, &ce) {
				return err
			}
			if out := r.extensionFailed(st, st.addon, t, hooksv1alpha1.Render, err); out.stop {
				return &extensionStop{out: out}
			}
			*uncached = true
		}
		return nil
	}
}

// extensionStop carries a Render extension's failure out of the transforms, as the
// outcome render returns.
type extensionStop struct{ out outcome }

func (e *extensionStop) Error() string { return e.out.message }

// renderBy calls one Render extension and replaces objects with what it returned, once
// that passed the checks of checkRendered.
func (r *Reconciler) renderBy(ctx context.Context, t extensions.Target, addon hooksv1alpha1.Addon, version string,
	objects *Objects) error {
	raw := make([]runtime.RawExtension, 0, len(objects.Items))
	for _, o := range objects.Items {
		data, err := o.JSON()
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", o.Kind, o.GetName(), err)
		}
		raw = append(raw, runtime.RawExtension{Raw: data})
	}
	resp, err := r.opts.Extensions.Caller.Render(ctx, t.Endpoint, addon, version, raw)
	if err != nil {
		return err
	}
	items, err := r.checkRendered(objects, resp.Objects)
	if err != nil {
		extensions.CountRefused(t.Name, string(hooksv1alpha1.Render))
		return &extensions.CallError{Extension: t.Name, Hook: string(hooksv1alpha1.Render),
			Reason: extensions.FailureRefused, Err: err}
	}
	objects.Items = items
	return nil
}

// objectKey identifies an object of a package before its placement: group, kind,
// namespace (as the package or a patch set it) and name.
type objectKey struct {
	gk              schema.GroupKind
	namespace, name string
}

func (k objectKey) String() string {
	if k.namespace == "" {
		return fmt.Sprintf("%s %s", k.gk.Kind, k.name)
	}
	return fmt.Sprintf("%s %s/%s", k.gk.Kind, k.namespace, k.name)
}

// checkRendered checks what a Render extension returned against what it was given:
// every object must come back, in its namespace; an added object must be of a kind the
// add-on may have and name no namespace (it goes where the add-on's objects go). The
// rest of the gates (AddonPolicy, the identity the add-on writes as, ownership) check
// the result after render, as they check every rendered object.
func (r *Reconciler) checkRendered(given *Objects, returned []runtime.RawExtension) ([]*Object, error) {
	want := map[objectKey]bool{}
	byName := map[objectKey]string{}
	for _, o := range given.Items {
		k := objectKey{gk: o.GroupKind(), namespace: o.GetNamespace(), name: o.GetName()}
		want[k] = true
		byName[objectKey{gk: k.gk, name: k.name}] = k.namespace
	}
	items := make([]*Object, 0, len(returned))
	seen := map[objectKey]bool{}
	for i, raw := range returned {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(raw.Raw, &u.Object); err != nil {
			return nil, fmt.Errorf("object %d of the answer is not a JSON object: %w", i, err)
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("object %d of the answer lacks an apiVersion, a kind or a name", i)
		}
		gvk := u.GroupVersionKind()
		k := objectKey{gk: gvk.GroupKind(), namespace: u.GetNamespace(), name: u.GetName()}
		if seen[k] {
			return nil, fmt.Errorf("the answer holds %s twice", k)
		}
		seen[k] = true
		if !want[k] {
			if ns, ok := byName[objectKey{gk: k.gk, name: k.name}]; ok && ns != k.namespace {
				return nil, movedError(k, ns)
			}
			if !r.watches(gvk) {
				return nil, fmt.Errorf("the answer adds %s, a kind the %s add-on may not have", k, r.gvk.Kind)
			}
			if k.namespace != "" {
				return nil, fmt.Errorf("the answer adds %s, which names a namespace: an added object goes where the add-on's objects go", k)
			}
		}
		o, err := newObject(u)
		if err != nil {
			return nil, fmt.Errorf("object %s of the answer: %w", k, err)
		}
		items = append(items, o)
	}
	for k := range want {
		if !seen[k] {
			return nil, fmt.Errorf("the answer leaves out %s", k)
		}
	}
	return items, nil
}

// movedError says how an answer changed the namespace of the object k, which was given
// in namespace from.
func movedError(k objectKey, from string) error {
	switch {
	case from == "":
		return fmt.Errorf("the answer sets the namespace of %s %s to %q: the add-on's placement decides it", k.gk.Kind, k.name, k.namespace)
	case k.namespace == "":
		return fmt.Errorf("the answer removes the namespace %q of %s %s", from, k.gk.Kind, k.name)
	}
	return fmt.Errorf("the answer moves %s %s from namespace %q to %q", k.gk.Kind, k.name, from, k.namespace)
}

// holdByExtensions calls the extensions of a blocking hook (BeforeUpgrade, AfterReady,
// BeforeDelete) in turn; the first that holds stops the reconcile with class and reason.
func (r *Reconciler) holdByExtensions(ctx context.Context, st *reconcileState, addon addonsv1alpha1.Addon,
	hook hooksv1alpha1.Hook, class conditionClass, reason string,
	call func(context.Context, *extensions.Endpoint, hooksv1alpha1.Addon) (extensions.Hold, error)) outcome {
	targets, out := r.extensionTargets(ctx, st, addon, hook)
	if out.stop || len(targets) == 0 {
		return out
	}
	wire, err := r.wireAddon(addon)
	if err != nil {
		return failed(addonsv1alpha1.ReasonHookFailed, err)
	}
	for _, t := range targets {
		hold, err := call(ctx, t.Endpoint, wire)
		if err != nil {
			if out := r.extensionFailed(st, addon, t, hook, err); out.stop {
				return out
			}
			continue
		}
		if hold.RetryAfter > 0 {
			message := fmt.Sprintf("the extension %s holds the add-on (%s): %s; it is asked again in %s", t.Name, hook,
				hold.Message, hold.RetryAfter)
			r.event(addon, corev1.EventTypeNormal, reason, string(hook), "%s", message)
			return outcome{stop: true, class: class, reason: reason, message: message, requeueAfter: hold.RetryAfter}
		}
	}
	return proceed()
}

// beforeUpgradeByExtensions calls the BeforeUpgrade extensions.
func (r *Reconciler) beforeUpgradeByExtensions(ctx context.Context, st *reconcileState, from, to string) outcome {
	if r.opts.Extensions == nil {
		return proceed()
	}
	caller := r.opts.Extensions.Caller
	return r.holdByExtensions(ctx, st, st.stored(), hooksv1alpha1.BeforeUpgrade, classProgressing,
		addonsv1alpha1.ReasonUpgradeBlocked,
		func(ctx context.Context, e *extensions.Endpoint, addon hooksv1alpha1.Addon) (extensions.Hold, error) {
			return caller.BeforeUpgrade(ctx, e, addon, from, to)
		})
}

// afterReadyByExtensions calls the AfterReady extensions.
func (r *Reconciler) afterReadyByExtensions(ctx context.Context, st *reconcileState) outcome {
	if r.opts.Extensions == nil {
		return proceed()
	}
	caller := r.opts.Extensions.Caller
	version := st.resolved.Version
	return r.holdByExtensions(ctx, st, st.stored(), hooksv1alpha1.AfterReady, classProgressing,
		addonsv1alpha1.ReasonNotServing,
		func(ctx context.Context, e *extensions.Endpoint, addon hooksv1alpha1.Addon) (extensions.Hold, error) {
			return caller.AfterReady(ctx, e, addon, version)
		})
}

// beforeDeleteByExtensions calls the BeforeDelete extensions of an add-on being deleted.
func (r *Reconciler) beforeDeleteByExtensions(ctx context.Context, obj addonsv1alpha1.Addon) outcome {
	if r.opts.Extensions == nil {
		return proceed()
	}
	caller := r.opts.Extensions.Caller
	version := obj.GetAddonStatus().AppliedVersion
	st := &reconcileState{addon: obj}
	out := r.holdByExtensions(ctx, st, obj, hooksv1alpha1.BeforeDelete, classDeleting, addonsv1alpha1.ReasonDeletionBlocked,
		func(ctx context.Context, e *extensions.Endpoint, addon hooksv1alpha1.Addon) (extensions.Hold, error) {
			return caller.BeforeDelete(ctx, e, addon, version)
		})
	// Whatever holds a deletion (an extension that holds, fails or is not ready yet) shows
	// as the deletion it holds.
	if out.stop {
		out.class = classDeleting
	}
	return out
}
