package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kubeproxies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kubeproxies/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kubeproxies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings;roles;rolebindings,verbs=get;list;watch;create;patch;delete
// kaddons can only bind kube-proxy to system:node-proxier with the permissions it holds itself:
// +kubebuilder:rbac:groups="",resources=services;endpoints,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list;watch

// Names and values in the kube-proxy packages that typed fields edit.
const (
	kubeProxyConfigMap     = "kube-proxy"
	kubeProxyConfigKey     = "config.conf"
	kubeProxyKubeconfigKey = "kubeconfig.conf"
	packagedKubeconfig     = "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf"
	packagedServer         = "server: https://control-plane.invalid:6443"
	packagedClusterCIDR    = `clusterCIDR: ""`
	packagedProxyMode      = "mode: iptables"
)

// KubeProxyDefinition declares the kube-proxy add-on to the shared engine. kube-proxy
// runs on the host network and tolerates every taint, so it starts on nodes that are not
// Ready yet, before any pod network.
func KubeProxyDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.KubeProxy{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			rbacv1.SchemeGroupVersion.WithKind("Role"),
			rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
		},
		Transforms: []engine.ObjectTransform{transformKubeProxy},
	}
}

// transformKubeProxy applies the KubeProxy spec's typed fields to the kube-proxy
// ConfigMap: the mode and cluster CIDR of config.conf, and the API server that
// kubeconfig.conf names, or no kubeconfig (the in-cluster address) without one.
func transformKubeProxy(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.KubeProxy)
	if !ok {
		return fmt.Errorf("expected a KubeProxy, got %T", in.Addon)
	}
	spec := cr.Spec
	cm, err := engine.MustFindObject(objects, "ConfigMap", kubeProxyConfigMap)
	if err != nil {
		return err
	}
	var config []string
	if spec.Mode != "" {
		config = append(config, packagedProxyMode, "mode: "+string(spec.Mode))
	}
	if spec.ClusterCIDR != "" {
		config = append(config, packagedClusterCIDR, "clusterCIDR: "+spec.ClusterCIDR)
	}
	if spec.APIServerEndpoint == "" {
		config = append(config, packagedKubeconfig, `kubeconfig: ""`)
	}
	if len(config) > 0 {
		if err := engine.ReplaceInData(cm, kubeProxyConfigKey, strings.NewReplacer(config...)); err != nil {
			return err
		}
	}
	if spec.APIServerEndpoint != "" {
		server := strings.NewReplacer(packagedServer, "server: https://"+spec.APIServerEndpoint)
		return engine.ReplaceInData(cm, kubeProxyKubeconfigKey, server)
	}
	return engine.RemoveData(cm, kubeProxyKubeconfigKey)
}
