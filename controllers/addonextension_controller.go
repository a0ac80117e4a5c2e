package controllers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/extensions"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=addonextensions,verbs=get;list;watch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=addonextensions/status,verbs=get;patch

// maxRevision is the longest revision status keeps as the extension wrote it; a longer
// one is kept as its digest.
const maxRevision = 256

// SetupExtensions registers the AddonExtension controller with mgr and sets the engine
// options that make the add-on controllers call the extensions: with tokens of kaddons'
// ServiceAccount, reading namespace labels from namespaces, reconciling every add-on
// when an AddonExtension changes.
func SetupExtensions(mgr ctrl.Manager, opts *engine.Options, namespaces client.Reader, tokens extensions.TokenSource) error {
	caller := &extensions.Caller{Tokens: tokens}
	if err := (&AddonExtensionReconciler{Client: mgr.GetClient(), Caller: caller}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the addonextension controller: %w", err)
	}
	opts.Extensions = &extensions.Registry{Extensions: mgr.GetClient(), Namespaces: namespaces, Caller: caller}
	opts.ReconcileAllOn = append(opts.ReconcileAllOn, &addonsv1alpha1.AddonExtension{})
	return nil
}

// DiscoveryInterval is how often an extension's discovery endpoint is asked again, to
// follow its revision and find out it came back.
const DiscoveryInterval = 5 * time.Minute

// AddonExtensionReconciler calls the discovery endpoint of each AddonExtension and
// records in its status what it serves. The engine reads the AddonExtensions from the
// cache and calls only the ones Discovered at their generation; every status change
// reconciles every add-on (engine.Options.ReconcileAllOn).
type AddonExtensionReconciler struct {
	// Client reads AddonExtensions (cached) and patches their status.
	Client client.Client
	// Caller calls the extensions.
	Caller *extensions.Caller
	// Recorder records events on AddonExtensions; nil records none.
	Recorder events.EventRecorder
}

// SetupWithManager registers the controller. Status writes do not trigger a reconcile.
func (r *AddonExtensionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("kaddons-addonextension")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("addonextension").
		For(&addonsv1alpha1.AddonExtension{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{RateLimiter: engine.RetryRateLimiter()}).
		Complete(r)
}

// Reconcile discovers one AddonExtension and writes its status when it changed.
func (r *AddonExtensionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ext := &addonsv1alpha1.AddonExtension{}
	if err := r.Client.Get(ctx, req.NamespacedName, ext); err != nil || !ext.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	original := ext.DeepCopy()
	discoveryErr := r.discover(ctx, ext)
	r.recordEvents(original, ext)
	if !equality.Semantic.DeepEqual(original.Status, ext.Status) {
		if err := r.Client.Status().Patch(ctx, ext, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the status of AddonExtension %s: %w", ext.Name, err)
		}
	}
	var callErr *extensions.CallError
	if errors.As(discoveryErr, &callErr) {
		// Retried with back-off: the extension may be starting.
		return ctrl.Result{}, discoveryErr
	}
	return ctrl.Result{RequeueAfter: DiscoveryInterval}, nil
}

// discover calls the extension's discovery endpoint and sets its status from the answer.
func (r *AddonExtensionReconciler) discover(ctx context.Context, ext *addonsv1alpha1.AddonExtension) error {
	ext.Status.ObservedGeneration = ext.Generation
	endpoint, err := extensions.NewEndpoint(ext)
	if err != nil {
		setDiscovered(ext, metav1.ConditionFalse, addonsv1alpha1.ReasonInvalidExtension, err.Error())
		return err
	}
	defer endpoint.Close()
	resp, err := r.Caller.Discover(ctx, endpoint)
	if err != nil {
		// What was discovered before stays listed; the condition says it is stale.
		setDiscovered(ext, metav1.ConditionFalse, addonsv1alpha1.ReasonDiscoveryFailed, err.Error())
		return err
	}
	now := metav1.Now()
	ext.Status.LastDiscoveryTime = &now
	ext.Status.Revision = resp.Revision
	if len(resp.Revision) > maxRevision {
		ext.Status.Revision = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(resp.Revision)))
	}
	ext.Status.Hooks = discoveredHooks(resp.Hooks)
	if missing := unserved(ext.Spec.Hooks, resp.Hooks); len(missing) > 0 {
		setDiscovered(ext, metav1.ConditionFalse, addonsv1alpha1.ReasonHooksNotServed,
			fmt.Sprintf("the extension does not serve %s at %s", strings.Join(missing, ", "), hooksv1alpha1.GroupVersion))
		return nil
	}
	names := make([]string, 0, len(ext.Spec.Hooks))
	for _, h := range ext.Spec.Hooks {
		names = append(names, string(h))
	}
	setDiscovered(ext, metav1.ConditionTrue, addonsv1alpha1.ReasonDiscovered,
		fmt.Sprintf("serves %s", strings.Join(names, ", ")))
	return nil
}

// discoveredHooks is the status form of what discovery listed: known hooks only, at most
// 16, sorted.
func discoveredHooks(handlers []hooksv1alpha1.HookHandler) []addonsv1alpha1.DiscoveredHook {
	var hooks []addonsv1alpha1.DiscoveredHook
	seen := map[hooksv1alpha1.Hook]bool{}
	for _, h := range handlers {
		if !slices.Contains(hooksv1alpha1.Hooks, h.Name) || seen[h.Name] {
			continue
		}
		seen[h.Name] = true
		hooks = append(hooks, addonsv1alpha1.DiscoveredHook{Name: string(h.Name), APIVersion: extensions.Truncate(h.APIVersion)})
	}
	slices.SortFunc(hooks, func(a, b addonsv1alpha1.DiscoveredHook) int { return strings.Compare(a.Name, b.Name) })
	return hooks
}

// unserved lists the hooks of want that handlers do not serve at the version kaddons
// speaks.
func unserved(want []hooksv1alpha1.Hook, handlers []hooksv1alpha1.HookHandler) []string {
	var missing []string
	for _, w := range want {
		if !slices.ContainsFunc(handlers, func(h hooksv1alpha1.HookHandler) bool {
			return h.Name == w && h.APIVersion == hooksv1alpha1.GroupVersion
		}) {
			missing = append(missing, string(w))
		}
	}
	return missing
}

// setDiscovered sets the Discovered condition.
func setDiscovered(ext *addonsv1alpha1.AddonExtension, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&ext.Status.Conditions, metav1.Condition{Type: addonsv1alpha1.ConditionDiscovered,
		Status: status, Reason: reason, Message: extensions.Truncate(message), ObservedGeneration: ext.Generation})
}

// recordEvents records an event when Discovered changes status or reason.
func (r *AddonExtensionReconciler) recordEvents(before, after *addonsv1alpha1.AddonExtension) {
	if r.Recorder == nil {
		return
	}
	old := meta.FindStatusCondition(before.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
	now := meta.FindStatusCondition(after.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
	if now == nil || (old != nil && old.Status == now.Status && old.Reason == now.Reason) {
		return
	}
	eventType := corev1.EventTypeWarning
	if now.Status == metav1.ConditionTrue {
		eventType = corev1.EventTypeNormal
	}
	r.Recorder.Eventf(after, nil, eventType, now.Reason, "Discover", "%s", now.Message)
}
