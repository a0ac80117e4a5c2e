package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// What the engine leaves to other field managers: the replicas of a workload a
// HorizontalPodAutoscaler scales, and the fields spec.driftExclusions names.

func TestReplicasLeftToAnHPA(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	cr.Spec.Replicas = ptr.To[int32](2)
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}

	// An HPA targets the Deployment and, as the HPA controller does, scales it with an
	// update of its own.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "coredns"},
			MinReplicas:    ptr.To[int32](2), MaxReplicas: 10,
		},
	}
	g.Expect(k8sClient.Create(ctx, hpa)).To(Succeed())
	// The engine reads HPAs from the manager's cache: wait until it holds this one, or an
	// apply racing the cache would still own the replicas.
	g.Eventually(func() error {
		return testMgr.GetCache().Get(ctx, client.ObjectKeyFromObject(hpa), &autoscalingv2.HorizontalPodAutoscaler{})
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	deploy.Spec.Replicas = ptr.To[int32](5)
	g.Expect(k8sClient.Update(ctx, deploy, client.FieldOwner("horizontal-pod-autoscaler"))).To(Succeed())

	// kaddons never writes the Deployment back, and still reports Ready.
	mark := requests.WriteCount()
	g.Consistently(func() []string { return deploymentWritesSince(mark, ns) }).
		WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(BeEmpty())
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(5)))

	// A change of the add-on applies the Deployment again: replicas are released to
	// kaddons-released at their live value, not reset to the spec's 2.
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	cr.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	g.Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(5)), "kaddons reset the replicas the HPA set")
	for _, m := range deploy.ManagedFields {
		if m.Manager == ssa.FieldManager && m.FieldsV1 != nil {
			g.Expect(m.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:replicas"`), "kaddons still owns spec.replicas")
		}
	}
}

func TestDriftExclusionLeavesAFieldToAnotherManager(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := enginetest.NewCoreDNS(ns, newVersion)
	cr.Spec.DriftExclusions = []addonsv1alpha1.DriftExclusion{{
		Target: addonsv1alpha1.ObjectSelector{Kind: "Deployment", Name: "coredns"}, Paths: []string{"/spec/replicas"}}}
	createReadyCoreDNS(t, cr)
	key := types.NamespacedName{Namespace: ns, Name: "coredns"}
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	deploy.Spec.Replicas = ptr.To[int32](4)
	g.Expect(k8sClient.Update(ctx, deploy, client.FieldOwner("someone-else"))).To(Succeed())

	mark := requests.WriteCount()
	g.Consistently(func() []string { return deploymentWritesSince(mark, ns) }).
		WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(BeEmpty())
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(*deploy.Spec.Replicas).To(Equal(int32(4)))

	// A malformed pointer is a spec error, and nothing is applied.
	getAddon(g, cr)
	patch := client.MergeFrom(cr.DeepCopy())
	cr.Spec.DriftExclusions[0].Paths = []string{"/metadata/name"}
	g.Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
	stalled := waitReason(t, cr, addonsv1alpha1.ReasonInvalidDriftExclusion)
	g.Expect(stalled.Message).To(ContainSubstring(`"/metadata/name" cannot be excluded`))
}

// deploymentWritesSince returns the manager's writes to Deployments in ns since the n-th.
func deploymentWritesSince(n int, ns string) []string {
	var out []string
	for _, w := range requests.ObjectWritesSince(n, ns) {
		if strings.Contains(w, "/deployments") {
			out = append(out, w)
		}
	}
	return out
}
