package engine_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// The enginetest helpers on the suite's client.

const (
	eventuallyTimeout = enginetest.EventuallyTimeout
	pollInterval      = enginetest.PollInterval
	oldVersion        = enginetest.OldVersion
	newVersion        = enginetest.NewVersion
)

func newNamespace(t *testing.T) string {
	t.Helper()
	return enginetest.NewNamespace(t, k8sClient)
}

func getAddon(g Gomega, obj client.Object) { enginetest.GetAddon(g, k8sClient, obj) }

func waitApplied(t *testing.T, obj addonsv1alpha1.Addon, version string) {
	t.Helper()
	enginetest.WaitApplied(t, k8sClient, obj, version)
}

func waitReason(t *testing.T, obj addonsv1alpha1.Addon, reason string) metav1.Condition {
	t.Helper()
	return enginetest.WaitReason(t, k8sClient, obj, reason)
}

func createCoreDNS(t *testing.T, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	enginetest.CreateCoreDNS(t, k8sClient, cr)
}

func createReadyCoreDNS(t *testing.T, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	enginetest.CreateReadyCoreDNS(t, k8sClient, cr)
}

func updateCoreDNS(t *testing.T, cr *addonsv1alpha1.CoreDNS, mutate func(*addonsv1alpha1.CoreDNS)) {
	t.Helper()
	enginetest.UpdateCoreDNS(t, k8sClient, cr, mutate)
}

func liveObject(ref addonsv1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	return enginetest.LiveObject(k8sClient, ref)
}

func expectGone(t *testing.T, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	enginetest.ExpectGone(t, k8sClient, refs)
}

func readyCondition(status *addonsv1alpha1.AddonStatus) metav1.Condition {
	return enginetest.ReadyCondition(status)
}

func markWorkloadsAvailable(t *testing.T, ns string) {
	t.Helper()
	enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
}

func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return enginetest.MetricValue(t, name, labels)
}

func updateAddon(t *testing.T, cr addonsv1alpha1.Addon, mutate func()) {
	t.Helper()
	enginetest.UpdateAddon(t, k8sClient, cr, mutate)
}

// waitStalled waits until the add-on's Stalled condition has reason for its generation.
func waitStalled(t *testing.T, obj addonsv1alpha1.Addon, reason string) metav1.Condition {
	t.Helper()
	return enginetest.WaitCondition(t, k8sClient, obj, addonsv1alpha1.ConditionStalled, reason)
}

func waitQuiet(t *testing.T, ns string) {
	t.Helper()
	enginetest.WaitQuiet(t, requests, ns)
}
