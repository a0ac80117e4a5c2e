package engine

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// Hooks are an add-on author's code at fixed points of the lifecycle the engine runs.
// Every hook is optional, and none of them writes to the cluster through the engine:
// what an add-on applies is still only its rendered package. A hook answers with a
// HookResult, and the engine turns that into an outcome like any phase's, so the one
// summarizer writes the condition. The phase list in docs/architecture.md shows where
// each runs.
type Hooks struct {
	// Validate checks the spec beyond what its schema can say, against the resolved
	// package (a Corefile plugin the version does not have). It runs after resolve,
	// before permit, on every reconcile and in Render. A refusal stops the reconcile as
	// Stalled with the result's reason (InvalidSpec when empty); a spec change reconciles
	// again.
	Validate func(ctx context.Context, req HookRequest) HookResult
	// Default fills in what the add-on's spec leaves empty and the cluster decides (the
	// address of a followed CoreDNS, an existing Corefile to adopt). It runs after
	// impersonate, right before render, on every reconcile and in Render, and reads as
	// the identity the add-on acts as (req.API).
	//
	// It may set the add-on's own typed fields on the reconcile's copy (req.Addon), but
	// not the ones every add-on shares, which the phases before it acted on (version,
	// channel, patches, AddonSpec: changing them fails with HookFailed), and may hand the
	// transforms values that are not spec fields in HookResult.Inputs
	// (RenderInput.Inputs). Neither is written back to the spec, and neither counts for
	// AddonPolicy: permit and admit judge the spec as stored. The spec it filled in and
	// its Inputs, as JSON, are part of the render cache key, so a change in the cluster
	// renders again.
	//
	// A hold stops the reconcile, nothing applied, with the hold's Message as the
	// condition's message: Progressing with the result's reason (DependencyNotReady when
	// empty), asked again when the add-on or one it follows (Definition.Follows) changes,
	// or after RetryAfter when that is set; when Terminal, Stalled (InvalidSpec when
	// empty), asked again after RetryAfter (a minute when zero).
	Default func(ctx context.Context, req HookRequest) HookResult
	// Initialize runs before the add-on's first apply (nothing applied yet: no applied
	// version and an empty inventory), after admit, with the objects about to be
	// applied. A hold stops the reconcile as Progressing with the result's reason
	// (InitializationBlocked when empty), nothing applied, and asks again after
	// RetryAfter.
	Initialize func(ctx context.Context, req HookRequest) HookResult
	// BeforeUpgrade runs before a version other than the applied one is applied
	// (req.From is status.appliedVersion, req.To the resolved version), after admit, with
	// the objects about to be applied, on every reconcile until that version is applied
	// in full. A hold stops the reconcile as Progressing with the result's reason
	// (UpgradeBlocked when empty): nothing is applied, so what runs stays at req.From. It
	// is asked again after RetryAfter. The rollback of a failed upgrade to the last
	// healthy version does not ask: it restores what ran.
	BeforeUpgrade func(ctx context.Context, req HookRequest) HookResult
	// AfterReady runs when every child is healthy and the add-on was not already Ready
	// at this generation and version: once per install, upgrade or spec change, never on
	// a no-op reconcile. A hold keeps the add-on not Ready, Progressing with the result's
	// reason (NotServing when empty), and asks again after RetryAfter.
	AfterReady func(ctx context.Context, req HookRequest) HookResult
	// Cleanup runs when the add-on is deleted, before any child is deleted (or, with
	// deletionPolicy Orphan, handed over). A hold keeps the add-on and every child, with
	// Progressing and the result's reason (DeletionBlocked when empty), and asks again
	// after RetryAfter.
	Cleanup func(ctx context.Context, req HookRequest) HookResult
}

