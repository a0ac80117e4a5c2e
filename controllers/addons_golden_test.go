package controllers

import (
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
)

// TestAddonsGolden renders every shipped version of every add-on besides CoreDNS (which
// has TestCoreDNSGolden) with its defaults and with every typed field set.
func TestAddonsGolden(t *testing.T) {
	shipped := channels.NewCatalog(filepath.Join("..", "channels"), "")
	resources := &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	for _, tc := range []struct {
		name string
		def  engine.Definition
		// component is the package to render, when the kind's Prototype names none (Package).
		component string
		// newCR returns the add-on to render for a version.
		newCR func(version string) addonsv1alpha1.Addon
	}{
		{name: "defaults", def: MetricsServerDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system"}}
		}},
		{name: "custom", def: MetricsServerDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.MetricsServer{
				ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system"},
				Spec: addonsv1alpha1.MetricsServerSpec{
					Replicas:                     ptr.To[int32](2),
					Resources:                    resources,
					KubeletInsecureTLS:           true,
					KubeletPreferredAddressTypes: []addonsv1alpha1.KubeletAddressType{"InternalIP", "Hostname"},
					MetricResolution:             &metav1.Duration{Duration: 30 * time.Second},
				},
			}
		}},
		{name: "tenant-namespace", def: MetricsServerDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Name: "metrics", Namespace: "monitoring"}}
		}},
		{name: "defaults", def: DashboardDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: "kube-system"}}
		}},
		{name: "custom", def: DashboardDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			d := &addonsv1alpha1.Dashboard{
				ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: "kube-system"},
				Spec: addonsv1alpha1.DashboardSpec{
					Replicas:       ptr.To[int32](2),
					Resources:      resources,
					MetricsScraper: ptr.To(false),
				},
			}
			d.Spec.TargetNamespace = "ui"
			return d
		}},
		{name: "in-own-namespace", def: DashboardDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: "kubernetes-dashboard"}}
		}},
		{name: "defaults", def: NodeLocalDNSDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Name: "nodelocaldns", Namespace: "kube-system"}}
		}},
		{name: "custom", def: NodeLocalDNSDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.NodeLocalDNS{
				ObjectMeta: metav1.ObjectMeta{Name: "nodelocaldns", Namespace: "kube-system"},
				Spec: addonsv1alpha1.NodeLocalDNSSpec{
					LocalIP:      "169.254.25.10",
					ClusterDNSIP: "10.100.0.10",
					DNSDomain:    "corp.example.org",
					Resources:    resources,
				},
			}
		}},
		{name: "defaults", def: KubeProxyDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}}
		}},
		{name: "custom", def: KubeProxyDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.KubeProxy{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
				Spec: addonsv1alpha1.KubeProxySpec{
					APIServerEndpoint: "10.254.254.1:6443",
					ClusterCIDR:       "10.244.0.0/16,fd00:10:244::/56",
					Mode:              "nftables",
				},
			}
		}},
		{name: "defaults", def: KubeRouterDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.KubeRouter{ObjectMeta: metav1.ObjectMeta{Name: "kube-router", Namespace: "kube-system"}}
		}},
		{name: "custom", def: KubeRouterDefinition(), newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.KubeRouter{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-router", Namespace: "kube-system"},
				Spec: addonsv1alpha1.KubeRouterSpec{
					APIServerEndpoint: "10.254.254.1:6443",
					NetworkPolicy:     ptr.To(false),
					CNIConfDir:        "/var/lib/kaddons-node/cni/net.d",
					CNIBinDir:         "/var/lib/kaddons-node/cni/bin",
				},
			}
		}},
		// The generic kind, on the packages of the typed kinds: no home namespace, so the
		// shared names get the suffix even in kube-system.
		{name: "package", def: PackageDefinition(), component: "metrics-server", newCR: func(v string) addonsv1alpha1.Addon {
			return &addonsv1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "metrics", Namespace: "kube-system"},
				Spec: addonsv1alpha1.PackageSpec{Package: "metrics-server"}}
		}},
		// make addon (hack/addon) writes each new kind's defaults case above this line.
	} {
		component := tc.def.Prototype.ComponentName()
		if tc.component != "" {
			component = tc.component
		}
		for _, version := range shipped.Versions(component) {
			t.Run(component+"/"+version+"/"+tc.name, func(t *testing.T) {
				cr := tc.newCR(version)
				setVersion(cr, version)
				expectGolden(t, tc.def, cr, component+"-"+version+"-"+tc.name)
			})
		}
	}
}
