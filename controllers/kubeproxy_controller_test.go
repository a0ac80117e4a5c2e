package controllers

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// TestKubeProxyTransforms renders the kube-proxy package with each typed field and checks
// the ConfigMap kube-proxy reads: config.conf and kubeconfig.conf.
func TestKubeProxyTransforms(t *testing.T) {
	r, err := engine.New(testMgr, KubeProxyDefinition(), engineOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		spec addonsv1alpha1.KubeProxySpec
		// config and kubeconfig must be in config.conf and kubeconfig.conf, notConfig not
		// in config.conf. Without an endpoint, kubeconfig.conf is dropped.
		config, notConfig []string
		kubeconfig        string
	}{
		{name: "defaults: iptables, no cluster CIDR, the in-cluster address",
			config:    []string{"mode: iptables", `clusterCIDR: ""`, `kubeconfig: ""`},
			notConfig: []string{"/var/lib/kube-proxy/kubeconfig.conf"}},
		{name: "apiServerEndpoint writes the kubeconfig's server",
			spec:       addonsv1alpha1.KubeProxySpec{APIServerEndpoint: "10.254.254.1:6443"},
			config:     []string{"kubeconfig: /var/lib/kube-proxy/kubeconfig.conf"},
			kubeconfig: "server: https://10.254.254.1:6443\n"},
		{name: "an IPv6 endpoint",
			spec:       addonsv1alpha1.KubeProxySpec{APIServerEndpoint: "[fd00::1]:6443"},
			kubeconfig: "server: https://[fd00::1]:6443\n"},
		{name: "clusterCIDR, dual-stack",
			spec:   addonsv1alpha1.KubeProxySpec{ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56"},
			config: []string{"clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n"}, notConfig: []string{`clusterCIDR: ""`}},
		{name: "nftables",
			spec:   addonsv1alpha1.KubeProxySpec{Mode: "nftables"},
			config: []string{"\nmode: nftables\n", "\nnftables:\n"}, notConfig: []string{"mode: iptables"}},
		{name: "ipvs leaves detectLocalMode alone",
			spec:   addonsv1alpha1.KubeProxySpec{Mode: "ipvs"},
			config: []string{"\nmode: ipvs\n", "detectLocalMode: \"\"\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// A name per case: the engine caches what it rendered for an add-on's generation.
			cr := &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kube-proxy-%d", i), Namespace: "kube-system"}, Spec: tc.spec}
			objects, err := r.Render(context.Background(), cr)
			g.Expect(err).NotTo(HaveOccurred())
			cm := engine.FindObject(objects, "ConfigMap", "kube-proxy")
			g.Expect(cm).NotTo(BeNil())
			data, _, err := cm.NestedStringMap("data")
			g.Expect(err).NotTo(HaveOccurred())
			for _, s := range tc.config {
				g.Expect(data["config.conf"]).To(ContainSubstring(s))
			}
			for _, s := range tc.notConfig {
				g.Expect(data["config.conf"]).NotTo(ContainSubstring(s))
			}
			if tc.spec.APIServerEndpoint == "" {
				g.Expect(data).NotTo(HaveKey("kubeconfig.conf"))
			} else {
				g.Expect(data["kubeconfig.conf"]).To(And(ContainSubstring(tc.kubeconfig),
					ContainSubstring("tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token")))
				g.Expect(data["kubeconfig.conf"]).NotTo(ContainSubstring("control-plane.invalid"))
			}
		})
	}
}

// TestKubeProxyValidation checks the markers of the typed fields against the API server.
func TestKubeProxyValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct {
		name, spec, message string
	}{
		{name: "endpoint without a port", spec: `{"apiServerEndpoint": "10.0.0.1"}`, message: "spec.apiServerEndpoint in body should match"},
		{name: "endpoint as a URL", spec: `{"apiServerEndpoint": "https://10.0.0.1:6443"}`, message: "spec.apiServerEndpoint in body should match"},
		{name: "clusterCIDR is an address", spec: `{"clusterCIDR": "10.244.0.1"}`, message: "clusterCIDR must be a CIDR"},
		{name: "three clusterCIDRs", spec: `{"clusterCIDR": "10.0.0.0/16,10.1.0.0/16,fd00::/56"}`, message: "clusterCIDR must be a CIDR"},
		{name: "unknown mode", spec: `{"mode": "userspace"}`, message: `spec.mode: Unsupported value: "userspace"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := createInvalid(ctx, "KubeProxy", ns, tc.spec)
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.message))
		})
	}
	g := NewWithT(t)
	valid := &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Name: "valid", Namespace: ns},
		Spec: addonsv1alpha1.KubeProxySpec{APIServerEndpoint: "api.example.org:6443", ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56", Mode: "ipvs"}}
	valid.Spec.Suspend = true
	g.Expect(k8sClient.Create(ctx, valid)).To(Succeed())
	g.Expect(k8sClient.Delete(ctx, valid)).To(Succeed())
}
