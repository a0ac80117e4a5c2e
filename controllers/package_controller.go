package controllers

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=packages,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=packages/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=packages/finalizers,verbs=update
// The kinds a Package may hold: those of every typed kind's packages, and StatefulSets,
// Jobs (a Helm chart's hooks) and CustomResourceDefinitions (a chart's crds/):
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts;services;secrets;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;daemonsets;statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;roles;rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;create;patch;delete

// PackageDefinition declares the generic Package kind to the shared engine: any package
// of the channels, by spec.package. It has no home namespace (the objects it shares
// between instances, cluster-scoped RBAC above all, always get the namespace suffix) and
// no typed fields: the package is applied as it renders, with spec.values for a Helm
// chart that declares them, and the user's patches. A package with a kind outside
// Children is refused (RenderFailed, naming the kind).
func PackageDefinition() engine.Definition {
	return engine.Definition{
		Prototype: &addonsv1alpha1.Package{},
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("Namespace"),
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			corev1.SchemeGroupVersion.WithKind("Secret"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
			appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
			appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
			batchv1.SchemeGroupVersion.WithKind("Job"),
			policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			rbacv1.SchemeGroupVersion.WithKind("Role"),
			rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
			{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"},
			{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		},
		FreeFormFields: []string{"spec.values"},
		UserValues:     packageValues,
		ReleaseName:    func(addon addonsv1alpha1.Addon) string { return addon.GetName() },
	}
}

// packageValues decodes the Package's spec.values.
func packageValues(addon addonsv1alpha1.Addon) (map[string]any, error) {
	p, ok := addon.(*addonsv1alpha1.Package)
	if !ok {
		return nil, fmt.Errorf("expected a Package, got %T", addon)
	}
	if p.Spec.Values == nil || len(p.Spec.Values.Raw) == 0 {
		return nil, nil
	}
	var values map[string]any
	if err := json.Unmarshal(p.Spec.Values.Raw, &values); err != nil {
		return nil, fmt.Errorf("spec.values is not a JSON object: %w", err)
	}
	return values, nil
}
