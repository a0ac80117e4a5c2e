package ssa

import (
	"time"
)

// Apply stages. Objects are applied stage by stage so that what others depend on exists
// first; deletes run in the reverse order.
const (
	StageCRDs = iota
	StageNamespaces
	StageConfig
	StageBindings
	StageWorkloads
	StageAPIEndpoints
)

// StageOf returns the apply stage of a kind.
func StageOf(group, kind string) int {
	switch {
	case kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io":
		return StageCRDs
	case kind == "Namespace" && group == "":
		return StageNamespaces
	case group == rbacGroup && (kind == kindRoleBinding || kind == kindClusterRoleBinding):
		// A binding is checked against the role it grants, which must exist first.
		return StageBindings
	case group == rbacGroup,
		group == "" && (kind == kindServiceAccount || kind == "ConfigMap" || kind == "Secret" ||
			kind == "ResourceQuota" || kind == "LimitRange"),
		group == "scheduling.k8s.io", group == "networking.k8s.io" && kind == "NetworkPolicy":
		return StageConfig
	case group == apiRegistrationGroup,
		group == "admissionregistration.k8s.io":
		return StageAPIEndpoints
	default:
		return StageWorkloads
	}
}

// applyConcurrency bounds the parallel writes within one stage.
const applyConcurrency = 4

// waitTimeout bounds the Manager's waits: for a CRD of the package to be served, and for
// an object being re-created to be gone.
const waitTimeout = 30 * time.Second

// Kinds and groups the stages and the ownership checks name.
const (
	kindNamespace          = "Namespace"
	kindServiceAccount     = "ServiceAccount"
	kindRoleBinding        = "RoleBinding"
	kindClusterRoleBinding = "ClusterRoleBinding"
	rbacGroup              = "rbac.authorization.k8s.io"
	apiRegistrationGroup   = "apiregistration.k8s.io"
)
