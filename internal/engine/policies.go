package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	"github.com/kaddons/kaddons/internal/policy"
)

// PolicyChecker decides, with the AddonPolicies of the operator's namespace, whether an
// add-on may be applied. Without any AddonPolicy, the add-ons of trusted namespaces are
// permitted and all others refused.
type PolicyChecker struct {
	// Namespace is where AddonPolicies count: the operator's own namespace.
	Namespace string
	// Policies reads the AddonPolicies (the manager's cache).
	Policies client.Reader
	// Namespaces reads the metadata of every namespace (a cache of their labels).
	Namespaces client.Reader
}

// Permit is a PermitFunc.
func (c *PolicyChecker) Permit(ctx context.Context, req PermitRequest) (string, error) {
	policies := &configv1alpha1.AddonPolicyList{}
	if err := c.Policies.List(ctx, policies, client.InNamespace(c.Namespace)); err != nil {
		return "", fmt.Errorf("listing the AddonPolicies of %s: %w", c.Namespace, err)
	}
	var nsLabels map[string]string
	if len(policies.Items) > 0 {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := c.Namespaces.Get(ctx, client.ObjectKey{Name: req.Addon.GetNamespace()}, ns); err != nil {
			return "", fmt.Errorf("reading namespace %s: %w", req.Addon.GetNamespace(), err)
		}
		nsLabels = ns.GetLabels()
	}
	d := policy.Evaluate(policies.Items, policy.Request{
		Namespace:        req.Addon.GetNamespace(),
		NamespaceLabels:  nsLabels,
		Trusted:          req.Trusted,
		PolicyNamespace:  c.Namespace,
		Kind:             req.Kind,
		Channel:          req.Channel,
		Version:          req.Version,
		TargetNamespace:  req.TargetNamespace,
		ObjectNamespaces: req.ObjectNamespaces,
		HasPatches:       len(req.Addon.PatchSpec().Patches) > 0,
		PatchKinds:       req.PatchKinds,
		FreeFormFields:   req.FreeFormFields,
		Source:           req.Source,
	})
	if d.Permitted {
		return "", nil
	}
	return d.Message, nil
}
