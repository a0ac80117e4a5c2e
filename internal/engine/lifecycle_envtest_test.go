package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The reconciler's lifecycle: pause, child modes, dependencies, deletion policy, upgrade
// rollback, metrics and drift events, ownership conflicts, and Degraded after Ready.

func TestPause(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		pause   func(*addonsv1alpha1.CoreDNS)
		unpause func(*addonsv1alpha1.CoreDNS)
	}{
		{
			name: "annotation",
			pause: func(c *addonsv1alpha1.CoreDNS) {
				metav1.SetMetaDataAnnotation(&c.ObjectMeta, addonsv1alpha1.AnnotationPaused, "true")
			},
			unpause: func(c *addonsv1alpha1.CoreDNS) { delete(c.Annotations, addonsv1alpha1.AnnotationPaused) },
		},
		{
			name:    "spec.suspend",
			pause:   func(c *addonsv1alpha1.CoreDNS) { c.Spec.Suspend = true },
			unpause: func(c *addonsv1alpha1.CoreDNS) { c.Spec.Suspend = false },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cr := enginetest.NewCoreDNS(ns, oldVersion)
			createCoreDNS(t, cr)

			updateCoreDNS(t, cr, tc.pause)
			g.Eventually(func(g Gomega) {
				getAddon(g, cr)
				g.Expect(readyCondition(&cr.Status.AddonStatus).Reason).To(Equal(addonsv1alpha1.ReasonPaused))
				g.Expect(cr.Status.Phase).To(Equal("Paused"))
			}).WithTimeout(eventuallyTimeout).Should(Succeed())

			// While paused, neither a spec change nor drift is acted on.
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
			cm := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, cm)).To(Succeed())
			g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
			g.Consistently(func(g Gomega) {
				getAddon(g, cr)
				g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
				err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &corev1.ConfigMap{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a paused add-on re-created its ConfigMap")
			}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

			updateCoreDNS(t, cr, tc.unpause)
			waitApplied(t, cr, newVersion)
			g.Eventually(func() error {
				return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &corev1.ConfigMap{})
			}).WithTimeout(eventuallyTimeout).Should(Succeed())
		})
	}
}

func TestChildModes(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}

	// A reconcile that was already running when the annotation arrived may still write
	// the object once; each check therefore edits again until a whole reconcile, started
	// by a spec change, has left the edit in place.
	replicas := int32(2)
	t.Run("ensure-exists keeps a hand-edited Corefile", func(t *testing.T) {
		g := NewWithT(t)
		cm := &corev1.ConfigMap{}
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
			if !strings.Contains(cm.Data["Corefile"], "whoami") {
				metav1.SetMetaDataAnnotation(&cm.ObjectMeta, addonsv1alpha1.AnnotationMode, addonsv1alpha1.ModeEnsureExists)
				cm.Data["Corefile"] = ".:53 {\n    whoami\n}\n"
				g.Expect(k8sClient.Update(ctx, cm)).To(Succeed())
			}
			// A spec change re-applies everything else, but not the hand-edited ConfigMap.
			replicas++
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(replicas) })
			waitApplied(t, cr, oldVersion)
			d := &appsv1.Deployment{}
			g.Expect(k8sClient.Get(ctx, key, d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(Equal(replicas)))
			g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
			g.Expect(cm.Data["Corefile"]).To(ContainSubstring("whoami"))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())

		// Deleted, it is created again from the package.
		g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, cm)).To(Succeed())
			g.Expect(cm.Data["Corefile"]).To(ContainSubstring("kubernetes cluster.local"))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("ignore leaves a child alone", func(t *testing.T) {
		g := NewWithT(t)
		svcKey := types.NamespacedName{Namespace: ns, Name: "kube-dns"}
		svc := &corev1.Service{}
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, svcKey, svc)).To(Succeed())
			if len(svc.Spec.Ports) != 1 {
				metav1.SetMetaDataAnnotation(&svc.ObjectMeta, addonsv1alpha1.AnnotationMode, addonsv1alpha1.ModeIgnore)
				svc.Spec.Ports = svc.Spec.Ports[:1]
				g.Expect(k8sClient.Update(ctx, svc)).To(Succeed())
			}
			replicas++
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(replicas) })
			waitApplied(t, cr, oldVersion)
			g.Expect(k8sClient.Get(ctx, svcKey, svc)).To(Succeed())
			g.Expect(svc.Spec.Ports).To(HaveLen(1))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("an unknown mode is reported and nothing is applied", func(t *testing.T) {
		g := NewWithT(t)
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, key, d)).To(Succeed())
		metav1.SetMetaDataAnnotation(&d.ObjectMeta, addonsv1alpha1.AnnotationMode, "EnsureExists")
		g.Expect(k8sClient.Update(ctx, d)).To(Succeed())
		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(replicas + 1) })
		ready := waitReason(t, cr, addonsv1alpha1.ReasonInvalidMode)
		g.Expect(ready.Message).To(ContainSubstring(`Deployment ` + ns + `/coredns has annotation addons.kaddons.dev/mode="EnsureExists"`))
		g.Expect(k8sClient.Get(ctx, key, d)).To(Succeed())
		g.Expect(d.Spec.Replicas).To(HaveValue(Equal(replicas)), "nothing may be applied while a mode is invalid")

		// Fixing the annotation resumes without a spec change.
		delete(d.Annotations, addonsv1alpha1.AnnotationMode)
		g.Expect(k8sClient.Update(ctx, d)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(Equal(replicas + 1)))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("ignored children survive deletion", func(t *testing.T) {
		g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), &addonsv1alpha1.CoreDNS{}))
		}).WithTimeout(eventuallyTimeout).Should(BeTrue())
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kube-dns"}, &corev1.Service{})).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, key, &appsv1.Deployment{}))
		}).WithTimeout(eventuallyTimeout).Should(BeTrue())
	})
}