// HookRequest is what a hook is called with.
type HookRequest struct {
	// Addon is the reconcile's copy of the add-on. Only Default may change it (its own
	// typed spec fields); its status is the engine's.
	Addon addonsv1alpha1.Addon
	// Package is the resolved package: the one about to be applied, or, for AfterReady,
	// the one applied. For Cleanup only its Version is set: the applied version.
	Package channels.Resolved
	// TargetNamespace is where the add-on's namespaced objects go
	// (Definition.TargetNamespace).
	TargetNamespace string
	// From and To are the applied and the resolved version, for BeforeUpgrade.
	From, To string
	// Objects are the rendered objects about to be applied (Initialize, BeforeUpgrade)
	// or applied (AfterReady); nil for Validate, Default and Cleanup. Hooks must not
	// change them.
	Objects *Objects
	// Cache reads through the engine's cache (the children kaddons manages and the
	// add-ons). A hook that runs on every reconcile (Validate, Default) must read from
	// here, so a no-op reconcile sends no request.
	Cache client.Reader
	// API reads from the API server directly, as the identity the add-on acts as (its
	// namespace's ServiceAccount outside the trusted namespaces), for Default,
	// Initialize, BeforeUpgrade and AfterReady; nil for Validate and Cleanup, which run
	// before that identity is known or after it is gone. Each read is a request: Default
	// uses it only for what the cache cannot hold, such as an object kaddons does not
	// manage yet (one to adopt).
	API client.Reader
}

// HookResult is a hook's answer. The zero value lets the reconcile go on.
type HookResult struct {
	// Reason is the condition reason when the hook holds the reconcile; empty gives the
	// hook's own (InvalidSpec, InitializationBlocked, UpgradeBlocked, NotServing,
	// DeletionBlocked). It must be a CamelCase word, as every condition reason is.
	Reason string
	// Message says why, for the condition and the event. A result with a Reason or a
	// Message holds the reconcile.
	Message string
	// RetryAfter is when a hold is asked again; zero means a minute, except for a
	// Default hold that is not Terminal, which waits for a change (Hooks.Default).
	// Validate ignores it: its refusal waits for a spec change.
	RetryAfter time.Duration
	// Terminal marks a hold (a result with a Reason or a Message) that only a change of
	// the spec or of the cluster lifts (an existing Corefile that cannot be migrated):
	// the add-on is Stalled rather than Progressing, and asked again after RetryAfter.
	// Validate's refusals are always Stalled, and Cleanup's holds always deleting, so
	// both ignore it.
	Terminal bool
	// Inputs is, for Default, what the transforms read besides the spec
	// (RenderInput.Inputs); it must encode to JSON, as it is part of the render cache
	// key. The other hooks' Inputs are ignored.
	Inputs any
	// Err means the hook could not answer (a read failed): the reconcile stops with
	// HookFailed and is retried with back-off, nothing applied.
	Err error
}

