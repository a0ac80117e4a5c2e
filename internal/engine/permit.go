package engine

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/patches"
)

// PermitRequest describes an add-on that asks to be applied: every input that decides
// what it writes.
type PermitRequest struct {
	// Addon is the add-on.
	Addon addonsv1alpha1.Addon
	// Kind is the add-on's kind, such as CoreDNS.
	Kind string
	// Channel is the channel its version comes from; empty when it sets spec.version
	// (with or without spec.channel).
	Channel string
	// Version is the package version it resolved to: the one that will be applied, the
	// version a failed upgrade rolls back to included.
	Version string
	// Trusted is true when the add-on's namespace is one the operator trusts
	// (Settings.Tenancy): its add-ons are applied with the operator's own identity unless
	// they name a ServiceAccount.
	Trusted bool
	// TargetNamespace is where its namespaced objects go: spec.targetNamespace, or the
	// definition's default target namespace, or the add-on's own namespace.
	TargetNamespace string
	// ObjectNamespaces are the namespaces its rendered objects write to (each namespaced
	// object's namespace and each Namespace object's name), sorted; empty in the check
	// before render. The check after render (admit) fills them in.
	ObjectNamespaces []string
	// PatchKinds are the kinds of the objects its spec.patches target, one per patch; ""
	// for a patch whose kind cannot be read (render refuses such a patch).
	PatchKinds []string
	// FreeFormFields are the paths of the definition's free-form fields (besides
	// spec.patches) that the add-on sets, such as spec.corefile.
	FreeFormFields []string
	// Source is the AddonSource the add-on names in spec.sourceRef; empty for the
	// built-in packages.
	Source string
}

// PermitFunc decides whether an add-on may be applied. It returns a message naming the
// rule that refused it, or "" when it is permitted.
type PermitFunc func(ctx context.Context, req PermitRequest) (refused string, err error)

// permit asks Options.Permit whether the add-on may be applied at the version resolve
// chose (after pinVersion, so a rolled-back version is checked too), into its target
// namespace, with its patches and free-form fields. A refused add-on is Stalled with
// reason NotPermitted; nothing of it is applied or pruned, and what runs keeps running
// until an admin changes a policy or the add-on.
func (r *Reconciler) permit(ctx context.Context, st *reconcileState) outcome {
	return r.checkPermit(ctx, st, nil)
}

// admit asks Options.Permit again once the package is rendered, with the namespaces the
// rendered objects write to: a package may pin an object to a namespace of its own, and
// a transform or patch may move one, so the target namespace alone does not say where an
// add-on writes. A refusal is Stalled with reason NotPermitted, as permit's.
func (r *Reconciler) admit(ctx context.Context, st *reconcileState) outcome {
	if st.rendered.objects == nil {
		return proceed()
	}
	return r.checkPermit(ctx, st, objectNamespaces(st.rendered.objects.Items))
}

// objectNamespaces returns the namespaces objects write to: each namespaced object's
// namespace and each Namespace object's name, sorted and unique.
func objectNamespaces(objects []*Object) []string {
	var namespaces []string
	for _, o := range objects {
		ns := o.GetNamespace()
		if o.Group == "" && o.Kind == kindNamespace {
			ns = o.GetName()
		}
		if ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	slices.Sort(namespaces)
	return namespaces
}

// checkPermit asks Options.Permit whether the add-on may be applied, with the namespaces
// its rendered objects write to when they are known.
func (r *Reconciler) checkPermit(ctx context.Context, st *reconcileState, namespaces []string) outcome {
	if r.opts.Permit == nil {
		return proceed()
	}
	req, err := r.permitRequest(st)
	req.ObjectNamespaces = namespaces
	if err == nil {
		var refusal string
		if refusal, err = r.opts.Permit(ctx, req); err == nil && refusal != "" {
			return refused(addonsv1alpha1.ReasonNotPermitted, refusal)
		}
	}
	if err != nil {
		out := failed(addonsv1alpha1.ReasonNotPermitted, fmt.Errorf("evaluating the add-on policies: %w", err))
		out.message = err.Error()
		return out
	}
	return proceed()
}

// permitRequest gathers what the policy decides on: the add-on as stored, so that what
// the Default hook filled in never counts as set by the user.
func (r *Reconciler) permitRequest(st *reconcileState) (PermitRequest, error) {
	addon := st.stored()
	specPatches := patchesOf(addon)
	kinds := make([]string, 0, len(specPatches))
	for i, raw := range specPatches {
		kind := ""
		if patch, err := patches.Parse(i, raw); err == nil {
			kind = patch.GetKind()
		}
		kinds = append(kinds, kind)
	}
	freeForm, err := setFields(addon, r.def.FreeFormFields)
	if err != nil {
		return PermitRequest{}, err
	}
	return PermitRequest{
		Addon:           addon,
		Kind:            r.gvk.Kind,
		Channel:         st.channel,
		Version:         st.resolved.Version,
		Trusted:         st.settings.Tenancy.Trusts(addon.GetNamespace()),
		TargetNamespace: r.def.TargetNamespace(addon),
		PatchKinds:      kinds,
		FreeFormFields:  freeForm,
		Source:          addon.GetAddonSpec().SourceRef,
	}, nil
}

// setFields returns those of paths (spec.corefile) that addon sets to something other
// than the zero value. A path the add-on's type does not have is never set (the registry
// test checks every declared path against the CRD).
func setFields(addon addonsv1alpha1.Addon, paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(addon)
	if err != nil {
		return nil, fmt.Errorf("reading the free-form fields of the add-on: %w", err)
	}
	var set []string
	for _, path := range paths {
		v, found, err := unstructured.NestedFieldNoCopy(content, strings.Split(path, ".")...)
		if err == nil && found && v != nil && !reflect.ValueOf(v).IsZero() && !isEmptyCollection(v) {
			set = append(set, path)
		}
	}
	return set, nil
}

// isEmptyCollection reports whether v is an empty map or slice.
func isEmptyCollection(v any) bool {
	switch c := v.(type) {
	case map[string]any:
		return len(c) == 0
	case []any:
		return len(c) == 0
	}
	return false
}
