package engine

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestRenderCache(t *testing.T) {
	name := types.NamespacedName{Namespace: "ns", Name: "dns"}
	addon := func(uid types.UID, generation int64) *addonsv1alpha1.CoreDNS {
		return &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: generation}}
	}
	objects := &Objects{}
	for _, tc := range []struct {
		name     string
		lookup   *addonsv1alpha1.CoreDNS
		version  string
		rendered string
		forget   bool
		hit      bool
	}{
		{name: "same inputs", lookup: addon("a", 2), version: "1.0", rendered: "m", hit: true},
		{name: "new generation", lookup: addon("a", 3), version: "1.0", rendered: "m"},
		{name: "re-created add-on", lookup: addon("b", 2), version: "1.0", rendered: "m"},
		{name: "other version", lookup: addon("a", 2), version: "2.0", rendered: "m"},
		{name: "package changed", lookup: addon("a", 2), version: "1.0", rendered: "m2"},
		{name: "forgotten", lookup: addon("a", 2), version: "1.0", rendered: "m", forget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c renderCache
			c.put(name, addon("a", 2), "1.0", "m", objects)
			if tc.forget {
				c.forget(name)
			}
			got, hit := c.get(name, tc.lookup, tc.version, tc.rendered)
			if hit != tc.hit || (hit && got != objects) {
				t.Fatalf("get = %p, %v; want hit %v", got, hit, tc.hit)
			}
		})
	}
}

func TestRenderRefusesKindsTheControllerDoesNotManage(t *testing.T) {
	// The test reconciler's definition lists only ConfigMaps and Deployments; the CoreDNS
	// package holds more kinds.
	r, _ := testReconciler(t, Options{})
	st := &reconcileState{addon: coreDNS("a", "x")}
	if out := r.resolve(context.Background(), st); out.stop {
		t.Fatalf("resolve stopped: %+v", out)
	}
	out := r.render(context.Background(), st)
	if !out.stop || out.class != classStalled || !out.terminal || out.reason != addonsv1alpha1.ReasonRenderFailed {
		t.Fatalf("render = %+v, want Stalled RenderFailed", out)
	}
	if !strings.Contains(out.message, "a kind the CoreDNS controller does not manage") {
		t.Errorf("message %q does not say which kind is refused", out.message)
	}
}

func TestRenderReportsBadPatches(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	addon := coreDNS("a", "x")
	addon.Spec.Patches = []*runtime.RawExtension{{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nope"}}`)}}
	st := &reconcileState{addon: addon}
	r.resolve(context.Background(), st)
	out := r.render(context.Background(), st)
	if out.class != classStalled || out.reason != addonsv1alpha1.ReasonPatchTargetNotFound {
		t.Fatalf("render = %+v, want Stalled PatchTargetNotFound", out)
	}
}
