package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
)

// bigPackageObjects is the number of objects the big package renders.
const bigPackageObjects = 5000

// bigPackageTree writes a channels tree whose stable channel lists a CoreDNS package of
// total objects: the CoreDNS package at version, plus ConfigMaps big-<index> up to total,
// listed in one more resources file. Its kustomization stays plain (nothing but a
// resources list), so the channels build it without kustomize, up to
// channels.MaxPlainPackageObjects; kustomize would refuse it over
// channels.MaxPackageObjects.
func bigPackageTree(t *testing.T, version string, total int) string {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	pkg := filepath.Join(dir, "packages", "coredns", version)
	g.Expect(os.CopyFS(pkg, os.DirFS(filepath.Join(source.Dir(), "packages", "coredns", version)))).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "stable"),
		[]byte("manifests:\n- name: coredns\n  version: "+version+"\n"), 0o644)).To(Succeed())

	rendered, err := source.Render(channels.Resolved{Addon: "coredns", Version: version})
	g.Expect(err).NotTo(HaveOccurred())
	var b strings.Builder
	for i := strings.Count(rendered, "\n---\n") + 1; i < total; i++ {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-%05d\ndata:\n  index: \"%d\"\n", i, i)
	}
	g.Expect(os.WriteFile(filepath.Join(pkg, "configmaps.yaml"), []byte(b.String()), 0o644)).To(Succeed())
	k, err := os.ReadFile(filepath.Join(pkg, "kustomization.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(k)).To(HaveSuffix("\n- poddisruptionbudget.yaml\n"), "the resources list ends the kustomization")
	g.Expect(os.WriteFile(filepath.Join(pkg, "kustomization.yaml"), append(k, "- configmaps.yaml\n"...), 0o644)).To(Succeed())
	return dir
}

// TestBigPackageAppliesAndDeletesCleanly applies a CoreDNS whose package holds 5000
// objects, five times what a kustomize build may hold, and deletes it: the inventory
// lists all of them compactly, and the deletion removes every one and releases the
// finalizer.
func TestBigPackageAppliesAndDeletesCleanly(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	running := settings.Load()
	paused := running
	paused.PausedKinds = []string{"CoreDNS"}
	withSettings(t, paused) // the suite's CoreDNS controller must not apply the usual package over it
	bigSource := channels.NewCatalog(bigPackageTree(t, newVersion, bigPackageObjects), channels.DefaultChannel)
	big, err := engine.NewWithClients(CoreDNSDefinition(), engine.Options{Catalog: bigSource, Settings: engine.NewSettingsStore(running)},
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
