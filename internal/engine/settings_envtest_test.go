package engine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// The operator-wide settings (engine.Settings): a registry mirror, paused kinds.

// touch changes an annotation of the add-on, which reconciles it.
func touch(t *testing.T, cr addonsv1alpha1.Addon, value string) {
	t.Helper()
	updateAddon(t, cr, func() {
		a := cr.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["test.kaddons.dev/touch"] = value
		cr.SetAnnotations(a)
	})
}

func TestRegistryMirror(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	image := func(g Gomega) string {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
		return d.Spec.Template.Spec.Containers[0].Image
	}
	g.Expect(image(g)).To(Equal("registry.k8s.io/coredns/coredns:v" + newVersion))

	withSettings(t, engine.Settings{RegistryMirror: "mirror.example.com/k8s"})
	touch(t, cr, "mirror")
	g.Eventually(func(g Gomega) {
		g.Expect(image(g)).To(Equal("mirror.example.com/k8s/coredns/coredns:v" + newVersion))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())

	settings.Store(engine.Settings{})
	touch(t, cr, "no-mirror")
	g.Eventually(func(g Gomega) {
		g.Expect(image(g)).To(Equal("registry.k8s.io/coredns/coredns:v" + newVersion))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

func TestPausedKind(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)

	withSettings(t, engine.Settings{PausedKinds: []string{"CoreDNS"}})
	applied := cr.Generation
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	var ready metav1.Condition
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		ready = readyCondition(&cr.Status.AddonStatus)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonPaused))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	g.Expect(ready.Message).To(ContainSubstring("every CoreDNS is paused by the operator configuration"))
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion), "a paused kind was applied")
	// The version change is not applied, and the status does not claim it is.
	g.Expect(ready.ObservedGeneration).To(Equal(applied))
	g.Expect(cr.Status.ObservedGeneration).To(Equal(applied))

	// Other kinds (the suite's second test Definition) go on.
	d := &addonsv1alpha1.NodeLocalDNS{}
	d.Name, d.Namespace = "nodelocaldns", ns
	g.Expect(k8sClient.Create(context.Background(), d)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getAddon(g, d)
		g.Expect(d.Status.AppliedVersion).NotTo(BeEmpty())
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())

	settings.Store(engine.Settings{})
	touch(t, cr, "unpaused")
	waitApplied(t, cr, newVersion)
}
