package engine

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// metricsNamespace is the namespace of the add-ons of the metrics tests: no other test
// writes their series.
const metricsNamespace = "metrics-test"

// metricsAddon returns a CoreDNS in metricsNamespace.
func metricsAddon(name string, mutate func(*addonsv1alpha1.CoreDNS)) *addonsv1alpha1.CoreDNS {
	obj := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: metricsNamespace, Name: name, Generation: 1}}
	if mutate != nil {
		mutate(obj)
	}
	return obj
}

// valueOf reads the value of one gauge or counter series, as prometheus/testutil's
// ToFloat64 does (testutil itself would add a module to go.mod for its diffs).
func valueOf(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	switch {
	case out.GetGauge() != nil:
		return out.GetGauge().GetValue()
	case out.GetCounter() != nil:
		return out.GetCounter().GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", m.Desc())
	return 0
}

// seriesOf returns the label sets of c's series for the add-on metricsNamespace/name.
func seriesOf(t *testing.T, c prometheus.Collector, name string) []map[string]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []map[string]string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[labelNamespace] == metricsNamespace && labels[labelName] == name {
				series = append(series, labels)
			}
		}
	}
	return series
}

func metricsCondition(conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: reason}
}

func TestRecordMetricsStateGauges(t *testing.T) {
	r := &Reconciler{gvk: schema.GroupVersionKind{Kind: "CoreDNS"}}
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		// ready, stalled, degraded, suspended
		want [4]float64
	}{
		{name: "ready", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled),
		}, want: [4]float64{1, 0, 0, 0}},
		{name: "progressing", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionFalse, addonsv1alpha1.ReasonChildrenNotReady),
			metricsCondition(addonsv1alpha1.ConditionProgressing, metav1.ConditionTrue, addonsv1alpha1.ReasonChildrenNotReady),
		}, want: [4]float64{0, 0, 0, 0}},
		{name: "stalled", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionFalse, addonsv1alpha1.ReasonDowngradeRefused),
			metricsCondition(addonsv1alpha1.ConditionStalled, metav1.ConditionTrue, addonsv1alpha1.ReasonDowngradeRefused),
		}, want: [4]float64{0, 1, 0, 0}},
		{name: "degraded", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionFalse, addonsv1alpha1.ReasonChildrenNotReady),
			metricsCondition(addonsv1alpha1.ConditionDegraded, metav1.ConditionTrue, addonsv1alpha1.ReasonChildrenNotReady),
		}, want: [4]float64{0, 0, 1, 0}},
		{name: "stalled False and degraded False count as 0", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled),
			metricsCondition(addonsv1alpha1.ConditionStalled, metav1.ConditionFalse, addonsv1alpha1.ReasonReconciled),
			metricsCondition(addonsv1alpha1.ConditionDegraded, metav1.ConditionFalse, addonsv1alpha1.ReasonReconciled),
		}, want: [4]float64{1, 0, 0, 0}},
		{name: "paused while Ready is suspended and ready", conditions: []metav1.Condition{
			metricsCondition(addonsv1alpha1.ConditionReady, metav1.ConditionTrue, addonsv1alpha1.ReasonPaused),
		}, want: [4]float64{1, 0, 0, 1}},
		{name: "no conditions yet", want: [4]float64{0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "gauges"
			obj := metricsAddon(name, func(c *addonsv1alpha1.CoreDNS) { c.Status.Conditions = tc.conditions })
			r.recordMetrics(obj, &reconcileState{addon: obj})
			for i, g := range []*prometheus.GaugeVec{addonReadyGauge, addonStalled, addonDegraded, addonSuspended} {
				if got := valueOf(t, g.WithLabelValues("CoreDNS", metricsNamespace, name)); got != tc.want[i] {
					t.Errorf("%s = %v, want %v", []string{"ready", "stalled", "degraded", "suspended"}[i], got, tc.want[i])
				}
			}
		})
	}
}

