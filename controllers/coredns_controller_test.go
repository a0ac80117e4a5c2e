package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

const (
	oldVersion = enginetest.OldVersion
	newVersion = enginetest.NewVersion
)

// The CoreDNS helpers are enginetest's, on the suite's client.

func newCoreDNS(ns, version string) *addonsv1alpha1.CoreDNS {
	return enginetest.NewCoreDNS(ns, version)
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

// createCoreDNSWithDeployment creates a CoreDNS add-on of newVersion in a namespace of
// its own and returns it with its Deployment as first applied.
func createCoreDNSWithDeployment(t *testing.T) (*addonsv1alpha1.CoreDNS, *appsv1.Deployment) {
	t.Helper()
	cr := newCoreDNS(newNamespace(t), newVersion)
	createCoreDNS(t, cr)
	deploy := &appsv1.Deployment{}
	NewWithT(t).Expect(k8sClient.Get(context.Background(),
		types.NamespacedName{Namespace: cr.Namespace, Name: "coredns"}, deploy)).To(Succeed())
	return cr, deploy
}

// rawPatch encodes a patch for spec.patches.
func rawPatch(s string) *runtime.RawExtension { return enginetest.RawPatch(s) }

func TestCoreDNSCreate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)

	inventory := cr.Status.Inventory.Objects()
	kinds := map[string]bool{}
	for _, ref := range inventory {
		kinds[ref.Kind] = true
	}
	g.Expect(kinds).To(HaveLen(7), "inventory: %v", inventory)
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} {
		g.Expect(kinds).To(HaveKey(kind))
	}

	for _, ref := range inventory {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred(), "%s", ref)
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelManagedBy, ssa.ManagedByValue), "%s", ref)
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelKind, "coredns"), "%s", ref)
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelNamespace, ns), "%s", ref)
		g.Expect(live.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, "coredns"), "%s", ref)

		managers := map[string]metav1.ManagedFieldsOperationType{}
		for _, mf := range live.GetManagedFields() {
			managers[mf.Manager] = mf.Operation
		}
		g.Expect(managers).To(HaveKeyWithValue(ssa.FieldManager, metav1.ManagedFieldsOperationApply), "%s", ref)

		if ref.Namespace == "" {
			g.Expect(live.GetOwnerReferences()).To(BeEmpty(), "cluster-scoped %s cannot have a namespaced owner", ref)
			g.Expect(ref.Name).To(HaveSuffix("-"+ns), "cluster RBAC outside kube-system is suffixed with the namespace")
		} else {
			g.Expect(ref.Namespace).To(Equal(ns))
			g.Expect(live.GetOwnerReferences()).To(ConsistOf(HaveField("UID", cr.UID)), "%s", ref)
		}
	}

	binding := &rbacv1.ClusterRoleBinding{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "system:coredns-" + ns}, binding)).To(Succeed())
	g.Expect(binding.RoleRef.Name).To(Equal("system:coredns-" + ns))
	g.Expect(binding.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}))

	g.Expect(cr.Finalizers).To(ContainElement(engine.Finalizer))
	g.Expect(cr.Status.LastAppliedTime).NotTo(BeNil())

	// Without a controller-manager nothing runs the pods: Ready waits and says for what.
	ready := waitReason(t, cr, addonsv1alpha1.ReasonChildrenNotReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Message).To(ContainSubstring("Deployment " + ns + "/coredns"))
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionProgressing)).To(BeTrue())

	markWorkloadsAvailable(t, ns)
	ready = waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(ready.Message).To(ContainSubstring("coredns " + oldVersion + " is ready"))
	g.Expect(cr.Status.Healthy).To(BeTrue())

	events := &corev1.EventList{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		reasons := make([]string, 0, len(events.Items))
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ConsistOf(engine.EventReady), "a first install records its Ready event only")
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

