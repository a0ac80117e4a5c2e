package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// Upgrade policies against the real API server: what a pin, a channel's move, an approval
// and a Kubernetes range do to the Deployment that runs, and what the status says.

// writeChannel writes the channel file name, listing coredns at versions, into the
// suite's channels folder, and removes it when the test ends.
func writeChannel(t *testing.T, name string, versions ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("manifests:\n")
	for _, v := range versions {
		fmt.Fprintf(&b, "- name: coredns\n  version: %s\n", v)
	}
	path := filepath.Join(source.Dir(), name)
	// Written beside and renamed, so that a reconcile never reads half a file.
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}

// channelName is a channel of the test's own, named after its namespace.
func channelName(ns string) string { return "test-" + ns }

// nudge changes an annotation of cr, so that it is reconciled with the channels as they
// are now (the suite does not watch the channels folder).
func nudge(t *testing.T, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, "example.com/nudge", c.ResourceVersion)
	})
}

// runningImage is the image of the add-on's Deployment.
func runningImage(g Gomega, ns string) string {
	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
	return d.Spec.Template.Spec.Containers[0].Image
}

// waitCondition waits until the add-on's condition typ has status and reason for its
// current generation, and returns it.
func waitCondition(t *testing.T, cr *addonsv1alpha1.CoreDNS, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, cr)
		c := meta.FindStatusCondition(cr.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "no %s condition", typ)
		g.Expect(c.ObservedGeneration).To(Equal(cr.Generation))
		g.Expect(c.Reason).To(Equal(reason), "%s: %s", typ, c.Message)
		g.Expect(c.Status).To(Equal(status), "%s: %s", typ, c.Message)
		found = *c
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	return found
}

// createFollowing creates a CoreDNS of ns that follows channel with upgrade, plays the
// controller-manager and waits until it is Ready on version.
func createFollowing(t *testing.T, ns, channel, version string, upgrade *addonsv1alpha1.UpgradeSpec) *addonsv1alpha1.CoreDNS {
	t.Helper()
	cr := enginetest.NewCoreDNS(ns, "")
	cr.Spec.Channel, cr.Spec.Upgrade = channel, upgrade
	NewWithT(t).Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
	enginetest.WaitApplied(t, k8sClient, cr, version)
	enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	return cr
}

func TestPinnedDowngradeIsRefusedThenAllowed(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = oldVersion })
	stalled := waitCondition(t, cr, addonsv1alpha1.ConditionStalled, metav1.ConditionTrue, addonsv1alpha1.ReasonDowngradeRefused)
	g.Expect(stalled.Message).To(ContainSubstring("spec.version " + oldVersion + " is older than the running coredns " + newVersion))
	g.Expect(stalled.Message).To(ContainSubstring("spec.upgrade.allowDowngrade"))
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	g.Expect(runningImage(g, ns)).To(HaveSuffix(":v"+newVersion), "a refused downgrade changed what runs")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{AllowDowngrade: true}
	})
	waitApplied(t, cr, oldVersion)
	g.Expect(runningImage(g, ns)).To(HaveSuffix(":v" + oldVersion))
}

func TestChannelMoves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upgrade   *addonsv1alpha1.UpgradeSpec
		from, to  []string
		stays     string
		reason    string
		available string
	}{
		{name: "up by default", from: []string{oldVersion}, to: []string{newVersion}, stays: newVersion, reason: addonsv1alpha1.ReasonReconciled},
		{name: "never down by default", from: []string{newVersion}, to: []string{oldVersion}, stays: newVersion,
			reason: addonsv1alpha1.ReasonDowngradeRefused},
		{name: "down with allowDowngrade", upgrade: &addonsv1alpha1.UpgradeSpec{AllowDowngrade: true},
			from: []string{newVersion}, to: []string{oldVersion}, stays: oldVersion, reason: addonsv1alpha1.ReasonReconciled},
		{name: "SameMinor holds a new minor", upgrade: &addonsv1alpha1.UpgradeSpec{Policy: addonsv1alpha1.UpgradePolicySameMinor},
			from: []string{oldVersion}, to: []string{newVersion}, stays: oldVersion, reason: addonsv1alpha1.ReasonUpgradeOutsidePolicy,
			available: newVersion},
		{name: "Manual waits for approval", upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual},
			from: []string{oldVersion}, to: []string{newVersion}, stays: oldVersion, reason: addonsv1alpha1.ReasonUpgradeAwaitingApproval,
			available: newVersion},
		{name: "a version for another Kubernetes is passed over", from: []string{oldVersion}, to: []string{"1.99.0", newVersion},
			stays: newVersion, reason: addonsv1alpha1.ReasonReconciled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			writeChannel(t, channelName(ns), tc.from...)
			cr := createFollowing(t, ns, channelName(ns), tc.from[0], tc.upgrade)

			writeChannel(t, channelName(ns), tc.to...)
			nudge(t, cr)
			if tc.stays != tc.from[0] {
				enginetest.WaitApplied(t, k8sClient, cr, tc.stays)
				enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
			}
			ready := waitCondition(t, cr, addonsv1alpha1.ConditionReady, metav1.ConditionTrue, tc.reason)
			g.Expect(cr.Status.AppliedVersion).To(Equal(tc.stays), "Ready: %s", ready.Message)
			g.Expect(cr.Status.AvailableVersion).To(Equal(tc.available))
			g.Expect(runningImage(g, ns)).To(HaveSuffix(":v" + strings.TrimSuffix(tc.stays, ".0")))
		})
	}
}

