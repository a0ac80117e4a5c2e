package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/addonsource"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/sources"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=addonsources,verbs=get;list;watch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=addonsources/status,verbs=get;patch

// AddonSourceReconciler fetches each AddonSource on its interval, puts the verified
// artifact in the engine's source registry (which reconciles the add-ons that use it when
// the digest changes) and reports the result in the AddonSource's status. A fetch that
// fails after a successful one leaves the last artifact in the registry.
type AddonSourceReconciler struct {
	// Client reads AddonSources (cached) and patches their status.
	Client client.Client
	// Reader reads the Secrets an AddonSource names, past the label-filtered cache.
	Reader client.Reader
	// Namespace is the operator's namespace, the only one Secrets are read from.
	Namespace string
	// Fetcher fetches, verifies and extracts sources.
	Fetcher sources.Fetcher
	// Registry receives the artifacts.
	Registry *engine.ArtifactRegistry
	// Operator is what a bundle's metadata is checked against.
	Operator engine.OperatorIdentity
	// Recorder records events on AddonSources; nil records none.
	Recorder events.EventRecorder
}

// Event reasons recorded on AddonSources.
const (
	// EventSourceFetched is recorded when a new revision is in use.
	EventSourceFetched = "Fetched"
)

// SetupWithManager registers the controller. Status writes do not trigger a reconcile.
func (r *AddonSourceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("kaddons-addonsource")
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("addonsource").
		For(&addonsv1alpha1.AddonSource{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{RateLimiter: engine.RetryRateLimiter()}).
		Complete(r)
}

// Reconcile fetches one AddonSource and writes its status once, when it changed.
func (r *AddonSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	src := &addonsv1alpha1.AddonSource{}
	if err := r.Client.Get(ctx, req.NamespacedName, src); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Registry.Remove(req.Name)
			forgetSource(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !src.DeletionTimestamp.IsZero() {
		r.Registry.Remove(src.Name)
		forgetSource(src.Name)
		return ctrl.Result{}, nil
	}
	original := src.DeepCopy()
	start := time.Now()
	obs := r.fetch(ctx, src)
	took := time.Since(start)
	if obs.FetchErr != nil {
		r.Registry.Fail(src.Name, sources.ReasonOf(obs.FetchErr), obs.FetchErr.Error())
		log.FromContext(ctx).Info("Fetching the AddonSource failed", "reason", sources.ReasonOf(obs.FetchErr),
			"error", obs.FetchErr.Error())
	} else {
		r.Registry.Set(src.Name, obs.Artifact, engine.TrustOf(src, r.Namespace))
	}
	addonsource.SetStatus(&src.Status, src.Generation, obs)
	recordFetch(src.Name, meta.FindStatusCondition(src.Status.Conditions, addonsv1alpha1.ConditionReady), took)
	r.recordEvents(original, src)
	if !equality.Semantic.DeepEqual(original.Status, src.Status) {
		if err := r.Client.Status().Patch(ctx, src, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the status of AddonSource %s: %w", src.Name, err)
		}
	}
	if obs.FetchErr != nil && sources.IsTransient(obs.FetchErr) {
		// Retried with back-off; the add-ons keep the last artifact meanwhile.
		return ctrl.Result{}, obs.FetchErr
	}
	return ctrl.Result{RequeueAfter: addonsource.Interval(src)}, nil
}

// fetch builds the request, fetches it within the source's timeout and runs the
// pre-flight check on the bundle's metadata.
func (r *AddonSourceReconciler) fetch(ctx context.Context, src *addonsv1alpha1.AddonSource) addonsource.Observation {
	req, err := addonsource.Request(ctx, r.Reader, r.Namespace, src)
	if err != nil {
		return addonsource.Observation{FetchErr: err, Now: time.Now()}
	}
	fetchCtx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	artifact, err := r.Fetcher.Fetch(fetchCtx, req)
	if err == nil && artifact == nil {
		err = errors.New("the fetcher returned no artifact")
	}
	obs := addonsource.Observation{Artifact: artifact, FetchErr: err, Now: time.Now()}
	if err != nil {
		return obs
	}
	kubernetes := ""
	if artifact.Metadata.KubernetesVersions != "" && r.Operator.KubernetesVersion != nil {
		if kubernetes, err = r.Operator.KubernetesVersion(ctx); err != nil {
			log.FromContext(ctx).Info("Reading the cluster's version failed", "error", err.Error())
		}
	}
	obs.PreflightErr = artifact.Metadata.Check(r.Operator.ID, r.Operator.Version, kubernetes)
	return obs
}

// recordEvents records an event when the source starts using a new revision and when
// its Ready condition changes reason.
func (r *AddonSourceReconciler) recordEvents(before, after *addonsv1alpha1.AddonSource) {
	if r.Recorder == nil {
		return
	}
	if after.Status.Digest != before.Status.Digest {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, EventSourceFetched, "Fetch", "Using revision %s (%s)",
			after.Status.Revision, after.Status.Digest)
	}
	oldReady := meta.FindStatusCondition(before.Status.Conditions, addonsv1alpha1.ConditionReady)
	newReady := meta.FindStatusCondition(after.Status.Conditions, addonsv1alpha1.ConditionReady)
	if newReady == nil || newReady.Status == "True" || (oldReady != nil && oldReady.Reason == newReady.Reason) {
		return
	}
	r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, newReady.Reason, "Fetch", "%s", newReady.Message)
}

// Labels of the source fetch metrics. An AddonSource is cluster-scoped: its name alone
// identifies it.
const (
	labelSource = "source"
	labelResult = "result"
)

// Source fetch metrics, by AddonSource name.
var (
	sourceFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_source_fetch_total",
		Help: "Fetches of each AddonSource by result: success, or the reason its Ready condition gives for the failure " +
			"(FetchFailed, VerificationFailed, DigestMismatch, OperatorMismatch, ...).",
	}, []string{labelSource, labelResult})

	sourceFetchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kaddons_source_fetch_duration_seconds",
		Help:    "Duration of the fetches of each AddonSource (download, verification, extraction and pre-flight check), failures included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{labelSource})

	sourceReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_source_ready",
		Help: "1 when the AddonSource's last fetch succeeded and its artifact passed the checks (Ready), 0 otherwise.",
	}, []string{labelSource})
)

// fetchSuccess is the result label of a fetch that left the source Ready.
const fetchSuccess = "success"

func init() {
	metrics.Registry.MustRegister(sourceFetches, sourceFetchDuration, sourceReady)
}

// recordFetch counts one fetch of source, with the result its Ready condition (ready,
// after the fetch) gives, observes how long it took, and sets the source's ready gauge.
func recordFetch(source string, ready *metav1.Condition, took time.Duration) {
	result, up := fetchSuccess, 1.0
	if ready == nil || ready.Status != metav1.ConditionTrue {
		result, up = addonsv1alpha1.ReasonFetchFailed, 0
		if ready != nil && ready.Reason != "" {
			result = ready.Reason
		}
	}
	sourceFetches.WithLabelValues(source, result).Inc()
	sourceFetchDuration.WithLabelValues(source).Observe(took.Seconds())
	sourceReady.WithLabelValues(source).Set(up)
}

// forgetSource removes the series of a deleted AddonSource.
func forgetSource(source string) {
	sourceFetches.DeletePartialMatch(prometheus.Labels{labelSource: source})
	sourceFetchDuration.DeleteLabelValues(source)
	sourceReady.DeleteLabelValues(source)
}
