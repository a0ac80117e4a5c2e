package extensions

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// resultSuccess is the result label of a call that answered.
const resultSuccess = "success"

var (
	callsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaddons_extension_calls_total",
		Help: "Calls to extensions by AddonExtension, hook and result: success, or the reason of the failure " +
			"(ExtensionUnreachable, ExtensionInvalidResponse, ExtensionFailed, ExtensionResponseRefused).",
	}, []string{"extension", "hook", "result"})

	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kaddons_extension_call_duration_seconds",
		Help:    "Duration of calls to extensions by AddonExtension and hook, failures included.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"extension", "hook"})
)

func init() {
	metrics.Registry.MustRegister(callsTotal, callDuration)
}

// observe counts a call that started at start and ended with err.
func observe(extension, hook string, start time.Time, err error) {
	callDuration.WithLabelValues(extension, hook).Observe(time.Since(start).Seconds())
	callsTotal.WithLabelValues(extension, hook, resultOf(err)).Inc()
}

// CountRefused counts a call whose answer the engine refused after the call itself
// succeeded (a Render answer that drops an object).
func CountRefused(extension, hook string) {
	callsTotal.WithLabelValues(extension, hook, FailureRefused).Inc()
}

// resultOf is the result label of a call that ended with err.
func resultOf(err error) string {
	if err == nil {
		return resultSuccess
	}
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return FailureUnreachable
}
