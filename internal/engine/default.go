package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// defaulted is what the Default hook produced for the render.
type defaulted struct {
	// inputs are the hook's HookResult.Inputs, handed to the transforms as
	// RenderInput.Inputs.
	inputs any
	// key stands for the spec the hook filled in and its inputs in the render cache key:
	// their JSON, empty without a Default hook.
	key string
}

// defaults is the phase that runs the Default hook, after impersonate and before render,
// on the reconcile's copy of the add-on, reading as the identity the add-on acts as. A
// hold applies nothing: Progressing (DependencyNotReady unless the hook names a reason),
// or Stalled when it is Terminal (InvalidSpec unless it names one), with the hook's
// message as it is.
func (r *Reconciler) defaults(ctx context.Context, st *reconcileState) outcome {
	if r.def.Hooks.Default == nil {
		return proceed()
	}
	stored := st.stored()
	if stored == st.addon {
		// Render, or a state a test built: keep the spec as read before the hook changes it.
		stored = st.addon.DeepCopyObject().(addonsv1alpha1.Addon)
		st.asStored = stored
	}
	res := r.def.Hooks.Default(ctx, r.hookRequest(st))
	if res.Holds() {
		return defaultHold(res)
	}
	if err := sharedSpecUnchanged(stored, st.addon); err != nil {
		return hookOutcome(hookDefault, HookResult{Err: err}, classProgressing, "")
	}
	key, err := defaultedKey(st.addon, res.Inputs)
	if err != nil {
		return hookOutcome(hookDefault, HookResult{Err: fmt.Errorf("encoding what it filled in: %w", err)}, classProgressing, "")
	}
	st.defaulted = defaulted{inputs: res.Inputs, key: key}
	return proceed()
}

// defaultHold is the outcome of a Default hook that holds the reconcile (Hooks.Default).
func defaultHold(res HookResult) outcome {
	reason := addonsv1alpha1.ReasonDependencyNotReady
	if res.Terminal {
		reason = addonsv1alpha1.ReasonInvalidSpec
	}
	out := hookOutcome(hookDefault, res, classProgressing, reason)
	if res.Err != nil {
		return out
	}
	if res.Message != "" {
		out.message = res.Message
	}
	if !res.Terminal {
		// It waits for a change of the add-on or of one it follows, unless it says when.
		out.requeueAfter = res.RetryAfter
	}
	return out
}

// sharedSpecUnchanged refuses a Default hook that changed the spec fields every add-on
// shares (version, channel, patches, AddonSpec): the phases before it acted on them.
func sharedSpecUnchanged(stored, addon addonsv1alpha1.Addon) error {
	if !equality.Semantic.DeepEqual(stored.CommonSpec(), addon.CommonSpec()) ||
		!equality.Semantic.DeepEqual(stored.PatchSpec(), addon.PatchSpec()) ||
		!equality.Semantic.DeepEqual(stored.GetAddonSpec(), addon.GetAddonSpec()) {
		return errors.New("it changed the spec fields every add-on shares (version, channel, patches or the " +
			"lifecycle settings), which it may not fill in")
	}
	return nil
}

// defaultedKey is the JSON of addon's spec, as the Default hook left it, and of the
// inputs it returned.
func defaultedKey(addon addonsv1alpha1.Addon, inputs any) (string, error) {
	spec, err := addonsv1alpha1.SpecJSON(addon)
	if err != nil {
		return "", err
	}
	key, err := json.Marshal(struct {
		Spec   json.RawMessage `json:"spec"`
		Inputs any             `json:"inputs,omitempty"`
	}{spec, inputs})
	return string(key), err
}