func TestManualApproval(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	writeChannel(t, channelName(ns), oldVersion)
	cr := createFollowing(t, ns, channelName(ns), oldVersion, &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual})

	writeChannel(t, channelName(ns), newVersion)
	nudge(t, cr)
	ready := waitCondition(t, cr, addonsv1alpha1.ConditionReady, metav1.ConditionTrue, addonsv1alpha1.ReasonUpgradeAwaitingApproval)
	g.Expect(ready.Message).To(ContainSubstring("set spec.upgrade.approvedVersion: " + newVersion))
	g.Expect(cr.Status.AvailableVersion).To(Equal(newVersion))
	g.Expect(cr.Status.Ready).To(BeTrue(), "an add-on that waits for approval serves, and says so")

	// The approval moves it, and nothing is pending any more.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Upgrade.ApprovedVersion = newVersion })
	waitApplied(t, cr, newVersion)
	enginetest.MarkWorkloadsAvailable(t, k8sClient, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	g.Expect(cr.Status.AvailableVersion).To(BeEmpty())
	g.Expect(runningImage(g, ns)).To(HaveSuffix(":v" + newVersion))
}

func TestKubernetesRanges(t *testing.T) {
	t.Run("a channel with no version for the cluster is Stalled", func(t *testing.T) {
		ns := newNamespace(t)
		writeChannel(t, channelName(ns), "1.99.0")
		cr := enginetest.NewCoreDNS(ns, "")
		cr.Spec.Channel = channelName(ns)
		NewWithT(t).Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
		stalled := waitCondition(t, cr, addonsv1alpha1.ConditionStalled, metav1.ConditionTrue, addonsv1alpha1.ReasonKubernetesVersionUnsupported)
		NewWithT(t).Expect(stalled.Message).To(ContainSubstring("lists no coredns version that supports Kubernetes v1.37"))
		NewWithT(t).Expect(stalled.Message).To(ContainSubstring("1.99.0 supports >=1.99.0"))
	})
	t.Run("a pin outside the range is refused unless overridden", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		cr := enginetest.NewCoreDNS(ns, "1.99.0")
		g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
		stalled := waitCondition(t, cr, addonsv1alpha1.ConditionStalled, metav1.ConditionTrue, addonsv1alpha1.ReasonKubernetesVersionUnsupported)
		g.Expect(stalled.Message).To(ContainSubstring("package coredns/1.99.0: the bundle supports Kubernetes >=1.99.0, the cluster runs v1.37"))
		g.Expect(stalled.Message).To(ContainSubstring("set spec.upgrade.ignoreKubernetesVersion: true"))
		g.Expect(cr.Status.Inventory.Len()).To(BeZero(), "nothing is applied")

		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{IgnoreKubernetesVersion: true}
		})
		waitApplied(t, cr, "1.99.0")
	})
}

func TestUpgradeable(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	// 1.13.0 supports Kubernetes up to 1.37, the suite's: the next minor, 1.38, blocks it.
	cr := enginetest.NewCoreDNS(ns, "1.13.0")
	createCoreDNS(t, cr)
	blocked := waitCondition(t, cr, addonsv1alpha1.ConditionUpgradeable, metav1.ConditionFalse, addonsv1alpha1.ReasonNextKubernetesVersionUnsupported)
	g.Expect(blocked.Message).To(Equal("coredns 1.13.0 supports Kubernetes >=1.21.0 <1.38.0, not 1.38: coredns 1.14.6 does; " +
		"move to it (spec.version, or a channel that lists it) before the cluster upgrade"))

	// Moving to the version it names lifts the block.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = "1.14.6" })
	ok := waitCondition(t, cr, addonsv1alpha1.ConditionUpgradeable, metav1.ConditionTrue, addonsv1alpha1.ReasonKubernetesVersionSupported)
	g.Expect(ok.Message).To(Equal("coredns 1.14.6 supports Kubernetes 1.38 (>=1.21.0)"))
}

// TestUpgradingOneInstanceLeavesAnother upgrades one of two CoreDNS of one version: the
// other's objects are not written at all.
func TestUpgradingOneInstanceLeavesAnother(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	upgraded, other := enginetest.NewCoreDNS(newNamespace(t), oldVersion), enginetest.NewCoreDNS(newNamespace(t), oldVersion)
	createReadyCoreDNS(t, upgraded)
	createReadyCoreDNS(t, other)
	before := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: other.Namespace, Name: "coredns"}, before)).To(Succeed())

	updateCoreDNS(t, upgraded, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	waitApplied(t, upgraded, newVersion)
	g.Expect(runningImage(g, upgraded.Namespace)).To(HaveSuffix(":v" + newVersion))

	after := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: other.Namespace, Name: "coredns"}, after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the other instance's Deployment was written")
	g.Expect(after.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + oldVersion))
	getAddon(g, other)
	g.Expect(other.Status.AppliedVersion).To(Equal(oldVersion))
}
