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

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=metricsservers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=metricsservers/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=metricsservers/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;list;watch;create;patch;delete
// kaddons can only grant metrics-server the permissions it holds itself:
// +kubebuilder:rbac:groups="",resources=nodes/metrics,verbs=get
// +kubebuilder:rbac:groups="",resources=pods;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=metrics.k8s.io,resources=pods;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Names of the objects in the metrics-server packages that typed fields edit.
const (
	metricsServerDeployment = "metrics-server"
	metricsServerContainer  = "metrics-server"
)

// MetricsServerDefinition declares the metrics-server add-on to the shared engine.
func MetricsServerDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.MetricsServer{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
			{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"},
		},
		Transforms: []engine.ObjectTransform{transformMetricsServer},
		Values:     metricsServerValues,
	}
}

// metricsServerValues maps the MetricsServer spec's typed fields to the values of
// metrics-server's upstream chart (charts/metrics-server of its repository), for a
// package that is that chart. transformMetricsServer sets the same fields on the
// chart's Deployment, as on any package's.
func metricsServerValues(in engine.RenderInput) (map[string]any, error) {
	cr, ok := in.Addon.(*addonsv1alpha1.MetricsServer)
	if !ok {
		return nil, fmt.Errorf("expected a MetricsServer, got %T", in.Addon)
	}
	values := map[string]any{}
	if cr.Spec.Replicas != nil {
		values["replicas"] = *cr.Spec.Replicas
	}
	if cr.Spec.Resources != nil {
		values["resources"] = cr.Spec.Resources
	}
	return values, nil
}

// transformMetricsServer applies the MetricsServer spec's typed fields to the rendered package.
func transformMetricsServer(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.MetricsServer)
	if !ok {
		return fmt.Errorf("expected a MetricsServer, got %T", in.Addon)
	}
	spec := cr.Spec
	deploy, err := engine.MustFindObject(objects, "Deployment", metricsServerDeployment)
	if err != nil {
		return err
	}
	if spec.KubeletInsecureTLS {
		if err := engine.SetFlag(deploy, metricsServerContainer, "--kubelet-insecure-tls", ""); err != nil {
			return err
		}
	}
	if len(spec.KubeletPreferredAddressTypes) > 0 {
		types := make([]string, len(spec.KubeletPreferredAddressTypes))
		for i, t := range spec.KubeletPreferredAddressTypes {
			types[i] = string(t)
		}
		if err := engine.SetFlag(deploy, metricsServerContainer, "--kubelet-preferred-address-types",
			strings.Join(types, ",")); err != nil {
			return err
		}
	}
	if spec.MetricResolution != nil {
		if err := engine.SetFlag(deploy, metricsServerContainer, "--metric-resolution",
			spec.MetricResolution.Duration.String()); err != nil {
			return err
		}
	}
	return engine.ApplyPodFields(deploy, metricsServerContainer, engine.PodFields{
		Replicas:  spec.Replicas,
		Resources: spec.Resources,
	})
}
