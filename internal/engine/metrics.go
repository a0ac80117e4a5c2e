package engine

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Metric label names. The per-instance series name the add-on's own namespace in
// "namespace": the ServiceMonitor of config/prometheus sets honorLabels so that
// Prometheus keeps it rather than renaming it exported_namespace (docs/monitoring.md).
const (
	labelKind      = "kind"
	labelNamespace = "namespace"
	labelName      = "name"
	labelResult    = "result"
	labelVersion   = "version"
	labelChannel   = "channel"
	labelSource    = "source"
	labelRevision  = "revision"
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

	addonInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_addon_info",
		Help: "Always 1: one series per add-on instance, with the version it applied, the channel it follows " +
			"(empty for a pinned version) and the AddonSource and revision its package came from (empty for the built-in packages).",
	}, []string{labelKind, labelNamespace, labelName, labelVersion, labelChannel, labelSource, labelRevision})

	addonStalled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_addon_stalled",
		Help: "1 when the add-on instance is Stalled (a configuration error waits for a person), 0 otherwise.",
	}, []string{labelKind, labelNamespace, labelName})

	addonDegraded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_addon_degraded",
		Help: "1 when the add-on instance is Degraded (it was Ready and no longer is, an apply or an upgrade failed), 0 otherwise.",
	}, []string{labelKind, labelNamespace, labelName})

	addonSuspended = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaddons_addon_suspended",
		Help: "1 when reconciliation of the add-on instance is suspended (spec.suspend, the paused annotation " +
			"or its kind paused in the operator configuration), 0 otherwise.",
	}, []string{labelKind, labelNamespace, labelName})

	addonRollbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_addon_rollbacks_total",
		Help: "Upgrades of the add-on instance that did not become Ready in time and were rolled back to the last healthy version.",
	}, []string{labelKind, labelNamespace, labelName})
)

func init() {
	metrics.Registry.MustRegister(reconcilesTotal, reconcileDuration, addonReadyGauge, managedObjects, addonReconciles,
		cacheLags, driftCorrections, addonInfo, addonStalled, addonDegraded, addonSuspended, addonRollbacks)
}

// infoSeries remembers the label values of each add-on's kaddons_addon_info series, so
// that a new version, channel or source replaces the series instead of leaving the old
// one at 1 beside it.
var infoSeries = struct {
	sync.Mutex
	labels map[addonKey][]string
}{labels: map[addonKey][]string{}}

// forgetInstance removes the per-instance series of a deleted add-on.
func forgetInstance(kind, namespace, name string) {
	addonReadyGauge.DeleteLabelValues(kind, namespace, name)
	managedObjects.DeleteLabelValues(kind, namespace, name)
	addonReconciles.DeleteLabelValues(kind, namespace, name)
	cacheLags.DeleteLabelValues(kind, namespace, name)
	addonStalled.DeleteLabelValues(kind, namespace, name)
	addonDegraded.DeleteLabelValues(kind, namespace, name)
	addonSuspended.DeleteLabelValues(kind, namespace, name)
	addonRollbacks.DeleteLabelValues(kind, namespace, name)
	infoSeries.Lock()
	defer infoSeries.Unlock()
	delete(infoSeries.labels, addonKey{kind: kind, namespace: namespace, name: name})
	addonInfo.DeletePartialMatch(prometheus.Labels{labelKind: kind, labelNamespace: namespace, labelName: name})
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

// recordMetrics updates the per-instance series from the status the reconcile just
// wrote (compared with the status it read, st.stored, for a rollback), and the drift
// counter.
func (r *Reconciler) recordMetrics(obj addonsv1alpha1.Addon, st *reconcileState) {
	kind, namespace, name := r.gvk.Kind, obj.GetNamespace(), obj.GetName()
	status := obj.GetAddonStatus()
	ready := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady)
	addonReadyGauge.WithLabelValues(kind, namespace, name).Set(gaugeOf(ready != nil && ready.Status == metav1.ConditionTrue))
	addonStalled.WithLabelValues(kind, namespace, name).Set(
		gaugeOf(meta.IsStatusConditionTrue(status.Conditions, addonsv1alpha1.ConditionStalled)))
	addonDegraded.WithLabelValues(kind, namespace, name).Set(
		gaugeOf(meta.IsStatusConditionTrue(status.Conditions, addonsv1alpha1.ConditionDegraded)))
	addonSuspended.WithLabelValues(kind, namespace, name).Set(gaugeOf(ready != nil && ready.Reason == addonsv1alpha1.ReasonPaused))
	managedObjects.WithLabelValues(kind, namespace, name).Set(float64(status.Inventory.Len()))
	addonReconciles.WithLabelValues(kind, namespace, name).Inc()
	// The counter exists from the first reconcile, at 0, so that increase() sees the
	// first rollback.
	rollbacks := addonRollbacks.WithLabelValues(kind, namespace, name)
	if _, _, ok := rollbackStarted(st.stored(), obj); ok {
		rollbacks.Inc()
	}
	if len(st.applied.Drifted) > 0 {
		driftCorrections.WithLabelValues(kind).Add(float64(len(st.applied.Drifted)))
	}
	recordInfo(kind, obj, st)
}

