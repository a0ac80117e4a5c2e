package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

func TestRecordFetch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ready      *metav1.Condition
		wantResult string
		wantReady  float64
	}{
		{name: "fetched", wantResult: fetchSuccess, wantReady: 1,
			ready: &metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: addonsv1alpha1.ReasonFetched}},
		{name: "the fetch failed", wantResult: addonsv1alpha1.ReasonFetchFailed,
			ready: &metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: addonsv1alpha1.ReasonFetchFailed}},
		{name: "the signature did not verify", wantResult: addonsv1alpha1.ReasonVerificationFailed,
			ready: &metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: addonsv1alpha1.ReasonVerificationFailed}},
		{name: "fetched, but the pre-flight check refused the bundle", wantResult: addonsv1alpha1.ReasonOperatorTooOld,
			ready: &metav1.Condition{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: addonsv1alpha1.ReasonOperatorTooOld}},
		{name: "no condition is a failure", wantResult: addonsv1alpha1.ReasonFetchFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			source := "record-fetch"
			t.Cleanup(func() { forgetSource(source) })
			recordFetch(source, tc.ready, 1500*time.Millisecond)
			g.Expect(metricValue(t, "kaddons_source_fetch_total", map[string]string{"source": source, "result": tc.wantResult})).
				To(BeEquivalentTo(1))
			g.Expect(metricValue(t, "kaddons_source_ready", map[string]string{"source": source})).To(Equal(tc.wantReady))
			var duration dto.Metric
			g.Expect(sourceFetchDuration.WithLabelValues(source).(prometheus.Histogram).Write(&duration)).To(Succeed())
			g.Expect(duration.GetHistogram().GetSampleCount()).To(BeEquivalentTo(1))
			g.Expect(duration.GetHistogram().GetSampleSum()).To(Equal(1.5))

			forgetSource(source)
			g.Expect(metricValue(t, "kaddons_source_fetch_total", map[string]string{"source": source, "result": tc.wantResult})).
				To(BeZero(), "the counter is gone with the source")
		})
	}
}

// TestAddonSourceMetrics follows one AddonSource of the suite's manager: a successful
// fetch, a failed one, and its deletion, which removes its series.
func TestAddonSourceMetrics(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	src := newAddonSourceWith(t, ns, func(spec *addonsv1alpha1.AddonSourceSpec) {})
	url := src.Spec.Directory.Path
	series := func(result string) map[string]string { return map[string]string{"source": src.Name, "result": result} }

	testFetcher.serve(url, &sources.Artifact{Revision: "rev1", Digest: "sha256:" + repeat("1"), Dir: channelsTree(t, oldVersion)}, nil)
	refetch(t, src, "30s")
	waitSource(t, src, addonsv1alpha1.ReasonFetched)
	g.Eventually(func() float64 { return metricValue(t, "kaddons_source_ready", map[string]string{"source": src.Name}) }).
		WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeEquivalentTo(1))
	g.Expect(metricValue(t, "kaddons_source_fetch_total", series(fetchSuccess))).To(BeNumerically(">=", 1))

	testFetcher.serve(url, nil, &sources.Error{Reason: sources.ReasonFetchFailed, Message: "connection refused"})
	refetch(t, src, "31s")
	waitSource(t, src, addonsv1alpha1.ReasonFetchFailed)
	g.Eventually(func() float64 { return metricValue(t, "kaddons_source_ready", map[string]string{"source": src.Name}) }).
		WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeZero())
	g.Expect(metricValue(t, "kaddons_source_fetch_total", series(addonsv1alpha1.ReasonFetchFailed))).To(BeNumerically(">=", 1))

	g.Expect(k8sClient.Delete(context.Background(), src)).To(Succeed())
	g.Eventually(func() float64 { return metricValue(t, "kaddons_source_fetch_total", series(fetchSuccess)) }).
		WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeZero(), "the series of a deleted source are removed")
}
