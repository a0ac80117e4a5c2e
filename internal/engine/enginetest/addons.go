package enginetest

import (
	"context"
	"testing"

	"github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// Helpers for suites that run add-on controllers: waits on an add-on's status, the part
// of the kube-controller-manager envtest lacks, and reads of events and metrics. c is the
// suite's client that reads straight from the API server.

// GetAddon reads obj fresh from the API server.
func GetAddon(g gomega.Gomega, c client.Client, obj client.Object) {
	g.ExpectWithOffset(2, c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(gomega.Succeed())
}

// ReadyCondition returns the add-on's Ready condition, or an empty one.
func ReadyCondition(status *addonsv1alpha1.AddonStatus) metav1.Condition {
	if c := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// WaitApplied waits until the add-on reports version applied for its current generation.
func WaitApplied(t *testing.T, c client.Client, obj addonsv1alpha1.Addon, version string) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Eventually(func(g gomega.Gomega) {
		GetAddon(g, c, obj)
		status := obj.GetAddonStatus()
		g.Expect(status.AppliedVersion).To(gomega.Equal(version))
		g.Expect(status.ObservedGeneration).To(gomega.Equal(obj.GetGeneration()))
		g.Expect(ReadyCondition(status).ObservedGeneration).To(gomega.Equal(obj.GetGeneration()))
	}).WithTimeout(EventuallyTimeout).WithPolling(PollInterval).Should(gomega.Succeed())
}

// WaitReason waits until the add-on's Ready condition has reason for its current generation.
func WaitReason(t *testing.T, c client.Client, obj addonsv1alpha1.Addon, reason string) metav1.Condition {
	t.Helper()
	g := gomega.NewWithT(t)
	var ready metav1.Condition
	g.Eventually(func(g gomega.Gomega) {
		GetAddon(g, c, obj)
		ready = ReadyCondition(obj.GetAddonStatus())
		g.Expect(ready.ObservedGeneration).To(gomega.Equal(obj.GetGeneration()))
		g.Expect(ready.Reason).To(gomega.Equal(reason), "Ready: %s", ready.Message)
	}).WithTimeout(EventuallyTimeout).WithPolling(PollInterval).Should(gomega.Succeed())
	return ready
}

// MarkWorkloadsAvailable writes the status that the kube-controller-manager would write
// for the namespace's Deployments, DaemonSets and PodDisruptionBudgets once their pods run. envtest
// has no controller-manager, so the test plays its part.
func MarkWorkloadsAvailable(t *testing.T, c client.Client, ns string) {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := context.Background()
	g.Eventually(func(g gomega.Gomega) {
		deployments := &appsv1.DeploymentList{}
		g.Expect(c.List(ctx, deployments, client.InNamespace(ns))).To(gomega.Succeed())
		for i := range deployments.Items {
			d := &deployments.Items[i]
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			d.Status = appsv1.DeploymentStatus{
				ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas,
				ReadyReplicas: replicas, AvailableReplicas: replicas,
				Conditions: []appsv1.DeploymentCondition{
					{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
						LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
					{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
						LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
				},
			}
			g.Expect(c.Status().Update(ctx, d)).To(gomega.Succeed())
		}
		daemonSets := &appsv1.DaemonSetList{}
		g.Expect(c.List(ctx, daemonSets, client.InNamespace(ns))).To(gomega.Succeed())
		g.Expect(len(deployments.Items) + len(daemonSets.Items)).NotTo(gomega.BeZero())
		for i := range daemonSets.Items {
			d := &daemonSets.Items[i]
			d.Status = appsv1.DaemonSetStatus{
				ObservedGeneration: d.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
				UpdatedNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2,
			}
			g.Expect(c.Status().Update(ctx, d)).To(gomega.Succeed())
		}
		pdbs := &policyv1.PodDisruptionBudgetList{}
		g.Expect(c.List(ctx, pdbs, client.InNamespace(ns))).To(gomega.Succeed())
		for i := range pdbs.Items {
			p := &pdbs.Items[i]
			p.Status = policyv1.PodDisruptionBudgetStatus{
				ObservedGeneration: p.Generation, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2, DisruptionsAllowed: 1,
				Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
					Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now()}},
			}
			g.Expect(c.Status().Update(ctx, p)).To(gomega.Succeed())
		}
	}).WithTimeout(EventuallyTimeout).WithPolling(PollInterval).Should(gomega.Succeed())
}

// LiveObject reads one object by reference straight from the API server.
func LiveObject(c client.Client, ref addonsv1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GroupVersionKind())
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, u)
	return u, err
}