func TestRollbackStarted(t *testing.T) {
	upgrade := func(failed string, generation int64) func(*addonsv1alpha1.CoreDNS) {
		return func(c *addonsv1alpha1.CoreDNS) {
			c.Status.LastHealthyVersion = "1.11.3"
			if failed != "" {
				c.Status.Upgrade = &addonsv1alpha1.UpgradeStatus{FailedVersion: failed, FailedGeneration: generation}
			}
		}
	}
	noRollback := func(c *addonsv1alpha1.CoreDNS) {
		upgrade("1.12.1", 2)(c)
		c.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Rollback: ptr.To(false)}
	}
	for _, tc := range []struct {
		name          string
		before, after func(*addonsv1alpha1.CoreDNS)
		wantOK        bool
	}{
		{name: "the upgrade just failed", before: upgrade("", 0), after: upgrade("1.12.1", 2), wantOK: true},
		{name: "the same failure read again", before: upgrade("1.12.1", 2), after: upgrade("1.12.1", 2)},
		{name: "the same version failed again at a new generation", before: upgrade("1.12.1", 2), after: upgrade("1.12.1", 3),
			wantOK: true},
		{name: "another version failed", before: upgrade("1.12.0", 2), after: upgrade("1.12.1", 2), wantOK: true},
		{name: "rollback disabled", before: upgrade("", 0), after: noRollback},
		{name: "the failure was forgotten", before: upgrade("1.12.1", 2), after: upgrade("", 0)},
		{name: "no upgrade at all", before: upgrade("", 0), after: upgrade("", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed, to, ok := rollbackStarted(metricsAddon("rb", tc.before), metricsAddon("rb", tc.after))
			if ok != tc.wantOK {
				t.Fatalf("rollbackStarted ok = %v, want %v", ok, tc.wantOK)
			}
			if ok && (failed != "1.12.1" || to != "1.11.3") {
				t.Errorf("rollbackStarted = %q, %q, want 1.12.1, 1.11.3", failed, to)
			}
		})
	}
}

func TestRecordMetricsCountsRollbacks(t *testing.T) {
	r := &Reconciler{gvk: schema.GroupVersionKind{Kind: "CoreDNS"}}
	name := "rollbacks"
	counter := addonRollbacks.WithLabelValues("CoreDNS", metricsNamespace, name)
	healthy := metricsAddon(name, func(c *addonsv1alpha1.CoreDNS) { c.Status.LastHealthyVersion = "1.11.3" })
	failed := metricsAddon(name, func(c *addonsv1alpha1.CoreDNS) {
		c.Status.LastHealthyVersion = "1.11.3"
		c.Status.Upgrade = &addonsv1alpha1.UpgradeStatus{FailedVersion: "1.12.1", FailedGeneration: 1}
	})

	r.recordMetrics(healthy, &reconcileState{addon: healthy, asStored: healthy.DeepCopy()})
	if got := valueOf(t, counter); got != 0 {
		t.Fatalf("rollbacks after a healthy reconcile = %v, want 0 (the series exists from the first reconcile)", got)
	}
	r.recordMetrics(failed, &reconcileState{addon: failed, asStored: healthy})
	if got := valueOf(t, counter); got != 1 {
		t.Fatalf("rollbacks after the failed upgrade = %v, want 1", got)
	}
	// The rollback's own apply, and every reconcile after it, read the failure already recorded.
	r.recordMetrics(failed, &reconcileState{addon: failed, asStored: failed.DeepCopy(), wanted: "1.12.1"})
	if got := valueOf(t, counter); got != 1 {
		t.Errorf("rollbacks after the rollback's apply = %v, want still 1", got)
	}
}

