package engine

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Reconcile results reported by the reconciles metric.
const (
	resultSuccess  = "success"
	resultError    = "error"
	resultTerminal = "terminal"
)

// Metric label names.
const (
	labelKind      = "kind"
	labelNamespace = "namespace"
	labelName      = "name"
	labelResult    = "result"
)

var (
	reconcilesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_reconciles_total",
		Help: "Add-on reconciles by add-on kind and result (success, error, terminal).",
	}, []string{labelKind, labelResult})

	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kaddons_reconcile_duration_seconds",
		Help:    "Duration of add-on reconciles by add-on kind.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{labelKind})

	addonReadyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_addon_ready",
		Help: "1 when the add-on instance is Ready, 0 otherwise.",
	}, []string{labelKind, labelNamespace, labelName})

	managedObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_managed_objects",
		Help: "Objects in the add-on instance's inventory.",
	}, []string{labelKind, labelNamespace, labelName})

	addonReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_addon_reconciles_total",
		Help: "Reconciles of each add-on instance that ran its phases.",
	}, []string{labelKind, labelNamespace, labelName})

	cacheLags = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_addon_cache_lags_total",
		Help: "Writes of each add-on instance that the manager's cache did not show within two seconds; " +
			"each may cost one more reconcile when its watch event comes.",
	}, []string{labelKind, labelNamespace, labelName})

	driftCorrections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_drift_corrections_total",
		Help: "Objects kaddons re-created or re-applied because they drifted from the manifests, by add-on kind.",
	}, []string{labelKind})
)

func init() {
	metrics.Registry.MustRegister(reconcilesTotal, reconcileDuration, addonReadyGauge, managedObjects, addonReconciles,
		cacheLags, driftCorrections)
}

// forgetInstance removes the per-instance series of a deleted add-on.
func forgetInstance(kind, namespace, name string) {
	addonReadyGauge.DeleteLabelValues(kind, namespace, name)
	managedObjects.DeleteLabelValues(kind, namespace, name)
	addonReconciles.DeleteLabelValues(kind, namespace, name)
	cacheLags.DeleteLabelValues(kind, namespace, name)
}

// awaitCache waits until the cache shows the writes of applied (ssa.WaitForCache) and
// counts those it does not show in time: their watch events are news, not echoes.
func (r *Reconciler) awaitCache(ctx context.Context, addon addonsv1alpha1.Addon, applied map[addonsv1alpha1.ObjectReference]ssa.Written) {
	lagging := ssa.WaitForCache(ctx, r.client, applied, ssa.CacheCatchUp)
	for ref := range lagging {
		r.echoes.unseen(ref)
	}
	if len(lagging) > 0 {
		cacheLags.WithLabelValues(r.gvk.Kind, addon.GetNamespace(), addon.GetName()).Add(float64(len(lagging)))
	}
}

// recordMetrics updates the per-instance gauges and counter, and the drift counter.
func (r *Reconciler) recordMetrics(obj addonsv1alpha1.Addon, st *reconcileState) {
	ready := 0.0
	if meta.IsStatusConditionTrue(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady) {
		ready = 1
	}
	addonReadyGauge.WithLabelValues(r.gvk.Kind, obj.GetNamespace(), obj.GetName()).Set(ready)
	managedObjects.WithLabelValues(r.gvk.Kind, obj.GetNamespace(), obj.GetName()).Set(float64(obj.GetAddonStatus().Inventory.Len()))
	addonReconciles.WithLabelValues(r.gvk.Kind, obj.GetNamespace(), obj.GetName()).Inc()
	if len(st.applied.Drifted) > 0 {
		driftCorrections.WithLabelValues(r.gvk.Kind).Add(float64(len(st.applied.Drifted)))
	}
}