func TestCoreDNSDefaultChannel(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, "")
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())

	// The expectation comes from the channel file itself, not from the Source under test.
	data, err := os.ReadFile(filepath.Join("..", "channels", "stable"))
	g.Expect(err).NotTo(HaveOccurred())
	var channel struct {
		Manifests []struct{ Name, Version string } `json:"manifests"`
	}
	g.Expect(yaml.UnmarshalStrict(data, &channel)).To(Succeed())
	want := ""
	for _, m := range channel.Manifests {
		if m.Name == "coredns" {
			want = m.Version
		}
	}
	g.Expect(want).NotTo(BeEmpty(), "channels/stable lists no coredns")
	waitApplied(t, cr, want)
	g.Expect(cr.Spec.DNSDomain).To(Equal("cluster.local"), "the API server defaults dnsDomain")
}

func TestCoreDNSUpgrade(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)

	uids := map[addonsv1alpha1.ObjectReference]types.UID{}
	for _, ref := range cr.Status.Inventory.Objects() {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		uids[ref] = live.GetUID()
	}

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	waitApplied(t, cr, newVersion)

	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, deploy)).To(Succeed())
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/coredns/coredns:v" + newVersion))
	g.Expect(cr.Status.Inventory.Objects()).To(HaveLen(len(uids)))
	for ref, uid := range uids {
		live, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.GetUID()).To(Equal(uid), "%s was replaced instead of updated in place", ref)
	}
}

func TestCoreDNSTypedFieldsAndPatches(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)

	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, key("coredns"), cm)).To(Succeed())
	svc := &corev1.Service{}
	g.Expect(k8sClient.Get(ctx, key("kube-dns"), svc)).To(Succeed())

	t.Run("replicas changes only the Deployment", func(t *testing.T) {
		g := NewWithT(t)
		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](5) })
		waitApplied(t, cr, newVersion)
		deploy := &appsv1.Deployment{}
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key("coredns"), deploy)).To(Succeed())
			g.Expect(deploy.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())

		after := &corev1.ConfigMap{}
		g.Expect(k8sClient.Get(ctx, key("coredns"), after)).To(Succeed())
		g.Expect(after.ResourceVersion).To(Equal(cm.ResourceVersion), "the ConfigMap was rewritten")
		afterSvc := &corev1.Service{}
		g.Expect(k8sClient.Get(ctx, key("kube-dns"), afterSvc)).To(Succeed())
		g.Expect(afterSvc.ResourceVersion).To(Equal(svc.ResourceVersion), "the Service was rewritten")
	})

	t.Run("corefile replaces the Corefile", func(t *testing.T) {
		g := NewWithT(t)
		corefile := ".:53 {\n    errors\n    forward . 9.9.9.9\n}\n"
		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Corefile = corefile })
		waitApplied(t, cr, newVersion)
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key("coredns"), cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveKeyWithValue("Corefile", corefile))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("a patch changes its target", func(t *testing.T) {
		g := NewWithT(t)
		updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = []*runtime.RawExtension{rawPatch(
				`{"apiVersion":"v1","kind":"Service","metadata":{"name":"kube-dns","annotations":{"example.com/team":"dns"}}}`)}
		})
		waitApplied(t, cr, newVersion)
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key("kube-dns"), svc)).To(Succeed())
			g.Expect(svc.Annotations).To(HaveKeyWithValue("example.com/team", "dns"))
			g.Expect(svc.Annotations).To(HaveKeyWithValue("prometheus.io/scrape", "true"), "the patch merges, it does not replace")
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
}