func TestAddonInfoSeries(t *testing.T) {
	r := &Reconciler{gvk: schema.GroupVersionKind{Kind: "CoreDNS"}}
	name := "info"
	record := func(st *reconcileState, mutate func(*addonsv1alpha1.CoreDNS)) {
		obj := metricsAddon(name, mutate)
		st.addon = obj
		r.recordMetrics(obj, st)
	}
	expect := func(step string, want map[string]string) {
		t.Helper()
		series := seriesOf(t, addonInfo, name)
		if len(series) != 1 {
			t.Fatalf("%s: %d kaddons_addon_info series, want 1: %v", step, len(series), series)
		}
		full := map[string]string{labelKind: "CoreDNS", labelNamespace: metricsNamespace, labelName: name,
			labelVersion: "", labelChannel: "", labelSource: "", labelRevision: ""}
		maps.Copy(full, want)
		if !maps.Equal(series[0], full) {
			t.Errorf("%s: kaddons_addon_info labels = %v, want %v", step, series[0], full)
		}
		if v := valueOf(t, addonInfo.With(series[0])); v != 1 {
			t.Errorf("%s: kaddons_addon_info = %v, want 1", step, v)
		}
	}

	record(&reconcileState{channel: "stable"}, func(c *addonsv1alpha1.CoreDNS) { c.Status.AppliedVersion = "1.11.3" })
	expect("following the default channel", map[string]string{labelVersion: "1.11.3", labelChannel: "stable"})

	record(&reconcileState{}, func(c *addonsv1alpha1.CoreDNS) { c.Status.AppliedVersion = "1.11.3" })
	expect("a reconcile that stopped before resolve keeps the channel", map[string]string{labelVersion: "1.11.3", labelChannel: "stable"})

	record(&reconcileState{channel: "rapid"}, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Channel = "rapid"
		c.Status.AppliedVersion = "1.12.1"
	})
	expect("a new channel and version replace the series", map[string]string{labelVersion: "1.12.1", labelChannel: "rapid"})

	record(&reconcileState{}, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Version = "1.12.1"
		c.Spec.Channel = "rapid"
		c.Status.AppliedVersion = "1.12.1"
		c.Status.Source = &addonsv1alpha1.AppliedSource{Name: "platform", Revision: "v2@sha256:abc", Digest: "sha256:abc"}
	})
	expect("a pinned version from a source has no channel",
		map[string]string{labelVersion: "1.12.1", labelSource: "platform", labelRevision: "v2@sha256:abc"})

	forgetInstance("CoreDNS", metricsNamespace, name)
	if series := seriesOf(t, addonInfo, name); len(series) != 0 {
		t.Errorf("kaddons_addon_info series after the add-on was deleted: %v", series)
	}
	for _, c := range []prometheus.Collector{addonReadyGauge, addonStalled, addonDegraded, addonSuspended, addonRollbacks,
		managedObjects, addonReconciles} {
		if series := seriesOf(t, c, name); len(series) != 0 {
			t.Errorf("series left after the add-on was deleted: %v", series)
		}
	}
}

// TestReconcileRecordsTheAddonSeries runs a whole Reconcile of a suspended add-on (the
// gate stops it) on a fake client: the series come from the status it wrote.
func TestReconcileRecordsTheAddonSeries(t *testing.T) {
	obj := metricsAddon("reconciled", func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Suspend = true
		c.Spec.Channel = "stable"
		c.Status.AppliedVersion = "1.12.1"
	})
	r, c := testReconciler(t, Options{}, obj)
	r.recorder = &events.FakeRecorder{}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}); err != nil {
		t.Fatal(err)
	}
	got := &addonsv1alpha1.CoreDNS{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if ready := readyConditionOf(got); ready.Reason != addonsv1alpha1.ReasonPaused {
		t.Fatalf("Ready = %+v, want reason Paused", ready)
	}
	if v := valueOf(t, addonSuspended.WithLabelValues("CoreDNS", metricsNamespace, "reconciled")); v != 1 {
		t.Errorf("kaddons_addon_suspended = %v, want 1", v)
	}
	want := map[string]string{labelKind: "CoreDNS", labelNamespace: metricsNamespace, labelName: "reconciled",
		labelVersion: "1.12.1", labelChannel: "stable", labelSource: "", labelRevision: ""}
	if series := seriesOf(t, addonInfo, "reconciled"); len(series) != 1 || !maps.Equal(series[0], want) {
		t.Errorf("kaddons_addon_info series = %v, want one with %v", series, want)
	}

	// Gone, without ever having had a finalizer: the next reconcile finds nothing and
	// drops its series.
	if err := c.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}); err != nil {
		t.Fatal(err)
	}
	for _, col := range []prometheus.Collector{addonInfo, addonSuspended, addonReadyGauge, addonReconciles} {
		if series := seriesOf(t, col, "reconciled"); len(series) != 0 {
			t.Errorf("series left after the add-on was gone: %v", series)
		}
	}
}

