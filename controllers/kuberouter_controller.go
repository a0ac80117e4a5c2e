package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=kuberouters/finalizers,verbs=update
// The kinds of the kuberouter packages, and nothing more:
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete

// KubeRouterDefinition declares the kuberouter add-on to the shared engine. Its
// packages hold a ServiceAccount and a Deployment; a package with another kind needs it
// in Children and in the RBAC markers above. It has no typed fields yet, so no
// transforms: the packages are applied as they are, with the user's patches.
func KubeRouterDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.KubeRouter{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
		},
	}
}
