package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// dashboardCSRFSecret is the Secret the Dashboard fills with its CSRF key at start-up.
const dashboardCSRFSecret = "kubernetes-dashboard-csrf"

// TestDashboardCSRFSecretIsSetOnce checks the Dashboard definition's default drift
// exclusion: the CSRF key that the Dashboard writes into its Secret at run time (as a
// field manager of its own) is never reset. Over a fixed window after that write, and
// after the reconcile it sets off, kaddons writes nothing to the Secret; a later change
// of the add-on applies the package again and still leaves the key alone.
func TestDashboardCSRFSecretIsSetOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	childNS := ns + "-ui"
	cr := &addonsv1alpha1.Dashboard{}
	cr.Name, cr.Namespace = "dashboard", ns
	cr.Spec.TargetNamespace = childNS
	cr.Spec.Version = "2.7.0"
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	waitApplied(t, cr, "2.7.0")
	markWorkloadsAvailable(t, childNS)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	enginetest.WaitQuiet(t, requests, ns)

	key := types.NamespacedName{Namespace: childNS, Name: dashboardCSRFSecret}
	secret := &corev1.Secret{}
	g.Expect(k8sClient.Get(ctx, key, secret)).To(Succeed())
	g.Expect(secret.Labels).To(HaveKeyWithValue(ssa.LabelName, cr.Name), "kaddons created the Secret")
	csrf := []byte(strings.Repeat("k", 256))

	// The Dashboard writes its key, which also sets off a reconcile of the add-on.
	reconciles := metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "Dashboard", "result": "success"})
	mark := requests.WriteCount()
	secret.Data = map[string][]byte{"csrf": csrf}
	g.Expect(k8sClient.Update(ctx, secret, client.FieldOwner("dashboard"))).To(Succeed())
	g.Eventually(func() float64 {
		return metricValue(t, "kaddons_reconciles_total", map[string]string{"kind": "Dashboard", "result": "success"})
	}).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", reconciles), "the Secret's change did not reconcile the add-on")
	time.Sleep(enginetest.QuietWindow)
	g.Expect(secretWritesSince(mark, childNS, dashboardCSRFSecret)).To(BeEmpty(), "kaddons wrote the CSRF Secret")
	g.Expect(k8sClient.Get(ctx, key, secret)).To(Succeed())
	g.Expect(secret.Data).To(HaveKeyWithValue("csrf", csrf))

	// A change of the add-on applies the package again; the key stays the Dashboard's.
	updateAddon(t, cr, func() { cr.Spec.Replicas = ptr.To[int32](2) })
	g.Eventually(func(g Gomega) {
		deploy := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: childNS, Name: dashboardDeployment}, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Replicas).To(Equal(ptr.To[int32](2)))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	waitApplied(t, cr, "2.7.0")
	g.Expect(k8sClient.Get(ctx, key, secret)).To(Succeed())
	g.Expect(secret.Data).To(HaveKeyWithValue("csrf", csrf), "kaddons reset the CSRF key")
	for _, m := range secret.ManagedFields {
		if m.Manager == ssa.FieldManager && m.FieldsV1 != nil {
			g.Expect(m.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:data"`), "kaddons still owns the Secret's data")
		}
	}
}

// secretWritesSince returns the manager's writes to the Secret name in ns since the n-th.
func secretWritesSince(n int, ns, name string) []string {
	var out []string
	for _, w := range requests.ObjectWritesSince(n, ns) {
		if strings.HasSuffix(w, "/namespaces/"+ns+"/secrets/"+name) {
			out = append(out, w)
		}
	}
	return out
}
