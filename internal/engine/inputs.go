package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// WaitError is returned by a Definition's Inputs when something the add-on follows is
// not there yet. The engine then applies nothing, reports Progressing with reason
// DependencyNotReady and the message, and waits for the followed add-on to change.
type WaitError struct {
	// Message says what the add-on waits for.
	Message string
}

func (e *WaitError) Error() string { return e.Message }

// Waiting returns a WaitError with a formatted message.
func Waiting(format string, args ...any) error {
	return &WaitError{Message: fmt.Sprintf(format, args...)}
}

type inputsKey struct{}

// InputsFrom returns the value the add-on's Definition.Inputs computed for this render,
// or nil when the definition has no Inputs.
func InputsFrom(ctx context.Context) any {
	return ctx.Value(inputsKey{})
}

func withInputs(ctx context.Context, inputs any) context.Context {
	return context.WithValue(ctx, inputsKey{}, inputs)
}

// inputs runs the definition's Inputs and keeps their value and its serialised form,
// which becomes part of the render cache key.
func (r *Reconciler) inputs(ctx context.Context, st *reconcileState) (bool, error) {
	if r.def.Inputs == nil {
		return false, nil
	}
	status := st.addon.GetAddonStatus()
	generation := st.addon.GetGeneration()
	value, err := r.def.Inputs(ctx, r.client, st.addon)
	if err != nil {
		var wait *WaitError
		if errors.As(err, &wait) {
			markWaiting(status, generation, wait.Message)
			return true, nil
		}
		markFailed(status, generation, addonsv1alpha1.ReasonRenderFailed, err.Error())
		return true, fmt.Errorf("reading the inputs of %s: %w", r.gvk.Kind, err)
	}
	key, err := json.Marshal(value)
	if err != nil {
		return true, fmt.Errorf("serialising the inputs of %s: %w", r.gvk.Kind, err)
	}
	st.inputs, st.inputsKey = value, string(key)
	return false, nil
}

// follows reports whether add-on a follows target through its definition's Follows.
func (r *Reconciler) follows(a addonsv1alpha1.Addon, target addonKey) bool {
	if r.def.Follows == nil {
		return false
	}
	for _, ref := range r.def.Follows(a) {
		if r.dependencyKey(a, ref) == target {
			return true
		}
	}
	return false
}

// GetAddon reads the add-on ref names (its namespace defaulting to from's) through c into
// into, an empty object of ref's kind.
func GetAddon(ctx context.Context, c client.Reader, from addonsv1alpha1.Addon, ref addonsv1alpha1.AddonReference,
	into addonsv1alpha1.Addon) error {
	ns := ref.Namespace
	if ns == "" {
		ns = from.GetNamespace()
	}
	return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, into)
}