func TestCoreDNSDrift(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createCoreDNS(t, cr)
	generation := cr.Generation
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

	t.Run("a deleted ConfigMap comes back", func(t *testing.T) {
		g := NewWithT(t)
		cm := &corev1.ConfigMap{}
		g.Expect(k8sClient.Get(ctx, key("coredns"), cm)).To(Succeed())
		g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) {
			restored := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, key("coredns"), restored)).To(Succeed())
			g.Expect(restored.UID).NotTo(Equal(cm.UID))
			g.Expect(restored.Data).To(HaveKey("Corefile"))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("a Deployment scaled by hand is scaled back", func(t *testing.T) {
		g := NewWithT(t)
		deploy := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, key("coredns"), deploy)).To(Succeed())
		scale := client.MergeFrom(deploy.DeepCopy())
		deploy.Spec.Replicas = ptr.To[int32](7)
		g.Expect(k8sClient.Patch(ctx, deploy, scale, client.FieldOwner("kubectl-scale"))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key("coredns"), deploy)).To(Succeed())
			g.Expect(deploy.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	t.Run("a deleted cluster-scoped child comes back", func(t *testing.T) {
		g := NewWithT(t)
		role := &rbacv1.ClusterRole{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "system:coredns-" + ns}, role)).To(Succeed())
		g.Expect(k8sClient.Delete(ctx, role)).To(Succeed())
		g.Eventually(func(g Gomega) {
			restored := &rbacv1.ClusterRole{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "system:coredns-" + ns}, restored)).To(Succeed())
			g.Expect(restored.UID).NotTo(Equal(role.UID))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
	})

	getAddon(g, cr)
	g.Expect(cr.Generation).To(Equal(generation), "drift must be undone without touching the CoreDNS")
}

func TestCoreDNSDelete(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// before runs after the add-on is applied and before it is deleted.
		before func(t *testing.T, ns string)
	}{
		{name: "every child goes, cluster-scoped included"},
		{name: "children already gone do not hold the finalizer", before: func(t *testing.T, ns string) {
			g := NewWithT(t)
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns-" + ns}}
			g.Expect(k8sClient.Delete(ctx, role)).To(Succeed())
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
			g.Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cr := newCoreDNS(ns, newVersion)
			createCoreDNS(t, cr)
			inventory := cr.Status.Inventory.Objects()
			g.Expect(inventory).To(HaveLen(7))
			if tc.before != nil {
				tc.before(t, ns)
			}

			g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
			g.Eventually(func() bool {
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), &addonsv1alpha1.CoreDNS{})
				return apierrors.IsNotFound(err)
			}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue(), "the CoreDNS was not released")
			// envtest runs no garbage collector: every child, namespaced or not, must be
			// deleted by kaddons itself.
			expectGone(t, inventory)
		})
	}
}

func TestCoreDNSBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		mutate  func(*addonsv1alpha1.CoreDNS)
		reason  string
		message string
	}{
		{
			name:    "unknown version",
			mutate:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = "9.9.9" },
			reason:  addonsv1alpha1.ReasonVersionNotFound,
			message: `coredns has no version "9.9.9" (available: 1.11.3, 1.12.1`,
		},
		{
			name:    "version with path characters",
			mutate:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = "../x" },
			reason:  addonsv1alpha1.ReasonInvalidVersion,
			message: `version "../x" is not a valid version`,
		},
		{
			name:    "unknown channel",
			mutate:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = ""; c.Spec.Channel = "nightly" },
			reason:  addonsv1alpha1.ReasonChannelNotFound,
			message: `channel "nightly" does not exist`,
		},
		{
			name: "patch that matches no object",
			mutate: func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.Patches = []*runtime.RawExtension{rawPatch(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"cordns"},"spec":{"replicas":3}}`)}
			},
			reason:  addonsv1alpha1.ReasonPatchTargetNotFound,
			message: "patches[0] targets Deployment cordns (apps/v1), which the package does not contain",
		},
		{
			name: "malformed patch",
			mutate: func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.Patches = []*runtime.RawExtension{rawPatch(`{"apiVersion":"apps/v1","metadata":{"name":"coredns"}}`)}
			},
			reason:  addonsv1alpha1.ReasonInvalidPatch,
			message: "patches[0] has no kind",
		},
		{
			name: "patch that does not fit its target",
			mutate: func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.Patches = []*runtime.RawExtension{rawPatch(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":"three"}}`)}
			},
			reason:  addonsv1alpha1.ReasonInvalidPatch,
			message: "patches[0] (Deployment coredns) cannot be applied",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cr := newCoreDNS(ns, oldVersion)
			createCoreDNS(t, cr)
			inventory := cr.Status.Inventory.Objects()
			before := map[addonsv1alpha1.ObjectReference]string{}
			for _, ref := range inventory {
				live, err := liveObject(ref)
				g.Expect(err).NotTo(HaveOccurred())
				before[ref] = fmt.Sprintf("%s/%s", live.GetUID(), live.GetResourceVersion())
			}

			updateCoreDNS(t, cr, tc.mutate)
			ready := waitReason(t, cr, tc.reason)
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Message).To(ContainSubstring(tc.message))
			stalled := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)
			g.Expect(stalled).NotTo(BeNil())
			g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(stalled.Reason).To(Equal(tc.reason))

			// What was running is untouched: same objects, same versions, same inventory.
			g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
			g.Expect(cr.Status.Inventory.Objects()).To(Equal(inventory))
			for ref, was := range before {
				live, err := liveObject(ref)
				g.Expect(err).NotTo(HaveOccurred(), "%s was deleted", ref)
				g.Expect(fmt.Sprintf("%s/%s", live.GetUID(), live.GetResourceVersion())).To(Equal(was), "%s changed", ref)
			}

			// The error is terminal, so controller-runtime does not retry it in a loop.
			r, err := engine.New(testMgr, CoreDNSDefinition(), engineOptions())
			g.Expect(err).NotTo(HaveOccurred())
			_, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
			g.Expect(err).To(MatchError(reconcile.TerminalError(nil)))
			g.Expect(err.Error()).To(ContainSubstring(tc.message))
		})
	}
}

func TestCoreDNSValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct {
		name    string
		spec    string
		message string
	}{
		{name: "negative replicas", spec: `{"replicas": -1}`, message: "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"},
		{name: "malformed clusterIP", spec: `{"clusterIP": "10.96.0.300"}`, message: "clusterIP must be an IPv4 or IPv6 address"},
		{name: "unknown field", spec: `{"replica": 2}`, message: `unknown field "spec.replica"`},
		{name: "bad dnsDomain", spec: `{"dnsDomain": "Cluster_Local"}`, message: "spec.dnsDomain in body should match"},
		{name: "invalid upgrade timeout", spec: `{"upgrade": {"timeout": "ten minutes"}}`, message: "timeout must be a duration between 1s and 24h"},
		{name: "zero upgrade timeout", spec: `{"upgrade": {"timeout": "0s"}}`, message: "timeout must be a duration between 1s and 24h"},
		{name: "unknown deletion policy", spec: `{"deletionPolicy": "Keep"}`, message: `spec.deletionPolicy: Unsupported value: "Keep"`},
		{name: "corefile with a custom domain", spec: `{"dnsDomain": "example.org", "corefile": ".:53 {}"}`, message: "dnsDomain cannot be combined with corefile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := createInvalid(ctx, "CoreDNS", ns, tc.spec)
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.message))
		})
	}

	long := strings.Repeat("a", 64)
	g := NewWithT(t)
	err := k8sClient.Create(ctx, &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: long, Namespace: ns}})
	g.Expect(err).To(MatchError(ContainSubstring("name must be at most 63 characters")))
}

// TestCoreDNSPatchWithUnknownField checks that a field its kind does not have is refused
// by the API server and reported, never dropped: the engine applies built-in kinds with
// fieldValidation=Ignore, under which the API server still refuses an unknown field.
func TestCoreDNSPatchWithUnknownField(t *testing.T) {
	g := NewWithT(t)
	cr, before := createCoreDNSWithDeployment(t)

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Patches = []*runtime.RawExtension{rawPatch(
			`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicaz":3}}`)}
	})
	ready := waitReason(t, cr, addonsv1alpha1.ReasonApplyFailed)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Message).To(ContainSubstring("Deployment"))
	g.Expect(ready.Message).To(ContainSubstring(".spec.replicaz: field not declared in schema"))

	after := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(before), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the Deployment was written")
}
