package engine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// Apply waves: a package's objects grouped by the wave annotations, each wave applied
// only when the waves it waits for are healthy.

const (
	// versionWaves has its Service in the wave "publish", after the default wave.
	versionWaves = "1.12.1-waves"
	// versionWaveCycle has waves that wait for each other.
	versionWaveCycle = "1.12.1-wave-cycle"
)

func TestWaveWaitsForTheWaveBefore(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, versionWaves)
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())

	waiting := enginetest.WaitCondition(t, k8sClient, cr, addonsv1alpha1.ConditionProgressing, addonsv1alpha1.ReasonWaveNotReady)
	g.Expect(waiting.Message).To(HavePrefix(`wave "publish" waits for wave "default": `))
	g.Expect(waiting.Message).To(ContainSubstring(`Deployment ` + ns + `/coredns`))
	// The default wave is applied and in the inventory; the Service is not, and the
	// version is not applied yet.
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &appsv1.Deployment{})).To(Succeed())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kube-dns"}, &corev1.Service{}))).
		To(BeTrue(), "the Service was applied before the Deployment was healthy")
	getAddon(g, cr)
	g.Expect(cr.Status.AppliedVersion).To(BeEmpty())
	g.Expect(cr.Status.Inventory.Objects()).To(ContainElement(HaveField("Kind", "Deployment")))
	g.Expect(cr.Status.Inventory.Objects()).NotTo(ContainElement(HaveField("Kind", "Service")))

	// Once the Deployment (and the PodDisruptionBudget) are healthy, the next wave goes.
	markWorkloadsAvailable(t, ns)
	waitApplied(t, cr, versionWaves)
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kube-dns"}, &corev1.Service{})).To(Succeed())
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Objects()).To(ContainElement(HaveField("Kind", "Service")))
}

func TestWaveCycleIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, versionWaveCycle)
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())

	stalled := waitStalled(t, cr, addonsv1alpha1.ReasonWaveCycle)
	g.Expect(stalled.Message).To(ContainSubstring(`the package's apply wave "config" is in a cycle: config -> publish -> config`))
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Len()).To(BeZero())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &appsv1.Deployment{}))).
		To(BeTrue(), "a package with a wave cycle was applied")
}
