package engine

import (
	"context"
	"fmt"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// PermitRequest describes an add-on that asks to be applied.
type PermitRequest struct {
	// Addon is the add-on.
	Addon addonsv1alpha1.Addon
	// Channel is the channel its version comes from; empty when it pins spec.version.
	Channel string
	// Version is the package version it resolved to.
	Version string
	// Trusted is true when the add-on's namespace is one the operator trusts
	// (Settings.Tenancy): its add-ons are applied with the operator's own identity unless
	// they name a ServiceAccount.
	Trusted bool
}

// PermitFunc decides whether an add-on may be applied. It returns a message naming the
// rule that refused it, or "" when it is permitted.
type PermitFunc func(ctx context.Context, req PermitRequest) (refused string, err error)

// permit asks Options.Permit whether the add-on may be applied at the version resolve
// chose (a rolled-back version included). A refused add-on is Stalled with reason
// NotPermitted; nothing of it is applied or pruned, and what runs keeps running until an
// admin changes a policy or the add-on.
func (r *Reconciler) permit(ctx context.Context, st *reconcileState) outcome {
	if r.opts.Permit == nil {
		return proceed()
	}
	refusal, err := r.opts.Permit(ctx, PermitRequest{Addon: st.addon, Channel: st.channel, Version: st.resolved.Version,
		Trusted: st.settings.Tenancy.Trusts(st.addon.GetNamespace())})
	if err != nil {
		out := failed(addonsv1alpha1.ReasonNotPermitted, fmt.Errorf("evaluating the add-on policies: %w", err))
		out.message = err.Error()
		return out
	}
	if refusal != "" {
		return refused(addonsv1alpha1.ReasonNotPermitted, refusal)
	}
	return proceed()
}
