package main

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// TestTree lists an add-on whose inventory names a ConfigMap (kstatus Current as soon as
// it exists), a Deployment no controller rolls out here (InProgress) and a Service that
// does not exist (NotFound).
func TestTree(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	labels := map[string]string{"app": "coredns"}
	g.Expect(testClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}})).To(Succeed())
	g.Expect(testClient.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Image: "coredns:1.12.1"}}}}},
	})).To(Succeed())
	cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
	createReady(t, cr, "1.12.1")
	cr.Status.Inventory = addonsv1alpha1.NewInventory([]addonsv1alpha1.ObjectReference{
		{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "coredns"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: "coredns"},
		{Version: "v1", Kind: "Service", Namespace: ns, Name: "kube-dns"},
	})
	g.Expect(testClient.Status().Update(ctx, cr)).To(Succeed())

	for _, kind := range []string{"coredns", "CoreDNS", "cdns"} {
		code, out, stderr := runPlugin(t, "", "tree", kind+"/coredns", "-n", ns, "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(0), stderr)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		g.Expect(lines).To(HaveLen(4), out)
		g.Expect(lines[0]).To(MatchRegexp(`^CoreDNS/` + ns + `/coredns\s+Ready=True\s+Reconciled: 1\.12\.1 is ready$`))
		g.Expect(lines[1]).To(MatchRegexp(`^├── ConfigMap/` + ns + `/coredns\s+Current\s+Resource is always ready$`))
		g.Expect(lines[2]).To(MatchRegexp(`^├── Deployment/` + ns + `/coredns\s+InProgress\s+\S`))
		g.Expect(lines[3]).To(MatchRegexp(`^└── Service/` + ns + `/kube-dns\s+NotFound$`))
	}

	t.Run("an add-on that does not exist", func(t *testing.T) {
		g := NewWithT(t)
		code, _, stderr := runPlugin(t, "", "tree", "coredns/other", "-n", ns, "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("CoreDNS " + ns + "/other not found"))
	})
}
