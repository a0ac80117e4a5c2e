package engine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
