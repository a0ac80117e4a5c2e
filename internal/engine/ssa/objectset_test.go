package ssa

import (
	"reflect"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestStageOf(t *testing.T) {
	for _, tc := range []struct {
		group, kind string
		want        int
	}{
		{"apiextensions.k8s.io", "CustomResourceDefinition", StageCRDs},
		{"", "Namespace", StageNamespaces},
		{"", "ServiceAccount", StageConfig},
		{"", "ConfigMap", StageConfig},
		{"", "Secret", StageConfig},
		{"rbac.authorization.k8s.io", "ClusterRole", StageConfig},
		{"rbac.authorization.k8s.io", "Role", StageConfig},
		{"rbac.authorization.k8s.io", "RoleBinding", StageBindings},
		{"rbac.authorization.k8s.io", "ClusterRoleBinding", StageBindings},
		{"apps", "Deployment", StageWorkloads},
		{"apps", "DaemonSet", StageWorkloads},
		{"", "Service", StageWorkloads},
		{"policy", "PodDisruptionBudget", StageWorkloads},
		{"apiregistration.k8s.io", "APIService", StageAPIEndpoints},
		{"admissionregistration.k8s.io", "ValidatingWebhookConfiguration", StageAPIEndpoints},
	} {
		if got := StageOf(tc.group, tc.kind); got != tc.want {
			t.Errorf("StageOf(%q, %q) = %d, want %d", tc.group, tc.kind, got, tc.want)
		}
	}
}

func ref(kind, ns, name string) addonsv1alpha1.ObjectReference {
	return addonsv1alpha1.ObjectReference{Version: "v1", Kind: kind, Namespace: ns, Name: name}
}

func TestInventoryDiff(t *testing.T) {
	cm, svc, sa := ref("ConfigMap", "a", "cm"), ref("Service", "a", "svc"), ref("ServiceAccount", "a", "sa")
	movedVersion := cm
	movedVersion.Version = "v2"
	for _, tc := range []struct {
		name              string
		previous, desired []addonsv1alpha1.ObjectReference
		applied           map[addonsv1alpha1.ObjectReference]Written
		wantStale         []addonsv1alpha1.ObjectReference
		wantMerged        []addonsv1alpha1.ObjectReference
	}{
		{name: "nothing removed", previous: []addonsv1alpha1.ObjectReference{cm, svc}, desired: []addonsv1alpha1.ObjectReference{cm, svc},
			wantMerged: []addonsv1alpha1.ObjectReference{cm, svc}},
		{name: "one removed", previous: []addonsv1alpha1.ObjectReference{cm, svc}, desired: []addonsv1alpha1.ObjectReference{cm},
			wantStale: []addonsv1alpha1.ObjectReference{svc}, wantMerged: []addonsv1alpha1.ObjectReference{cm, svc}},
		{name: "a new API version is the same object", previous: []addonsv1alpha1.ObjectReference{cm}, desired: []addonsv1alpha1.ObjectReference{movedVersion},
			wantMerged: []addonsv1alpha1.ObjectReference{movedVersion}},
		{name: "partial apply keeps what was applied and everything before", previous: []addonsv1alpha1.ObjectReference{svc},
			desired: []addonsv1alpha1.ObjectReference{cm, sa}, applied: map[addonsv1alpha1.ObjectReference]Written{cm: {Generation: 1}},
			wantStale: []addonsv1alpha1.ObjectReference{svc}, wantMerged: []addonsv1alpha1.ObjectReference{cm, svc}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StaleObjects(tc.previous, tc.desired); !reflect.DeepEqual(got, tc.wantStale) {
				t.Errorf("StaleObjects = %v, want %v", got, tc.wantStale)
			}
			if got := MergeInventory(tc.previous, tc.desired, tc.applied); !reflect.DeepEqual(got, tc.wantMerged) {
				t.Errorf("MergeInventory = %v, want %v", got, tc.wantMerged)
			}
		})
	}
}
