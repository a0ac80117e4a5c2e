package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=dashboards,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=dashboards/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=dashboards/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts;services;secrets;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create;patch;delete
// kaddons can only grant the Dashboard the permissions it holds itself:
// +kubebuilder:rbac:groups="",resources=services,verbs=proxy
// +kubebuilder:rbac:groups="",resources=services/proxy,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=update
// +kubebuilder:rbac:groups=metrics.k8s.io,resources=pods;nodes,verbs=get;list;watch

// Names of the objects in the Dashboard packages that typed fields edit.
const (
	dashboardDeployment = "kubernetes-dashboard"
	dashboardContainer  = "kubernetes-dashboard"
	dashboardScraper    = "dashboard-metrics-scraper"
	dashboardNamespace  = "kubernetes-dashboard"
)

// DashboardDefinition declares the Kubernetes Dashboard add-on to the shared engine.
func DashboardDefinition() engine.Definition {
	return engine.Definition{
		Prototype:              &addonsv1alpha1.Dashboard{},
		HomeNamespace:          dashboardNamespace,
		DefaultTargetNamespace: dashboardNamespace,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("Namespace"),
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			corev1.SchemeGroupVersion.WithKind("Secret"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			rbacv1.SchemeGroupVersion.WithKind("Role"),
			rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
		},
		Transforms: []engine.ObjectTransform{transformDashboard},
		// The Dashboard writes its CSRF key into this Secret when it starts.
		DriftExclusions: []addonsv1alpha1.DriftExclusion{{
			Target: addonsv1alpha1.ObjectSelector{Kind: "Secret", Name: "kubernetes-dashboard-csrf"}, Paths: []string{"/data"}}},
	}
}

// transformDashboard applies the Dashboard spec's typed fields to the rendered package.
func transformDashboard(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.Dashboard)
	if !ok {
		return fmt.Errorf("expected a Dashboard, got %T", in.Addon)
	}
	spec := cr.Spec
	deploy, err := engine.MustFindObject(objects, "Deployment", dashboardDeployment)
	if err != nil {
		return err
	}
	// The Dashboard keeps its settings and certificates in Secrets and a ConfigMap of
	// the namespace this flag names.
	namespace := in.TargetNamespace
	if err := engine.SetFlag(deploy, dashboardContainer, "--namespace", namespace); err != nil {
		return err
	}
	if spec.MetricsScraper != nil && !*spec.MetricsScraper {
		engine.RemoveObject(objects, "Deployment", dashboardScraper)
		engine.RemoveObject(objects, "Service", dashboardScraper)
		if err := engine.SetFlag(deploy, dashboardContainer, "--metrics-provider", "none"); err != nil {
			return err
		}
	}
	return engine.ApplyPodFields(deploy, dashboardContainer, engine.PodFields{
		Replicas:  spec.Replicas,
		Resources: spec.Resources,
	})
}