// ExpectGone waits until every referenced object is deleted. envtest runs no namespace
// controller, so a deleted Namespace only gets as far as Terminating.
func ExpectGone(t *testing.T, c client.Client, refs []addonsv1alpha1.ObjectReference) {
	t.Helper()
	g := gomega.NewWithT(t)
	for _, ref := range refs {
		g.Eventually(func() bool {
			live, err := LiveObject(c, ref)
			if ref.Group == "" && ref.Kind == "Namespace" && err == nil {
				return !live.GetDeletionTimestamp().IsZero()
			}
			return apierrors.IsNotFound(err)
		}).WithTimeout(EventuallyTimeout).WithPolling(PollInterval).Should(gomega.BeTrue(), "%s still exists", ref)
	}
}

// EventsFor lists the core/v1 events of one reason in ns.
func EventsFor(g gomega.Gomega, c client.Client, ns, reason string) []corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(context.Background(), events, client.InNamespace(ns))).To(gomega.Succeed())
	var out []corev1.Event
	for _, e := range events.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// EventReasons lists the reasons of the events recorded on the add-on name in ns.
func EventReasons(t *testing.T, c client.Client, ns, name string) []string {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("events.k8s.io/v1")
	list.SetKind("EventList")
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		if n, _, _ := unstructured.NestedString(e.Object, "regarding", "name"); n == name {
			r, _, _ := unstructured.NestedString(e.Object, "reason")
			reasons = append(reasons, r)
		}
	}
	return reasons
}

// MetricValue reads one series of a kaddons metric from the controller-runtime registry.
func MetricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}

// CoreDNS versions of the repository's channels.
const (
	OldVersion = "1.11.3"
	NewVersion = "1.12.1"
)

// NewCoreDNS returns a CoreDNS named coredns in ns at version.
func NewCoreDNS(ns, version string) *addonsv1alpha1.CoreDNS {
	return &addonsv1alpha1.CoreDNS{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns},
		Spec:       addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: version}},
	}
}

// CreateCoreDNS creates cr and waits until version is applied.
func CreateCoreDNS(t *testing.T, c client.Client, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	gomega.NewWithT(t).Expect(c.Create(context.Background(), cr)).To(gomega.Succeed())
	WaitApplied(t, c, cr, cr.Spec.Version)
}

// CreateReadyCoreDNS creates cr, plays the controller-manager for its workloads and
// waits until it is Ready.
func CreateReadyCoreDNS(t *testing.T, c client.Client, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	CreateCoreDNS(t, c, cr)
	MarkWorkloadsAvailable(t, c, cr.Namespace)
	WaitReason(t, c, cr, addonsv1alpha1.ReasonReconciled)
}

// UpdateCoreDNS applies mutate to the live CoreDNS and writes it back.
func UpdateCoreDNS(t *testing.T, c client.Client, cr *addonsv1alpha1.CoreDNS, mutate func(*addonsv1alpha1.CoreDNS)) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Eventually(func(g gomega.Gomega) {
		GetAddon(g, c, cr)
		mutate(cr)
		g.Expect(c.Update(context.Background(), cr)).To(gomega.Succeed())
	}).WithTimeout(EventuallyTimeout).Should(gomega.Succeed())
}

// ClusterScoped returns the cluster-scoped entries of refs.
func ClusterScoped(refs []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, ref := range refs {
		if ref.Namespace == "" {
			out = append(out, ref)
		}
	}
	return out
}

// WithSettings runs the rest of the test with store's settings replaced by s.
func WithSettings(t *testing.T, store *engine.SettingsStore, s engine.Settings) {
	t.Helper()
	previous := store.Load()
	store.Store(s)
	t.Cleanup(func() { store.Store(previous) })
}

// UpdateAddon applies mutate to the live add-on cr (mutate changes cr) and writes it back.
func UpdateAddon(t *testing.T, c client.Client, cr addonsv1alpha1.Addon, mutate func()) {
	t.Helper()
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		GetAddon(g, c, cr)
		mutate()
		g.Expect(c.Update(context.Background(), cr)).To(gomega.Succeed())
	}).WithTimeout(EventuallyTimeout).Should(gomega.Succeed())
}

// WaitCondition waits until the add-on's condition typ has reason for its generation.
func WaitCondition(t *testing.T, c client.Client, obj addonsv1alpha1.Addon, typ, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		GetAddon(g, c, obj)
		cond := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, typ)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.ObservedGeneration).To(gomega.Equal(obj.GetGeneration()))
		g.Expect(cond.Reason).To(gomega.Equal(reason), "%s: %s", typ, cond.Message)
		found = *cond
	}).WithTimeout(EventuallyTimeout).WithPolling(PollInterval).Should(gomega.Succeed())
	return found
}

// RawPatch encodes a patch for spec.patches.
func RawPatch(s string) *runtime.RawExtension {
	return &runtime.RawExtension{Raw: []byte(s)}
}
