package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// setOperatorConfig creates or updates the OperatorConfig named default with spec.
func setOperatorConfig(t *testing.T, spec configv1alpha1.OperatorConfigSpec) *configv1alpha1.OperatorConfig {
	t.Helper()
	oc := &configv1alpha1.OperatorConfig{ObjectMeta: metav1.ObjectMeta{Name: configv1alpha1.OperatorConfigName}}
	NewWithT(t).Eventually(func(g Gomega) {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(oc), oc)
		if apierrors.IsNotFound(err) {
			oc.Spec = spec
			g.Expect(k8sClient.Create(context.Background(), oc)).To(Succeed())
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		oc.Spec = spec
		g.Expect(k8sClient.Update(context.Background(), oc)).To(Succeed())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	return oc
}

// waitOperatorConfig waits until the OperatorConfig's Ready condition is about its
// generation and has reason.
func waitOperatorConfig(t *testing.T, oc *configv1alpha1.OperatorConfig, reason string) metav1.Condition {
	t.Helper()
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(oc), oc)).To(Succeed())
		g.Expect(oc.Status.ObservedGeneration).To(Equal(oc.Generation))
		c := meta.FindStatusCondition(oc.Status.Conditions, configv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(oc.Generation))
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		ready = *c
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return ready
}

// deleteOperatorConfig deletes the OperatorConfig and waits until the file's settings
// are in force again.
func deleteOperatorConfig(t *testing.T) {
	oc := &configv1alpha1.OperatorConfig{ObjectMeta: metav1.ObjectMeta{Name: configv1alpha1.OperatorConfigName}}
	if err := k8sClient.Delete(context.Background(), oc); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting the OperatorConfig: %v", err)
	}
	NewWithT(t).Eventually(func() string { return settings.Load().DefaultChannel }).
		WithTimeout(eventuallyTimeout).Should(Equal(fileSettings.DefaultChannel))
}

func TestOperatorConfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t.Cleanup(func() { deleteOperatorConfig(t) })
	ns := newNamespace(t)
	// One CoreDNS follows the default channel down as well as up, one follows it but never
	// downgrades (the default), one pins its version.
	following := newCoreDNS(ns, "")
	following.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{AllowDowngrade: true}
	g.Expect(k8sClient.Create(ctx, following)).To(Succeed())
	waitApplied(t, following, newVersion)
	holding := newCoreDNS(newNamespace(t), "")
	g.Expect(k8sClient.Create(ctx, holding)).To(Succeed())
	waitApplied(t, holding, newVersion)
	pinnedNS := newNamespace(t)
	pinned := newCoreDNS(pinnedNS, newVersion)
	createCoreDNS(t, pinned)
	image := func(g Gomega, ns string) string {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
		return d.Spec.Template.Spec.Containers[0].Image
	}

	t.Run("a new default channel re-applies the add-ons that follow it", func(t *testing.T) {
		g := NewWithT(t)
		generation := following.Generation
		oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{DefaultChannel: "legacy"})
		ready := waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(oc.Status.Effective.DefaultChannel).To(Equal("legacy"))
		g.Expect(oc.Status.Effective.LogLevel).To(Equal("info"), "the file's value where the resource sets none")
		waitApplied(t, following, oldVersion)
		g.Expect(following.Generation).To(Equal(generation), "the CoreDNS itself was not changed")
		getAddon(g, pinned)
		g.Expect(pinned.Status.AppliedVersion).To(Equal(newVersion), "a pinned version does not follow the channel")
		// The channel moved down: without allowDowngrade the add-on stays, and says why.
		g.Eventually(func(g Gomega) {
			getAddon(g, holding)
			ready := meta.FindStatusCondition(holding.Status.Conditions, addonsv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Message).To(ContainSubstring(addonsv1alpha1.ReasonDowngradeRefused + ": channel legacy lists coredns " +
				oldVersion + ", older than the running " + newVersion))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
		g.Expect(holding.Status.AppliedVersion).To(Equal(newVersion), "a channel-following add-on was downgraded")
	})

	t.Run("a registry mirror rewrites the images", func(t *testing.T) {
		g := NewWithT(t)
		oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{DefaultChannel: "legacy", RegistryMirror: "mirror.example.com/k8s"})
		waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)
		g.Eventually(func(g Gomega) {
			g.Expect(image(g, ns)).To(Equal("mirror.example.com/k8s/coredns/coredns:v" + oldVersion))
			g.Expect(image(g, pinnedNS)).To(Equal("mirror.example.com/k8s/coredns/coredns:v" + newVersion))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	})

	t.Run("an invalid change is rejected and the settings in force stay", func(t *testing.T) {
		g := NewWithT(t)
		oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{DefaultChannel: "nightly", RegistryMirror: "https://bad/",
			PausedAddonKinds: []string{"CoreDSN"}, ResyncInterval: &metav1.Duration{Duration: time.Second}})
		ready := waitOperatorConfig(t, oc, configv1alpha1.ReasonInvalidConfiguration)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		for _, field := range []string{"spec.defaultChannel", "spec.registryMirror", "spec.pausedAddonKinds[0]", "spec.resyncInterval"} {
			g.Expect(ready.Message).To(ContainSubstring(field))
		}
		g.Expect(oc.Status.Effective.DefaultChannel).To(Equal("legacy"))
		g.Expect(oc.Status.Effective.RegistryMirror).To(Equal("mirror.example.com/k8s"))
		g.Expect(settings.Load().RegistryMirror).To(Equal("mirror.example.com/k8s"))
		g.Consistently(func(g Gomega) {
			g.Expect(image(g, ns)).To(Equal("mirror.example.com/k8s/coredns/coredns:v" + oldVersion))
		}).WithTimeout(time.Second).Should(Succeed())

		// The operator still takes the next valid change.
		oc = setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{DefaultChannel: "legacy", RegistryMirror: "mirror2.example.com"})
		waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)
		g.Eventually(func(g Gomega) {
			g.Expect(image(g, ns)).To(Equal("mirror2.example.com/coredns/coredns:v" + oldVersion))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	})

	t.Run("a paused kind stops its reconciliation", func(t *testing.T) {
		g := NewWithT(t)
		oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{DefaultChannel: "legacy", RegistryMirror: "mirror2.example.com",
			PausedAddonKinds: []string{"CoreDNS"}})
		waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)
		ready := waitReason(t, pinned, addonsv1alpha1.ReasonPaused)
		g.Expect(ready.Message).To(ContainSubstring("paused by the operator configuration"))
		updateCoreDNS(t, pinned, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](4) })
		waitPausedWithPendingChange(t, pinned)
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: pinnedNS, Name: "coredns"}, d)).To(Succeed())
		g.Expect(*d.Spec.Replicas).NotTo(BeEquivalentTo(4), "a paused kind was applied")
	})

	t.Run("deleting it returns to the file's settings", func(t *testing.T) {
		deleteOperatorConfig(t)
		waitApplied(t, following, newVersion)
		NewWithT(t).Eventually(func(g Gomega) {
			g.Expect(image(g, ns)).To(Equal("registry.k8s.io/coredns/coredns:v" + newVersion))
			g.Expect(image(g, pinnedNS)).To(Equal("registry.k8s.io/coredns/coredns:v" + newVersion))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
		waitReason(t, pinned, addonsv1alpha1.ReasonChildrenNotReady)
	})
	g.Expect(following.Name).To(Equal("coredns"))
}