func TestDependsOn(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)

	dependent := enginetest.NewCoreDNS(newNamespace(t), newVersion)
	dependent.Spec.DependsOn = []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: "coredns", Namespace: ns}}
	g.Expect(k8sClient.Create(ctx, dependent)).To(Succeed())

	// The dependency is in another namespace: the dependent learns only whether it is
	// Ready, never whether it exists or why it is not Ready.
	notReady := "waiting for CoreDNS " + ns + "/coredns: not Ready"
	ready := waitReason(t, dependent, addonsv1alpha1.ReasonDependencyNotReady)
	g.Expect(ready.Message).To(Equal(notReady))
	g.Expect(dependent.Status.Inventory.Objects()).To(BeEmpty(), "nothing is applied before the dependency is Ready")

	base := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, base)
	waitReason(t, base, addonsv1alpha1.ReasonChildrenNotReady)
	getAddon(g, dependent)
	g.Expect(readyCondition(&dependent.Status.AddonStatus).Message).To(Equal(notReady), "the same words as before it existed")

	markWorkloadsAvailable(t, ns)
	waitReason(t, base, addonsv1alpha1.ReasonReconciled)
	// The dependency turning Ready is what wakes the dependent up.
	g.Expect(dependent.Status.Inventory.Objects()).To(BeEmpty())
	waitApplied(t, dependent, newVersion)

	t.Run("a cycle is stalled, not a deadlock", func(t *testing.T) {
		g := NewWithT(t)
		a := enginetest.NewCoreDNS(ns, newVersion)
		a.Name = "cycle-a"
		a.Spec.DependsOn = []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: "cycle-b"}}
		b := enginetest.NewCoreDNS(ns, newVersion)
		b.Name = "cycle-b"
		b.Spec.DependsOn = []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: "cycle-a", Namespace: ns}}
		g.Expect(k8sClient.Create(ctx, a)).To(Succeed())
		g.Expect(k8sClient.Create(ctx, b)).To(Succeed())
		for _, cr := range []*addonsv1alpha1.CoreDNS{a, b} {
			ready := waitReason(t, cr, addonsv1alpha1.ReasonDependencyCycle)
			g.Expect(ready.Message).To(ContainSubstring("spec.dependsOn forms a cycle: CoreDNS " + ns + "/" + cr.Name))
			g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)).To(BeTrue())
		}
	})
}

func TestDeletionPolicyOrphan(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	cr.Spec.DeletionPolicy = addonsv1alpha1.DeletionPolicyOrphan
	createCoreDNS(t, cr)
	inventory := cr.Status.Inventory.Objects()

	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), &addonsv1alpha1.CoreDNS{}))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())

	for _, ref := range inventory {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred(), "%s was deleted", ref)
		for _, label := range []string{ssa.LabelManagedBy, ssa.LabelKind, ssa.LabelNamespace, ssa.LabelName} {
			g.Expect(live.GetLabels()).NotTo(HaveKey(label), "%s", ref)
		}
		g.Expect(live.GetOwnerReferences()).To(BeEmpty(), "%s", ref)
	}
	role := &rbacv1.ClusterRole{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "system:coredns-" + ns}, role)).To(Succeed())
	g.Expect(role.Labels).To(HaveKeyWithValue("kubernetes.io/bootstrapping", "rbac-defaults"), "the package's own labels stay")
}

