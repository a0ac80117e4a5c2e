package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/config"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=config.kaddons.dev,resources=operatorconfigs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=config.kaddons.dev,resources=operatorconfigs/status,verbs=get;patch

// OperatorConfigReconciler puts the OperatorConfig named default in force: its spec,
// merged onto the configuration file's settings, becomes the add-on controllers' settings
// (which reconciles every add-on) and the log level. A spec that does not validate is
// rejected in its status and changes nothing; deleting it returns to the file's settings.
type OperatorConfigReconciler struct {
	// Client reads the OperatorConfig and writes its status.
	Client client.Client
	// File holds the configuration file's settings, flags applied.
	File config.Runtime
	// Settings is the add-on controllers' settings store.
	Settings *engine.SettingsStore
	// Source lists the channels a default channel must be one of.
	Catalog *channels.Catalog
	// Kinds are the add-on kinds the manager runs.
	Kinds []string
	// SetLogLevel, if set, changes the operator's log level.
	SetLogLevel func(config.LogLevel)
	// OperatorNamespace is the operator's own namespace, trusted (with kube-system) when
	// the configuration names no trusted namespaces.
	OperatorNamespace string

	mu sync.Mutex
	// inForce is the Runtime last put in force.
	inForce config.Runtime
}

// SetupWithManager puts the file's settings in force and registers the controller, and
// the leader's step that creates the OperatorConfig named default when there is none.
func (r *OperatorConfigReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.putInForce(r.File)
	if err := mgr.Add(manager.RunnableFunc(r.ensureDefault)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("operatorconfig").
		For(&configv1alpha1.OperatorConfig{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile evaluates the OperatorConfig and reports the outcome in its status.
func (r *OperatorConfigReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != configv1alpha1.OperatorConfigName {
		return ctrl.Result{}, nil
	}
	oc := &configv1alpha1.OperatorConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, oc); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("No OperatorConfig: the configuration file's settings are in force")
			r.putInForce(r.File)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := oc.DeepCopy()
	merged, errs := config.MergeLive(r.File, oc.Spec, r.Kinds, r.Catalog.Channels())
	oc.Status.ObservedGeneration = oc.Generation
	if len(errs) > 0 {
		log.FromContext(ctx).Info("Rejected the OperatorConfig; the previous settings stay in force", "errors", errs.ToAggregate().Error())
		meta.SetStatusCondition(&oc.Status.Conditions, metav1.Condition{
			Type: configv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: oc.Generation,
			Reason:  configv1alpha1.ReasonInvalidConfiguration,
			Message: "rejected; the previous settings stay in force: " + errs.ToAggregate().Error(),
		})
	} else {
		r.putInForce(merged)
		log.FromContext(ctx).Info("OperatorConfig in force", "defaultChannel", merged.DefaultChannel,
			"registryMirror", merged.RegistryMirror, "pausedKinds", merged.PausedKinds,
			"resyncInterval", merged.ResyncInterval.String(), "logLevel", merged.LogLevel)
		meta.SetStatusCondition(&oc.Status.Conditions, metav1.Condition{
			Type: configv1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: oc.Generation,
			Reason:  configv1alpha1.ReasonApplied,
			Message: "the settings are in force",
		})
	}
	oc.Status.Effective = r.effective()
	if equality.Semantic.DeepEqual(base.Status, oc.Status) {
		// A restart that finds the status as it left it writes nothing.
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, oc, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the OperatorConfig status: %w", err)
	}
	return ctrl.Result{}, nil
}

// ensureDefault creates the OperatorConfig named default, with an empty spec, when there
// is none, so that its status always shows the effective settings: the admission policy
// kaddons-default-serviceaccount-policy reads the default ServiceAccount and the trusted
// namespaces from there. An OperatorConfig that exists is left as it is.
func (r *OperatorConfigReconciler) ensureDefault(ctx context.Context) error {
	oc := &configv1alpha1.OperatorConfig{ObjectMeta: metav1.ObjectMeta{Name: configv1alpha1.OperatorConfigName}}
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Steps: 8, Cap: time.Minute},
		func(ctx context.Context) (bool, error) {
			err := r.Client.Create(ctx, oc)
			if err == nil || apierrors.IsAlreadyExists(err) {
				return true, nil
			}
			log.FromContext(ctx).Error(err, "Creating the OperatorConfig default; retrying")
			return false, nil
		})
	if err != nil && ctx.Err() == nil {
		log.FromContext(ctx).Error(err, "Could not create the OperatorConfig default: "+
			"the admission policy on the default ServiceAccount admits every add-on until it exists")
	}
	return nil
}

// putInForce makes rt the settings of the add-on controllers and the log level.
func (r *OperatorConfigReconciler) putInForce(rt config.Runtime) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inForce = *rt.DeepCopy()
	r.Settings.Store(engine.Settings{
		DefaultChannel: rt.DefaultChannel,
		RegistryMirror: rt.RegistryMirror,
		PausedKinds:    rt.PausedKinds,
		ResyncInterval: rt.ResyncInterval,
		Tenancy: &engine.Tenancy{
			TrustedNamespaces:         rt.Trusted(r.OperatorNamespace),
			DefaultServiceAccountName: rt.DefaultServiceAccountName,
		},
	})
	if r.SetLogLevel != nil {
		r.SetLogLevel(rt.LogLevel)
	}
}

// effective reports the settings in force.
func (r *OperatorConfigReconciler) effective() *configv1alpha1.EffectiveSettings {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &configv1alpha1.EffectiveSettings{
		DefaultChannel:   r.inForce.DefaultChannel,
		RegistryMirror:   r.inForce.RegistryMirror,
		PausedAddonKinds: slices.Clone(r.inForce.PausedKinds),
		LogLevel:         string(r.inForce.LogLevel),
		ResyncInterval:   metav1.Duration{Duration: r.inForce.ResyncInterval},

		TrustedNamespaces:         r.inForce.Trusted(r.OperatorNamespace),
		DefaultServiceAccountName: r.inForce.DefaultServiceAccountName,
	}
}
