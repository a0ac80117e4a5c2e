package engine

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestFollow(t *testing.T) {
	_, c := testReconciler(t, Options{}, coreDNS("a", "dns"))
	from := coreDNS("a", "follower")
	into := &addonsv1alpha1.CoreDNS{}
	if res := Follow(context.Background(), c, from, addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "dns"}, "spec.ref", into); res.Holds() {
		t.Fatalf("Follow of an existing add-on = %+v", res)
	}
	res := Follow(context.Background(), c, from, addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "missing"}, "spec.ref", into)
	if res.Err != nil || res.Terminal || res.Reason != addonsv1alpha1.ReasonDependencyNotReady ||
		res.Message != "waiting for CoreDNS a/missing, named by spec.ref: not found" {
		t.Errorf("Follow of a missing add-on = %+v, want a DependencyNotReady hold naming it", res)
	}
	out := defaultHold(res)
	if out.class != classProgressing || out.reason != addonsv1alpha1.ReasonDependencyNotReady || out.requeueAfter != 0 ||
		out.message != "waiting for CoreDNS a/missing, named by spec.ref: not found" {
		t.Errorf("the Default hold of a missing add-on = %+v, want Progressing until it changes", out)
	}
}

func TestServiceAddress(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "kube-dns"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10"}}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	_, c := testReconciler(t, Options{}, svc, headless)
	addon := coreDNS("a", "dns")
	inventory := make([]addonsv1alpha1.ObjectReference, 0, 3)
	for _, name := range []string{"kube-dns", "headless", "absent"} {
		inventory = append(inventory, addonsv1alpha1.ObjectReference{Version: "v1", Kind: "Service", Namespace: "a", Name: name})
	}
	addon.Status.Inventory = addonsv1alpha1.NewInventory(inventory)
	for name, want := range map[string]string{"kube-dns": "10.0.0.10", "headless": "", "absent": "", "not-in-inventory": ""} {
		got, err := ServiceAddress(context.Background(), c, addon, name)
		if err != nil || got != want {
			t.Errorf("ServiceAddress(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
}
