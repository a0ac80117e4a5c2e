package controllers

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

const (
	eventuallyTimeout = enginetest.EventuallyTimeout
	pollInterval      = enginetest.PollInterval
)

// The helpers below are enginetest's, on the suite's client.

func getAddon(g Gomega, obj client.Object) { enginetest.GetAddon(g, k8sClient, obj) }

func readyCondition(status *addonsv1alpha1.AddonStatus) metav1.Condition {
	return enginetest.ReadyCondition(status)
}

func waitApplied(t *testing.T, obj addonsv1alpha1.Addon, version string) {
	t.Helper()
	enginetest.WaitApplied(t, k8sClient, obj, version)
}

func waitReason(t *testing.T, obj addonsv1alpha1.Addon, reason string) metav1.Condition {
	t.Helper()
	return enginetest.WaitReason(t, k8sClient, obj, reason)
}

func markWorkloadsAvailable(t *testing.T, ns string) {
	t.Helper()
	enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
}

func liveObject(ref addonsv1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	return enginetest.LiveObject(k8sClient, ref)
}

func expectGone(t *testing.T, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	enginetest.ExpectGone(t, k8sClient, refs)
}

func eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	return enginetest.EventReasons(t, k8sClient, ns, name)
}

func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return enginetest.MetricValue(t, name, labels)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	return enginetest.NewNamespace(t, k8sClient)
}

// unstructuredObject builds add-ons from raw JSON, so tests can send what a typed client
// cannot (unknown fields, wrong types).
type unstructuredObject = unstructured.Unstructured

// engineOptions are the options the suite's manager runs with.
func engineOptions() engine.Options {
	return engine.Options{Catalog: source, Sealer: testSealer}
}

// waitPausedWithPendingChange waits until a paused add-on reports a spec change it holds
// back: Ready keeps reason Paused and the generation last applied, behind the current one.
func waitPausedWithPendingChange(t *testing.T, obj addonsv1alpha1.Addon) metav1.Condition {
	t.Helper()
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, obj)
		ready = readyCondition(obj.GetAddonStatus())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonPaused))
		g.Expect(ready.Message).To(ContainSubstring("is not applied"))
		g.Expect(ready.ObservedGeneration).To(BeNumerically("<", obj.GetGeneration()))
		g.Expect(obj.GetAddonStatus().ObservedGeneration).To(Equal(ready.ObservedGeneration))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return ready
}

func expectUntouched(t *testing.T, objects []*unstructured.Unstructured) {
	t.Helper()
	enginetest.ExpectUntouched(t, k8sClient, objects)
}

func updateAddon(t *testing.T, cr addonsv1alpha1.Addon, mutate func()) {
	t.Helper()
	enginetest.UpdateAddon(t, k8sClient, cr, mutate)
}

func waitCondition(t *testing.T, obj addonsv1alpha1.Addon, typ, reason string) metav1.Condition {
	t.Helper()
	return enginetest.WaitCondition(t, k8sClient, obj, typ, reason)
}

func clientAs(t *testing.T, ns, name string) client.Client {
	t.Helper()
	return enginetest.ClientAs(t, cfg, ns, name)
}

func allowedPowers(g Gomega, user, ns string) map[string]bool {
	return enginetest.AllowedPowers(g, k8sClient, user, ns)
}

// withSettings runs the rest of the test with the manager's settings replaced.
func withSettings(t *testing.T, s engine.Settings) {
	t.Helper()
	enginetest.WithSettings(t, settings, s)
}

// createInvalid creates, with strict field validation, an add-on of kind in namespace
// whose spec is the raw JSON spec, as a user's manifest reaches the API server, and
// returns the API server's answer; the validation tests expect a refusal.
func createInvalid(ctx context.Context, kind, namespace, spec string) error {
	body := fmt.Sprintf(`{"apiVersion":"addons.kaddons.dev/v1alpha1","kind":%q,"metadata":{"name":"invalid","namespace":%q},"spec":%s}`,
		kind, namespace, spec)
	obj := &unstructuredObject{}
	if err := obj.UnmarshalJSON([]byte(body)); err != nil {
		return fmt.Errorf("the test's own manifest: %w", err)
	}
	return k8sClient.Create(ctx, obj, client.FieldValidation(metav1.FieldValidationStrict))
}
