package main

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// handleRequests plays the operator for addon until the test ends: it copies every new
// requested-at annotation into status.lastHandledReconcileAt, with a Ready condition of
// ready and reason for the current generation, as the engine does.
func handleRequests(t *testing.T, addon addonsv1alpha1.Addon, ready metav1.ConditionStatus, reason string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		ticker := time.NewTicker(50 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			obj := addon.DeepCopyObject().(addonsv1alpha1.Addon)
			if err := testClient.Get(ctx, client.ObjectKeyFromObject(addon), obj); err != nil {
				continue
			}
			requested := obj.GetAnnotations()[addonsv1alpha1.AnnotationRequestedAt]
			s := obj.GetAddonStatus()
			if requested == "" || requested == s.LastHandledReconcileAt {
				continue
			}
			s.LastHandledReconcileAt = requested
			s.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: ready, Reason: reason,
				Message: "handled " + requested, ObservedGeneration: obj.GetGeneration(), LastTransitionTime: metav1.Now()}}
			_ = testClient.Status().Update(ctx, obj)
		}
	}()
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	plugin := func(args ...string) (int, string, string) {
		return runPlugin(t, "", append(args, "-n", ns, "--kubeconfig", testKubeconfig)...)
	}
	annotation := func(g Gomega, addon client.Object) string {
		g.Expect(testClient.Get(ctx, client.ObjectKeyFromObject(addon), addon)).To(Succeed())
		return addon.GetAnnotations()[addonsv1alpha1.AnnotationRequestedAt]
	}

	t.Run("--wait=false sets the annotation to the current time", func(t *testing.T) {
		g := NewWithT(t)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nowait"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		before := time.Now()
		code, _, stderr := plugin("reconcile", "CoreDNS/nowait", "--wait=false")
		g.Expect(code).To(Equal(0), stderr)
		at, err := time.Parse(time.RFC3339Nano, annotation(g, cr))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(at).To(BeTemporally("~", before, time.Minute))
		g.Expect(stderr).To(ContainSubstring("requested a reconcile of CoreDNS " + ns + "/nowait"))
	})

	t.Run("nothing handles it: exit 1 after the timeout", func(t *testing.T) {
		g := NewWithT(t)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unhandled"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		code, _, stderr := plugin("reconcile", "coredns/unhandled", "--timeout", "2s")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("the operator did not handle the reconcile requested at " + annotation(g, cr) + " within 2s"))
	})

	t.Run("handled and Ready: exit 0", func(t *testing.T) {
		g := NewWithT(t)
		cr := &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		handleRequests(t, cr, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled)
		code, out, stderr := plugin("reconcile", "metricsservers/metrics-server", "--timeout", "30s")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(out).To(Equal("MetricsServer " + ns + "/metrics-server reconciled: Ready=True, Reconciled: handled " + annotation(g, cr) + "\n"))
	})

	t.Run("handled and not Ready: exit 1 with the reason", func(t *testing.T) {
		g := NewWithT(t)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "failing"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		handleRequests(t, cr, metav1.ConditionFalse, addonsv1alpha1.ReasonApplyFailed)
		code, _, stderr := plugin("reconcile", "coredns/failing", "--timeout", "30s")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("CoreDNS " + ns + "/failing is not ready: Ready=False, ApplyFailed: handled " + annotation(g, cr)))
	})

	t.Run("suspend, reconcile refused, resume", func(t *testing.T) {
		g := NewWithT(t)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "suspended"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())

		code, out, stderr := plugin("suspend", "coredns/suspended")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(out).To(Equal("CoreDNS " + ns + "/suspended suspended\n"))
		g.Expect(testClient.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
		g.Expect(cr.Spec.Suspend).To(BeTrue())

		code, _, stderr = plugin("reconcile", "coredns/suspended")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("is suspended (spec.suspend): resume it first"))
		g.Expect(annotation(g, cr)).To(BeEmpty(), "a refused reconcile writes nothing")

		code, _, stderr = plugin("resume", "coredns/suspended", "--wait=false")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(testClient.Get(ctx, client.ObjectKeyFromObject(cr), cr)).To(Succeed())
		g.Expect(cr.Spec.Suspend).To(BeFalse())
		g.Expect(annotation(g, cr)).NotTo(BeEmpty(), "resume asks for a reconcile")

		// resume waits as reconcile does.
		g.Expect(testClient.Patch(ctx, cr, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"suspend":true}}`)))).To(Succeed())
		handleRequests(t, cr, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled)
		code, out, stderr = plugin("resume", "coredns/suspended", "--timeout", "30s")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(out).To(ContainSubstring("CoreDNS " + ns + "/suspended reconciled: Ready=True"))
	})

	t.Run("arguments", func(t *testing.T) {
		for _, tc := range []struct {
			name, arg, want string
		}{
			{name: "unknown kind", arg: "deployment/coredns", want: `unknown add-on kind "deployment": the add-on kinds are CoreDNS, Dashboard, ` +
				`KubeProxy, KubeRouter, MetricsServer, NodeLocalDNS, Package`},
			{name: "no name", arg: "coredns", want: `"coredns" is not KIND/NAME`},
			{name: "not found", arg: "coredns/absent", want: "CoreDNS " + ns + "/absent not found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				code, _, stderr := plugin("reconcile", tc.arg)
				g.Expect(code).To(Equal(1))
				g.Expect(stderr).To(ContainSubstring(tc.want))
			})
		}
	})
}
