package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create;patch;delete
// kaddons can only grant kube-router the permissions it holds itself:
// +kubebuilder:rbac:groups="",resources=namespaces;pods;services;nodes;endpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io;extensions,resources=networkpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=services/status,verbs=update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Names in the kube-router packages that typed fields edit.
const (
	kubeRouterDaemonSet     = "kube-router"
	kubeRouterContainer     = "kube-router"
	kubeRouterCNIConfVolume = "cni-conf-dir"
	kubeRouterCNIBinVolume  = "cni-bin-dir"
)

// KubeRouterDefinition declares the kube-router add-on to the shared engine. kube-router
// runs on the host network and tolerates every NoSchedule and NoExecute taint, so it
// starts on nodes that are not Ready yet: it is what makes them Ready.
func KubeRouterDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.KubeRouter{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
		},
		Transforms: []engine.ObjectTransform{transformKubeRouter},
	}
}

// transformKubeRouter applies the KubeRouter spec's typed fields to the kube-router
// container: the API server it reaches, through the variables client-go's in-cluster
// configuration reads (with the pod's token and CA), --run-firewall, and the node folders
// of the container runtime's CNI configuration and plugins.
func transformKubeRouter(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.KubeRouter)
	if !ok {
		return fmt.Errorf("expected a KubeRouter, got %T", in.Addon)
	}
	spec := cr.Spec
	ds, err := engine.MustFindObject(objects, "DaemonSet", kubeRouterDaemonSet)
	if err != nil {
		return err
	}
	if spec.APIServerEndpoint != "" {
		host, port, err := net.SplitHostPort(spec.APIServerEndpoint)
		if err != nil {
			return fmt.Errorf("spec.apiServerEndpoint: %w", err)
		}
		if err := engine.SetEnv(ds, kubeRouterContainer, "KUBERNETES_SERVICE_HOST", host); err != nil {
			return err
		}
		if err := engine.SetEnv(ds, kubeRouterContainer, "KUBERNETES_SERVICE_PORT", port); err != nil {
			return err
		}
	}
	if spec.CNIConfDir != "" {
		if err := engine.SetHostPath(ds, kubeRouterCNIConfVolume, spec.CNIConfDir); err != nil {
			return err
		}
	}
	if spec.CNIBinDir != "" {
		if err := engine.SetHostPath(ds, kubeRouterCNIBinVolume, spec.CNIBinDir); err != nil {
			return err
		}
	}
	if spec.NetworkPolicy != nil {
		return engine.SetFlag(ds, kubeRouterContainer, "--run-firewall", strconv.FormatBool(*spec.NetworkPolicy))
	}
	return nil
}
