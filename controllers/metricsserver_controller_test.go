package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// metricsAPIService is the one APIService of the metrics-server packages.
var metricsAPIService = ref("apiregistration.k8s.io", "APIService", "", "v1beta1.metrics.k8s.io")

// TestMetricsServerAPIServiceWaitsForTheDeployment: the metrics-server packages put the
// APIService in the apply wave "api", after the default wave (the Deployment, its Service
// and the RBAC), so that metrics.k8s.io is never registered while nothing can serve it.
// Until the Deployment is available the APIService does not exist and the add-on is
// Progressing, WaveNotReady; once it is, the APIService is applied and the add-on is as
// ready as envtest allows (the API server cannot reach pods that nothing runs).
func TestMetricsServerAPIServiceWaitsForTheDeployment(t *testing.T) {
	for _, version := range []string{"0.7.2", "0.8.0"} {
		t.Run(version, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := newNamespace(t)
			cr := &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: ns}}
			setVersion(cr, version)
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			t.Cleanup(func() {
				// The APIService is cluster-scoped and one per cluster: the next test's
				// MetricsServer must not find this one's.
				_ = k8sClient.Delete(ctx, cr)
				expectGone(t, []addonsv1alpha1.ObjectReference{metricsAPIService})
			})

			waiting := waitCondition(t, cr, addonsv1alpha1.ConditionProgressing, addonsv1alpha1.ReasonWaveNotReady)
			g.Expect(waiting.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(waiting.Message).To(HavePrefix(`wave "api" waits for wave "default": `))
			g.Expect(waiting.Message).To(ContainSubstring("Deployment " + ns + "/metrics-server"))
			ready := readyCondition(cr.GetAddonStatus())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonWaveNotReady))

			// The default wave is applied and in the inventory; the APIService is
			// neither, and the version is not applied yet.
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "metrics-server"}, &appsv1.Deployment{})).To(Succeed())
			_, err := liveObject(metricsAPIService)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the APIService was applied before the Deployment was available: %v", err)
			g.Expect(cr.Status.AppliedVersion).To(BeEmpty())
			g.Expect(cr.Status.Inventory.Objects()).To(ContainElements(
				ref("apps", "Deployment", ns, "metrics-server"), ref("", "Service", ns, "metrics-server")))
			g.Expect(cr.Status.Inventory.Objects()).NotTo(ContainElement(metricsAPIService))

			// Once the Deployment is available, the wave "api" goes.
			markWorkloadsAvailable(t, ns)
			waitApplied(t, cr, version)
			live, err := liveObject(metricsAPIService)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(live.GetLabels()).To(HaveKeyWithValue("addons.kaddons.dev/name", cr.GetName()))
			g.Expect(live.GetAnnotations()).To(HaveKeyWithValue(addonsv1alpha1.AnnotationWave, "api"))
			service, _, _ := unstructured.NestedString(live.Object, "spec", "service", "namespace")
			g.Expect(service).To(Equal(ns))
			g.Expect(cr.Status.Inventory.Objects()).To(ContainElement(metricsAPIService))

			g.Eventually(func(g Gomega) {
				getAddon(g, cr)
				progressing := meta.FindStatusCondition(cr.GetAddonStatus().Conditions, addonsv1alpha1.ConditionProgressing)
				g.Expect(progressing).NotTo(BeNil())
				g.Expect(progressing.Reason).NotTo(Equal(addonsv1alpha1.ReasonWaveNotReady), progressing.Message)
				ready := readyCondition(cr.GetAddonStatus())
				g.Expect(ready.ObservedGeneration).To(Equal(cr.GetGeneration()))
				expectOnlyAPIServiceUnavailable(g, ready, ns)
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())

			g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
			g.Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), &addonsv1alpha1.MetricsServer{}))
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue(), "the add-on was not released")
			expectGone(t, []addonsv1alpha1.ObjectReference{metricsAPIService})
		})
	}
}
