package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/policy"
)

// +kubebuilder:rbac:groups=config.kaddons.dev,resources=addonpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=config.kaddons.dev,resources=addonpolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// SetupPolicies registers what AddonPolicies need with mgr (the controller reporting
// their validity, a metadata-only cache of every namespace's labels) and returns the
// engine options that make the add-on controllers obey the policies of namespace ns.
func SetupPolicies(mgr ctrl.Manager, ns string) (engine.PermitFunc, []client.Object, error) {
	namespaces, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the namespace cache: %w", err)
	}
	if err := mgr.Add(namespaces); err != nil {
		return nil, nil, err
	}
	if err := (&AddonPolicyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, nil, fmt.Errorf("setting up the addonpolicy controller: %w", err)
	}
	checker := &PolicyChecker{Namespace: ns, Policies: mgr.GetClient(), Namespaces: namespaces}
	return checker.Permit, []client.Object{&configv1alpha1.AddonPolicy{}}, nil
}

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

// Permit is an engine.PermitFunc.
func (p *PolicyChecker) Permit(ctx context.Context, req engine.PermitRequest) (string, error) {
	policies := &configv1alpha1.AddonPolicyList{}
	if err := p.Policies.List(ctx, policies, client.InNamespace(p.Namespace)); err != nil {
		return "", fmt.Errorf("listing the AddonPolicies of %s: %w", p.Namespace, err)
	}
	var nsLabels map[string]string
	if len(policies.Items) > 0 {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := p.Namespaces.Get(ctx, client.ObjectKey{Name: req.Addon.GetNamespace()}, ns); err != nil {
			return "", fmt.Errorf("reading namespace %s: %w", req.Addon.GetNamespace(), err)
		}
		nsLabels = ns.GetLabels()
	}
	d := policy.Evaluate(policies.Items, policy.Request{
		Namespace:        req.Addon.GetNamespace(),
		NamespaceLabels:  nsLabels,
		Trusted:          req.Trusted,
		PolicyNamespace:  p.Namespace,
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

// AddonPolicyReconciler reports in each AddonPolicy's Ready condition whether all its
// rules are valid.
type AddonPolicyReconciler struct {
	// Client reads the policies and writes their status.
	Client client.Client
}

// SetupWithManager registers the controller.
func (r *AddonPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("addonpolicy").
		For(&configv1alpha1.AddonPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile validates one AddonPolicy.
func (r *AddonPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &configv1alpha1.AddonPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := p.DeepCopy()
	condition := metav1.Condition{Type: configv1alpha1.AddonPolicyConditionReady, Status: metav1.ConditionTrue,
		ObservedGeneration: p.Generation, Reason: configv1alpha1.AddonPolicyReasonValid, Message: "every rule is valid"}
	if err := policy.Validate(p); err != nil {
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, configv1alpha1.AddonPolicyReasonInvalidRule, err.Error()
	}
	meta.SetStatusCondition(&p.Status.Conditions, condition)
	p.Status.ObservedGeneration = p.Generation
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the AddonPolicy status: %w", err)
	}
	return ctrl.Result{}, nil
}
