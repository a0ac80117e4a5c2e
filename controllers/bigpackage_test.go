package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// bigPackageObjects is the size of the rendered set the test applies.
const bigPackageObjects = 5000

// withConfigMaps is a transform that adds ConfigMaps to the rendered CoreDNS package until
// it holds total objects. The channels cap a package at channels.MaxPackageObjects
// documents, because kustomize's build time grows faster than the square of the object
// count; the engine, the inventory and the API server see the same 5000 objects either way.
func withConfigMaps(total int) engine.ObjectTransform {
	return func(_ context.Context, _ engine.RenderInput, objects *engine.Objects) error {
		for i := len(objects.Items); i < total; i++ {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetName(fmt.Sprintf("big-%05d", i))
			if err := unstructured.SetNestedStringMap(u.Object, map[string]string{"index": fmt.Sprint(i)}, "data"); err != nil {
				return err
			}
			o, err := manifest.NewObject(u)
			if err != nil {
				return err
			}
			objects.Items = append(objects.Items, o)
		}
		return nil
	}
}

// TestBigPackageAppliesAndDeletesCleanly applies a CoreDNS whose rendered set holds 5000
// objects, and deletes it: the inventory lists all of them compactly, and the deletion
// removes every one and releases the finalizer.
func TestBigPackageAppliesAndDeletesCleanly(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	running := settings.Load()
	paused := running
	paused.PausedKinds = []string{"CoreDNS"}
	withSettings(t, paused) // the suite's CoreDNS controller must not apply the usual package over it
	def := CoreDNSDefinition()
	def.Transforms = append(def.Transforms, withConfigMaps(bigPackageObjects))
	big, err := engine.NewWithClients(def, engine.Options{Source: source, Settings: engine.NewSettingsStore(running)},
		engine.Clients{Client: testMgr.GetClient(), Reader: testMgr.GetAPIReader(), Scheme: testMgr.GetScheme(),
			Mapper: testMgr.GetRESTMapper(), Recorder: testMgr.GetEventRecorder("big-package-test")})
	g.Expect(err).NotTo(HaveOccurred())

	cr := newCoreDNS(ns, newVersion)
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	start := time.Now()
	g.Eventually(func(g Gomega) {
		_, err := big.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		g.Expect(err).NotTo(HaveOccurred())
		getAddon(g, cr)
		g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
	t.Logf("applied %d objects in %s", bigPackageObjects, time.Since(start).Round(time.Millisecond))

	g.Expect(cr.Status.Inventory.Len()).To(Equal(bigPackageObjects))
	g.Expect(len(cr.Status.Inventory)).To(BeNumerically("<", 10), "the inventory groups objects by kind and namespace")
	g.Expect(cr.Status.InventoryRecord).NotTo(BeEmpty(), "the inventory covers the write-ahead record")
	configMaps := 0
	for _, ref := range cr.Status.Inventory.Objects() {
		if ref.Kind == "ConfigMap" {
			configMaps++
		}
	}
	g.Expect(configMaps).To(BeNumerically(">", bigPackageObjects-10))
	g.Expect(labelledConfigMaps(g, ns)).To(Equal(configMaps))

	start = time.Now()
	g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr))
	}).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(BeTrue(), "the finalizer was not released")
	t.Logf("deleted %d objects in %s", bigPackageObjects, time.Since(start).Round(time.Millisecond))
	g.Expect(labelledConfigMaps(g, ns)).To(BeZero())
	for _, ref := range []addonsv1alpha1.ObjectReference{
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: coreDNSDeployment},
		{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("big-%05d", bigPackageObjects-1)},
	} {
		_, err := liveObject(ref)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s outlived its add-on", ref)
	}
}

// labelledConfigMaps counts the ConfigMaps in ns that carry kaddons' label, read from the
// API server.
func labelledConfigMaps(g Gomega, ns string) int {
	list := &corev1.ConfigMapList{}
	g.ExpectWithOffset(1, k8sClient.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{"app.kubernetes.io/managed-by": "kaddons"})).To(Succeed())
	return len(list.Items)
}
