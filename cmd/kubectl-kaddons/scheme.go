package main

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
)

// scheme knows the built-in kinds and the add-on kinds, as the manager's does.
var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
}

// clusterScoped lists the cluster-scoped kinds, by group and kind, among those the
// scheme knows and those add-on packages may contain. Everything else is namespaced.
var clusterScoped = func() map[schema.GroupKind]bool {
	kinds := map[string][]string{
		"":                          {"Namespace", "Node", "PersistentVolume", "ComponentStatus"},
		"rbac.authorization.k8s.io": {"ClusterRole", "ClusterRoleBinding"},
		"apiregistration.k8s.io":    {"APIService"},
		"apiextensions.k8s.io":      {"CustomResourceDefinition"},
		"scheduling.k8s.io":         {"PriorityClass"},
		"storage.k8s.io":            {"StorageClass", "CSIDriver", "CSINode", "VolumeAttachment", "VolumeAttributesClass"},
		"admissionregistration.k8s.io": {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"},
		"node.k8s.io":                     {"RuntimeClass"},
		"networking.k8s.io":               {"IngressClass", "IPAddress", "ServiceCIDR"},
		"certificates.k8s.io":             {"CertificateSigningRequest", "ClusterTrustBundle"},
		"flowcontrol.apiserver.k8s.io":    {"FlowSchema", "PriorityLevelConfiguration"},
		"resource.k8s.io":                 {"DeviceClass", "DeviceTaintRule", "ResourceSlice"},
		"internal.apiserver.k8s.io":       {"StorageVersion"},
		"storagemigration.k8s.io":         {"StorageVersionMigration"},
		"authentication.k8s.io":           {"TokenReview", "SelfSubjectReview"},
		"authorization.k8s.io":            {"SubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview"},
		addonsv1alpha1.GroupVersion.Group: {"AddonSource", "AddonExtension"},
	}
	out := map[schema.GroupKind]bool{}
	for group, list := range kinds {
		for _, kind := range list {
			out[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	return out
}()

// staticMapper maps every kind of the scheme and every child kind of the add-ons'
// definitions with the scope the API server gives it, so that rendering needs no cluster.
func staticMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	add := func(gvk schema.GroupVersionKind) {
		scope := meta.RESTScopeNamespace
		item := gvk.GroupKind()
		item.Kind = strings.TrimSuffix(item.Kind, "List")
		if clusterScoped[item] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	for gvk := range scheme.AllKnownTypes() {
		add(gvk)
	}
	for _, def := range controllers.Definitions() {
		for _, gvk := range def.Children {
			add(gvk)
		}
	}
	return m
}

// addonGroup is the API group of the add-on kinds.
var addonGroup = addonsv1alpha1.GroupVersion.Group
