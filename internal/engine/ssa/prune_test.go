package ssa

import (
	"context"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestDeleteObjects(t *testing.T) {
	owner := types.NamespacedName{Namespace: "a", Name: "x"}
	ours := InstanceLabels("CoreDNS", owner)
	theirs := InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "b", Name: "x"})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", Labels: ours}}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "d", Labels: ours}}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "foreign", Labels: theirs}}
	c := fakeClient(t, cm, deploy, foreign)
	refs := []addonsv1alpha1.ObjectReference{
		{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "a", Name: "d"},
		{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "foreign"},
		{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "gone"},
	}
	m := &Manager{Cache: c, Client: c, Reader: c}
	done, held, err := m.deleteObjects(context.Background(), refs, "CoreDNS", owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Errorf("held = %v, want none", held)
	}
	if len(done) != len(refs) {
		t.Errorf("deleteObjects reported %d of %d done: %v", len(done), len(refs), done)
	}
	if done[0].Kind != "Deployment" {
		t.Errorf("deleted %v first, want the workload before its configuration (reverse stage order)", done[0])
	}
	for _, o := range []client.Object{cm, deploy} {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s still exists (err %v)", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(foreign), &corev1.ConfigMap{}); err != nil {
		t.Errorf("the ConfigMap labelled for another add-on was deleted: %v", err)
	}
}