func TestUpgradeRollback(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		rollback bool
	}{
		{name: "rolls back to the last healthy version", rollback: true},
		{name: "stays on the failed version when rollback is off", rollback: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cr := enginetest.NewCoreDNS(ns, oldVersion)
			cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Timeout: &metav1.Duration{Duration: 2 * time.Second}, Rollback: ptr.To(tc.rollback)}
			createReadyCoreDNS(t, cr)
			g.Expect(cr.Status.LastHealthyVersion).To(Equal(oldVersion))

			// The new version never becomes available: nothing plays the controller-manager now.
			updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
			var degraded *metav1.Condition
			g.Eventually(func(g Gomega) {
				getAddon(g, cr)
				degraded = meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
				g.Expect(degraded).NotTo(BeNil())
				g.Expect(degraded.Reason).To(Equal(addonsv1alpha1.ReasonUpgradeFailed))
				g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
			}).WithTimeout(eventuallyTimeout).Should(Succeed())
			g.Expect(degraded.Message).To(ContainSubstring("upgrade to " + newVersion))
			g.Expect(cr.Status.Upgrade.FailedVersion).To(Equal(newVersion))

			deploy := &appsv1.Deployment{}
			key := types.NamespacedName{Namespace: ns, Name: "coredns"}
			if !tc.rollback {
				g.Expect(degraded.Message).To(ContainSubstring("rollback is disabled"))
				g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
				g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
				g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + newVersion))
				return
			}

			waitApplied(t, cr, oldVersion)
			g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
			g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + oldVersion))
			markWorkloadsAvailable(t, ns)
			g.Eventually(func(g Gomega) {
				getAddon(g, cr)
				g.Expect(readyCondition(&cr.Status.AddonStatus).Status).To(Equal(metav1.ConditionTrue))
				degraded = meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
				g.Expect(degraded.Reason).To(Equal(addonsv1alpha1.ReasonUpgradeFailed))
				g.Expect(degraded.Message).To(ContainSubstring("rolled back to " + oldVersion))
			}).WithTimeout(eventuallyTimeout).Should(Succeed())

			// The failed version is not tried again while the spec still asks for it.
			g.Consistently(func(g Gomega) {
				getAddon(g, cr)
				g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
			}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

			events := &corev1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(ns))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(HaveField("Reason", engine.EventRolledBack)))
		})
	}
}

func TestMetricsAndDriftEvents(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	instance := map[string]string{"kind": "CoreDNS", "namespace": ns, "name": "coredns"}

	g.Eventually(func() float64 { return metricValue(t, "kaddons_managed_objects", instance) }).
		WithTimeout(eventuallyTimeout).Should(BeEquivalentTo(7))
	g.Expect(metricValue(t, "kaddons_addon_ready", instance)).To(BeEquivalentTo(0))
	markWorkloadsAvailable(t, ns)
	g.Eventually(func() float64 { return metricValue(t, "kaddons_addon_ready", instance) }).
		WithTimeout(eventuallyTimeout).Should(BeEquivalentTo(1))
	g.Expect(metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "CoreDNS", "result": "success"})).To(BeNumerically(">", 0))

	drifts := metricValue(t, "kaddons_drift_corrections_total", map[string]string{"kind": "CoreDNS"})
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, cm)).To(Succeed())
	g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() float64 {
		return metricValue(t, "kaddons_drift_corrections_total", map[string]string{"kind": "CoreDNS"})
	}).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", drifts))
	g.Eventually(func(g Gomega) {
		events := &corev1.EventList{}
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range events.Items {
			if e.Reason == engine.EventDriftCorrected {
				notes = append(notes, e.Message)
			}
		}
		g.Expect(strings.Join(notes, "\n")).To(ContainSubstring("ConfigMap " + ns + "/coredns"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())

	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func() float64 { return metricValue(t, "kaddons_managed_objects", instance) }).
		WithTimeout(eventuallyTimeout).Should(BeEquivalentTo(0))
}

func TestOwnershipConflict(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	first := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, first)
	before := map[addonsv1alpha1.ObjectReference]string{}
	for _, ref := range first.Status.Inventory.Objects() {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		before[ref] = live.GetResourceVersion()
	}

	second := enginetest.NewCoreDNS(ns, newVersion)
	second.Name = "second"
	g.Expect(k8sClient.Create(ctx, second)).To(Succeed())
	ready := waitReason(t, second, addonsv1alpha1.ReasonOwnershipConflict)
	g.Expect(ready.Message).To(ContainSubstring("belongs to coredns " + ns + "/coredns"))
	g.Expect(second.Status.Inventory.Objects()).To(BeEmpty())
	for ref, rv := range before {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.GetResourceVersion()).To(Equal(rv), "%s of the first CoreDNS changed", ref)
	}
}

func TestDegradedAfterReady(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)

	// The pods stop being available, with no change to the spec.
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, deploy)).To(Succeed())
	deploy.Status.AvailableReplicas, deploy.Status.ReadyReplicas = 0, 0
	deploy.Status.Conditions[0].Status = corev1.ConditionFalse
	g.Expect(k8sClient.Status().Update(ctx, deploy)).To(Succeed())

	ready := waitReason(t, cr, addonsv1alpha1.ReasonChildrenNotReady)
	g.Expect(ready.Message).To(ContainSubstring("Deployment " + ns + "/coredns"))
	// It stays Degraded through the reconciles that follow, not only the first one.
	g.Consistently(func(g Gomega) {
		getAddon(g, cr)
		degraded := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
		g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(degraded.Message).To(HavePrefix("was Ready, now "))
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	markWorkloadsAvailable(t, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)).To(BeFalse())
}