// gaugeOf is 1 for true and 0 for false.
func gaugeOf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// recordInfo sets the add-on's kaddons_addon_info series, and deletes the one it had
// when a label changed.
func recordInfo(kind string, obj addonsv1alpha1.Addon, st *reconcileState) {
	key := addonKey{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName()}
	infoSeries.Lock()
	defer infoSeries.Unlock()
	previous := infoSeries.labels[key]
	labels := infoLabels(key, obj, st, previous)
	if previous != nil && !slices.Equal(previous, labels) {
		addonInfo.DeleteLabelValues(previous...)
	}
	infoSeries.labels[key] = labels
	addonInfo.WithLabelValues(labels...).Set(1)
}

// infoLabels returns the label values of the add-on's kaddons_addon_info series: the
// version it applied, and the AddonSource and revision it came from, from its status;
// the channel it follows, empty when spec.version pins the version. An add-on that names
// no channel follows the default one, which resolve found (st.channel); a reconcile that
// stopped before resolve keeps the channel of the series it had.
func infoLabels(key addonKey, obj addonsv1alpha1.Addon, st *reconcileState, previous []string) []string {
	status := obj.GetAddonStatus()
	spec := obj.CommonSpec()
	channel := ""
	if spec.Version == "" {
		channel = st.channel
		if channel == "" {
			channel = spec.Channel
		}
		if channel == "" {
			channel = st.settings.DefaultChannel
		}
		if channel == "" && len(previous) == 7 {
			channel = previous[4]
		}
	}
	source, revision := "", ""
	if s := status.Source; s != nil {
		source, revision = s.Name, s.Revision
	}
	return []string{key.kind, key.namespace, key.name, status.AppliedVersion, channel, source, revision}
}

// rollbackStarted tells whether after is the reconcile that failed an upgrade and asked
// for a rollback (failUpgrade, with rollback enabled): status.upgrade records a failed
// version (or generation) that before did not. It returns the version that failed and
// the version the add-on rolls back to. The RolledBack event is recorded at that moment;
// the rollback counter and the change log line read the same transition.
func rollbackStarted(before, after addonsv1alpha1.Addon) (failed, to string, ok bool) {
	up := after.GetAddonStatus().Upgrade
	if up == nil || up.FailedVersion == "" || !rollbackEnabled(after) {
		return "", "", false
	}
	if old := before.GetAddonStatus().Upgrade; old != nil && old.FailedVersion == up.FailedVersion &&
		old.FailedGeneration == up.FailedGeneration {
		return "", "", false
	}
	return up.FailedVersion, after.GetAddonStatus().LastHealthyVersion, true
}
