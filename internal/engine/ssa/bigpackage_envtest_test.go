package ssa_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The big package: five times what a kustomize build may hold.

// bigPackageObjects is the number of objects the big package holds.
const bigPackageObjects = 5000

// labelledConfigMaps counts the ConfigMaps in ns that carry kaddons' label, read from the
// API server.
func labelledConfigMaps(g Gomega, ns string) int {
	list := &corev1.ConfigMapList{}
	g.ExpectWithOffset(1, k8sClient.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{ssa.LabelManagedBy: ssa.ManagedByValue})).To(Succeed())
	return len(list.Items)
}

// TestBigPackageAppliesAndDeletesCleanly applies the CoreDNS objects plus ConfigMaps
// big-<index> up to 5000 objects in one Apply, and deletes them in stages: the inventory
// lists all of them, each is labelled, and the deletion removes every one.
func TestBigPackageAppliesAndDeletesCleanly(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := enginetest.NewNamespace(t, k8sClient)
	objects := coreDNSObjects(t, ns, variant{})
	for i := len(objects); i < bigPackageObjects; i++ {
		objects = append(objects, object(t, ns, fmt.Sprintf(
			`{apiVersion: v1, kind: ConfigMap, metadata: {name: big-%05d, namespace: %s}, data: {index: "%d"}}`, i, ns, i)))
	}

	start := time.Now()
	res := applied(t, ns, objects, nil)
	t.Logf("applied %d objects in %s", bigPackageObjects, time.Since(start).Round(time.Millisecond))
	g.Expect(res.Inventory).To(HaveLen(bigPackageObjects))
	g.Expect(res.Applied).To(HaveLen(bigPackageObjects))
	configMaps := 0
	for _, ref := range res.Inventory {
		if ref.Kind == "ConfigMap" {
			configMaps++
		}
	}
	g.Expect(configMaps).To(BeNumerically(">", bigPackageObjects-10))
	g.Expect(labelledConfigMaps(g, ns)).To(Equal(configMaps))

	start = time.Now()
	held, err := newManager().DeleteInStages(ctx, res.Inventory, testKind, owner(ns))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeEmpty())
	t.Logf("deleted %d objects in %s", bigPackageObjects, time.Since(start).Round(time.Millisecond))
	g.Expect(labelledConfigMaps(g, ns)).To(BeZero())
	for _, ref := range []addonsv1alpha1.ObjectReference{
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: "coredns"},
		{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("big-%05d", bigPackageObjects-1)},
	} {
		_, err := liveObject(ref)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s outlived its add-on", ref)
	}
}