// Hold returns a result that holds the reconcile with reason and a formatted message.
func Hold(reason, format string, args ...any) HookResult {
	return HookResult{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Holds reports whether the result stops the reconcile: it has an Err, a Reason or a
// Message.
func (h HookResult) Holds() bool { return h.Err != nil || h.Reason != "" || h.Message != "" }

// hookRetry is when a hold is asked again when its result does not say.
const hookRetry = time.Minute

// Hook names, as events, metrics and messages name them.
const (
	hookValidate      = "Validate"
	hookDefault       = "Default"
	hookInitialize    = "Initialize"
	hookBeforeUpgrade = "BeforeUpgrade"
	hookAfterReady    = "AfterReady"
	hookCleanup       = "Cleanup"
)

// hookOutcome turns a hook's result into the outcome of the phase that called it:
// proceed when the hook lets the reconcile go on, a failure to retry when it could not
// answer, otherwise a hold of the class the hook's point of the lifecycle gives (Stalled
// rather than Progressing when the result is Terminal).
func hookOutcome(hook string, res HookResult, class conditionClass, defaultReason string) outcome {
	switch {
	case !res.Holds():
		return proceed()
	case res.Err != nil:
		out := failed(addonsv1alpha1.ReasonHookFailed, fmt.Errorf("the %s hook failed: %w", hook, res.Err))
		if class == classDeleting {
			out.class = classDeleting
		}
		return out
	}
	message := fmt.Sprintf("the %s hook holds the add-on: %s", hook, cmp.Or(res.Message, "(no message)"))
	out := outcome{stop: true, class: class, reason: cmp.Or(res.Reason, defaultReason), message: message}
	if class == classStalled {
		// A refusal of the spec waits for a spec change.
		return out
	}
	if res.Terminal && class == classProgressing {
		out.class = classStalled
	}
	out.requeueAfter = cmp.Or(res.RetryAfter, hookRetry)
	return out
}

// validate runs the Validate hook: the definition's, then the extensions'.
func (r *Reconciler) validate(ctx context.Context, st *reconcileState) outcome {
	if r.def.Hooks.Validate != nil {
		req := HookRequest{Addon: st.addon, Package: st.resolved, TargetNamespace: r.def.TargetNamespace(st.addon), Cache: r.client}
		if out := hookOutcome(hookValidate, r.def.Hooks.Validate(ctx, req), classStalled, addonsv1alpha1.ReasonInvalidSpec); out.stop {
			return out
		}
	}
	return r.validateByExtensions(ctx, st)
}

// beforeApply runs Initialize before the first apply, and BeforeUpgrade (the
// definition's, then the extensions') before a change of version, with the objects about
// to be applied.
func (r *Reconciler) beforeApply(ctx context.Context, st *reconcileState) outcome {
	hooks := r.def.Hooks
	status := st.addon.GetAddonStatus()
	req := r.hookRequest(st)
	switch {
	case status.AppliedVersion == "" && status.Inventory.Len() == 0:
		if hooks.Initialize != nil {
			return hookOutcome(hookInitialize, hooks.Initialize(ctx, req), classProgressing, addonsv1alpha1.ReasonInitializationBlocked)
		}
	case status.AppliedVersion != "" && status.AppliedVersion != st.resolved.Version && st.wanted == "":
		req.From, req.To = status.AppliedVersion, st.resolved.Version
		if hooks.BeforeUpgrade != nil {
			out := hookOutcome(hookBeforeUpgrade, hooks.BeforeUpgrade(ctx, req), classProgressing, addonsv1alpha1.ReasonUpgradeBlocked)
			if out.stop {
				return out
			}
		}
		return r.beforeUpgradeByExtensions(ctx, st, req.From, req.To)
	}
	return proceed()
}

// afterReady runs AfterReady (the definition's, then the extensions') when health found
// every child ready and the add-on was not already Ready at this generation and version;
// out is health's ready outcome.
func (r *Reconciler) afterReady(ctx context.Context, st *reconcileState, out outcome) outcome {
	if st.readyVersion == st.resolved.Version {
		return out
	}
	if r.def.Hooks.AfterReady != nil {
		req := r.hookRequest(st)
		if held := hookOutcome(hookAfterReady, r.def.Hooks.AfterReady(ctx, req), classProgressing, addonsv1alpha1.ReasonNotServing); held.stop {
			return held
		}
	}
	if held := r.afterReadyByExtensions(ctx, st); held.stop {
		return held
	}
	return out
}

// cleanup runs, for an add-on being deleted, the BeforeDelete extensions and then the
// definition's Cleanup hook; a hold or a failure keeps every child.
func (r *Reconciler) cleanup(ctx context.Context, obj addonsv1alpha1.Addon) outcome {
	if out := r.beforeDeleteByExtensions(ctx, obj); out.stop {
		return out
	}
	if r.def.Hooks.Cleanup == nil {
		return proceed()
	}
	status := obj.GetAddonStatus()
	req := HookRequest{Addon: obj, Package: channels.Resolved{Version: status.AppliedVersion},
		TargetNamespace: r.def.TargetNamespace(obj), Cache: r.client}
	return hookOutcome(hookCleanup, r.def.Hooks.Cleanup(ctx, req), classDeleting, addonsv1alpha1.ReasonDeletionBlocked)
}

// readyVersion is the version addon has applied when it is Ready at its generation;
// empty when it is not.
func readyVersion(addon addonsv1alpha1.Addon) string {
	status := addon.GetAddonStatus()
	c := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != addon.GetGeneration() {
		return ""
	}
	return status.AppliedVersion
}

// hookRequest is the request of a hook that runs after impersonate: it reads as the
// identity the reconcile acts as, and is shown the rendered objects (none yet for
// Default).
func (r *Reconciler) hookRequest(st *reconcileState) HookRequest {
	return HookRequest{Addon: st.addon, Package: st.resolved, TargetNamespace: r.def.TargetNamespace(st.addon),
		Objects: st.rendered.objects, Cache: r.client, API: r.actingAs(st).live}
}
