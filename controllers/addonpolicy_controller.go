package controllers

import (
	"context"
	"fmt"

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
// their validity, a metadata-only cache of every namespace's labels) and sets the engine
// options that make the add-on controllers obey the policies of namespace ns. It returns
// the namespace cache, for the others that select add-ons by their namespace's labels.
func SetupPolicies(mgr ctrl.Manager, ns string, opts *engine.Options) (client.Reader, error) {
	namespaces, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("creating the namespace cache: %w", err)
	}
	if err := mgr.Add(namespaces); err != nil {
		return nil, err
	}
	if err := (&AddonPolicyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the addonpolicy controller: %w", err)
	}
	checker := &engine.PolicyChecker{Namespace: ns, Policies: mgr.GetClient(), Namespaces: namespaces}
	opts.Permit = checker.Permit
	opts.ReconcileAllOn = append(opts.ReconcileAllOn, &configv1alpha1.AddonPolicy{})
	return namespaces, nil
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