func readyConditionOf(obj addonsv1alpha1.Addon) metav1.Condition {
	for _, c := range obj.GetAddonStatus().Conditions {
		if c.Type == addonsv1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

// monitoringPack is the folder of the monitoring objects and the dashboard.
var monitoringPack = filepath.Join("..", "..", "config", "prometheus")

// readFile returns the content of path.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// monitoringDoc is docs/monitoring.md.
func monitoringDoc(t *testing.T) string {
	t.Helper()
	return string(readFile(t, filepath.Join("..", "..", "docs", "monitoring.md")))
}

// expectDocumented fails unless every kaddons metric expr queries is in the metrics table
// of docs/monitoring.md (a histogram by its name, without _bucket, _sum or _count).
func expectDocumented(t *testing.T, where, expr string) {
	t.Helper()
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(kaddons_[a-z_]+)` \\|").FindAllStringSubmatch(monitoringDoc(t), -1) {
		documented[m[1]] = true
	}
	for _, name := range regexp.MustCompile(`kaddons_[a-z_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base := strings.TrimSuffix(name, suffix); strings.HasSuffix(base, "_seconds") {
				name = base
			}
		}
		if !documented[name] {
			t.Errorf("%s queries %s, which docs/monitoring.md does not list", where, name)
		}
	}
}

// TestGrafanaDashboard reads config/prometheus/grafana-dashboard.json: JSON whose panels
// all query kaddons metrics that docs/monitoring.md lists.
func TestGrafanaDashboard(t *testing.T) {
	var dashboard struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, filepath.Join(monitoringPack, "grafana-dashboard.json")), &dashboard); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dashboard.UID != "kaddons" || len(dashboard.Panels) == 0 {
		t.Errorf("the dashboard has uid %q and %d panels, want uid kaddons and panels", dashboard.UID, len(dashboard.Panels))
	}
	for _, p := range dashboard.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q queries nothing", p.Title)
		}
		for _, target := range p.Targets {
			if target.Expr == "" {
				t.Errorf("dashboard panel %q has a query without an expression", p.Title)
			}
			expectDocumented(t, "dashboard panel "+strconv.Quote(p.Title), target.Expr)
		}
	}
}

// TestAlertsAreDocumented reads config/prometheus/alerts.yaml: its four alerts query
// metrics docs/monitoring.md lists, and the page says what to do for each.
func TestAlertsAreDocumented(t *testing.T) {
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(readFile(t, filepath.Join(monitoringPack, "alerts.yaml")), &rule); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	doc := monitoringDoc(t)
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			expectDocumented(t, "alert "+r.Alert, r.Expr)
			if !strings.Contains(doc, "\n### "+r.Alert+"\n") {
				t.Errorf("docs/monitoring.md has no section on what to do for %s", r.Alert)
			}
		}
	}
	if alerts != 4 {
		t.Errorf("alerts.yaml has %d alerts, want 4 (not Ready, Stalled, rolled back, source failing)", alerts)
	}
}

// TestEngineMetricsAreDocumented checks that docs/monitoring.md lists every metric the
// engine registers.
func TestEngineMetricsAreDocumented(t *testing.T) {
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range []prometheus.Collector{reconcilesTotal, reconcileDuration, addonReadyGauge, managedObjects, addonReconciles,
		cacheLags, driftCorrections, addonInfo, addonStalled, addonDegraded, addonSuspended, addonRollbacks} {
		descs := make(chan *prometheus.Desc, 1)
		c.Describe(descs)
		m := fqName.FindStringSubmatch((<-descs).String())
		if m == nil {
			t.Fatalf("no fqName in the description of %T", c)
		}
		expectDocumented(t, "the engine", m[1])
	}
}
