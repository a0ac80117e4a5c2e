package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// gadgetVersion is one entry of the test Gadget CRD's spec.versions.
type gadgetVersion struct {
	name            string
	served, storage bool
}

// writeGadgetPackage writes the package coredns/<version> under dir: a kustomization that
// holds only the CustomResourceDefinition gadgets.example.kaddons.dev with versions.
func writeGadgetPackage(t *testing.T, dir, version string, versions ...gadgetVersion) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.kaddons.dev
spec:
  group: example.kaddons.dev
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions:
`)
	for _, v := range versions {
		fmt.Fprintf(&b, `  - name: %s
    served: %t
    storage: %t
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
`, v.name, v.served, v.storage)
	}
	pkg := filepath.Join(dir, "packages", "coredns", version)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- crd.yaml\n",
		"crd.yaml":           b.String(),
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCRDVersionRemoval upgrades a package whose only object is a CustomResourceDefinition
// with versions v1 (served, storage) and v2 (served). A new definition that stops serving
// v1 (served: false, still in spec.versions, so no stored version is dropped) while
// Gadgets exist is refused with CRDVersionRemoved and the live definition is left as it
// is, until spec.upgrade.allowCRDVersionRemoval lets it apply. Then, with no Gadget left,
// a definition that drops v1, which status.storedVersions still lists, is refused by
// kaddons, and by the API server itself under the opt-in, until status.storedVersions no
// longer lists v1.
func TestCRDVersionRemoval(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cfg, scheme, c := startEnv(t)
	dir := t.TempDir()
	// 1.0.0: v1 (served, storage) and v2; 1.1.0: v1 no longer served, v2 the storage
	// version; 1.2.0: only v2. Each is an upgrade of the one before.
	writeGadgetPackage(t, dir, "1.0.0", gadgetVersion{"v1", true, true}, gadgetVersion{"v2", true, false})
	writeGadgetPackage(t, dir, "1.1.0", gadgetVersion{"v1", false, false}, gadgetVersion{"v2", true, true})
	writeGadgetPackage(t, dir, "1.2.0", gadgetVersion{"v2", true, true})
	r := chartEngine(t, cfg, scheme, engine.Definition{Prototype: &addonsv1alpha1.CoreDNS{},
		Children: []schema.GroupVersionKind{crdGVK}}, dir)
	crdKey := types.NamespacedName{Name: "gadgets.example.kaddons.dev"}
	versionsOf := func(g Gomega) ([]apiextensionsv1.CustomResourceDefinitionVersion, []string) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(c.Get(ctx, crdKey, crd)).To(Succeed())
		return crd.Spec.Versions, crd.Status.StoredVersions
	}
	served := func(versions []apiextensionsv1.CustomResourceDefinitionVersion) map[string]bool {
		m := map[string]bool{}
		for _, v := range versions {
			m[v.Name] = v.Served
		}
		return m
	}
	cr := &addonsv1alpha1.CoreDNS{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets", Namespace: "default"},
		Spec:       addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: "1.0.0"}},
	}
	// update changes the add-on's spec, retrying on the conflicts of the reconciles'
	// status writes.
	update := func(change func(*addonsv1alpha1.CoreDNS)) {
		t.Helper()
		g.Eventually(func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
				return err
			}
			change(cr)
			return c.Update(ctx, cr)
		}).Should(Succeed())
	}
	allow := func(allow bool) func(*addonsv1alpha1.CoreDNS) {
		return func(cr *addonsv1alpha1.CoreDNS) {
			cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{AllowCRDVersionRemoval: allow}
		}
	}
	g.Expect(c.Create(ctx, cr)).To(Succeed())
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(cr.Status.AppliedVersion).To(Equal("1.0.0"))
		g.Expect(condition(g, cr, addonsv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	})
	for _, name := range []string{"demo-a", "demo-b"} {
		gadget := &unstructured.Unstructured{}
		gadget.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.kaddons.dev", Version: "v1", Kind: "Gadget"})
		gadget.SetNamespace("default")
		gadget.SetName(name)
		g.Eventually(func() error { return c.Create(ctx, gadget) }).Should(Succeed())
	}
	_, stored := versionsOf(g)
	g.Expect(stored).To(Equal([]string{"v1"}))

	// v1 stops being served while Gadgets exist; v1 stays in spec.versions, so the stored
	// versions are kept: the refusal is the served check's.
	update(func(cr *addonsv1alpha1.CoreDNS) { cr.Spec.Version = "1.1.0" })
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		stalled := condition(g, cr, addonsv1alpha1.ConditionStalled)
		g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonCRDVersionRemoved))
		g.Expect(stalled.Message).To(ContainSubstring("CustomResourceDefinition gadgets.example.kaddons.dev stops serving the version v1"))
		g.Expect(stalled.Message).To(MatchRegexp(`while (at least )?2 objects of it exist, default/demo-a among them`))
		g.Expect(stalled.Message).To(ContainSubstring("set spec.upgrade.allowCRDVersionRemoval: true to apply it anyway"))
		g.Expect(stalled.Message).NotTo(ContainSubstring("storedVersions"))
	})
	versions, _ := versionsOf(g)
	g.Expect(served(versions)).To(Equal(map[string]bool{"v1": true, "v2": true}), "the refused CRD was written")
	g.Expect(versions[0].Storage).To(BeTrue(), "the refused CRD was written")
	g.Expect(cr.Status.AppliedVersion).To(Equal("1.0.0"))

	// The opt-in applies it.
	update(allow(true))
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(cr.Status.AppliedVersion).To(Equal("1.1.0"))
		g.Expect(condition(g, cr, addonsv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	})
	versions, stored = versionsOf(g)
	g.Expect(served(versions)).To(Equal(map[string]bool{"v1": false, "v2": true}))
	g.Expect(stored).To(ConsistOf("v1", "v2"))

	// With no Gadget left, v1 is still in status.storedVersions: a definition that leaves
	// it out is refused by the stored-versions check alone (v1 is no longer served).
	for _, name := range []string{"demo-a", "demo-b"} {
		gadget := &unstructured.Unstructured{}
		gadget.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.kaddons.dev", Version: "v2", Kind: "Gadget"})
		gadget.SetNamespace("default")
		gadget.SetName(name)
		g.Expect(c.Delete(ctx, gadget)).To(Succeed())
	}
	update(func(cr *addonsv1alpha1.CoreDNS) {
		allow(false)(cr)
		cr.Spec.Version = "1.2.0"
	})
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		stalled := condition(g, cr, addonsv1alpha1.ConditionStalled)
		g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonCRDVersionRemoved))
		g.Expect(stalled.Message).To(ContainSubstring("CustomResourceDefinition gadgets.example.kaddons.dev drops the version v1"))
		g.Expect(stalled.Message).To(ContainSubstring("migrate the stored objects"))
		g.Expect(stalled.Message).To(ContainSubstring("remove v1 from the definition's status.storedVersions"))
	})
	versions, _ = versionsOf(g)
	g.Expect(served(versions)).To(HaveKey("v1"), "the refused CRD was written")

	// The opt-in skips kaddons' check, but the API server keeps every version of
	// status.storedVersions in spec.versions: the apply fails with its message.
	update(allow(true))
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		ready := condition(g, cr, addonsv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonApplyFailed))
		g.Expect(ready.Message).To(ContainSubstring("must remain in spec.versions"))
	})
	versions, _ = versionsOf(g)
	g.Expect(served(versions)).To(HaveKey("v1"))

	// Once the stored objects are migrated (there are none) and v1 is removed from
	// status.storedVersions, the definition applies without the opt-in.
	g.Eventually(func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, crdKey, crd); err != nil {
			return err
		}
		crd.Status.StoredVersions = []string{"v2"}
		return c.Status().Update(ctx, crd)
	}).Should(Succeed())
	update(allow(false))
	reconcileUntil(t, r, c, cr, func(g Gomega) {
		g.Expect(cr.Status.AppliedVersion).To(Equal("1.2.0"))
		g.Expect(condition(g, cr, addonsv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	})
	versions, stored = versionsOf(g)
	g.Expect(served(versions)).To(Equal(map[string]bool{"v2": true}))
	g.Expect(stored).To(Equal([]string{"v2"}))
}
