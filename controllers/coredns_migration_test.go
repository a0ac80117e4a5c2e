package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/corefile"
	"github.com/kaddons/kaddons/internal/engine"
)

// olderKubeadmVersion is a CoreDNS version older than kubeadm v1.37.2's, with a package
// in channels/packages/coredns and known to corefile-migration.
const olderKubeadmVersion = "1.11.3"

// migratedCorefile is kubeadm's Corefile of test/testdata/kubeadm/coredns-custom.yaml
// (its hosts block and extra server block included) as corefile-migration writes it
// after a migration from CoreDNS 1.11.3 to 1.12.1: no plugin changes between them, so
// only the layout changes (options indented by eight, a blank line after each server
// block), which shows that the migration ran. domain stands for the kubernetes zone.
const migratedCorefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes DOMAIN in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30 {
        disable success cluster.local
        disable denial cluster.local
    }
    loop
    reload
    loadbalance
    hosts {
        10.0.0.1 example.internal
        fallthrough
    }
}

example.internal:53 {
    forward . 10.0.0.53
}
`

// atCoreDNSVersion returns an edit of kubeadm's objects that makes its Deployment run
// CoreDNS version instead of kubeadmVersion.
func atCoreDNSVersion(version string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if u.GetKind() != "Deployment" {
			return
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for i, c := range containers {
			m := c.(map[string]any)
			m["image"] = strings.Replace(m["image"].(string), ":v"+kubeadmVersion, ":v"+version, 1)
			containers[i] = m
		}
		_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
	}
}

// TestAdoptOlderKubeadmCoreDNS adopts a kubeadm CoreDNS that runs an older CoreDNS with a
// CoreDNS pinned to a newer version: the admin's Corefile is migrated from the running
// version (read from the Deployment's image), its custom blocks kept, and the typed
// fields apply on top. A later upgrade migrates the adopted Corefile again, from the
// version kaddons applied, and the typed fields keep working.
func TestAdoptOlderKubeadmCoreDNS(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	existing := kubeadmObjectsEdited(t, "coredns-custom.yaml", ns, atCoreDNSVersion(olderKubeadmVersion))
	cmKey := types.NamespacedName{Namespace: ns, Name: coreDNSConfigMap}
	deployKey := types.NamespacedName{Namespace: ns, Name: coreDNSDeployment}
	deploy := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, deployKey, deploy)).To(Succeed())
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + olderKubeadmVersion))

	cr := newCoreDNS(ns, newVersion)
	cr.Spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged
	cr.Spec.ClusterIP = "10.96.0.10"
	cr.Spec.DNSDomain = "cluster.example"
	cr.Spec.Replicas = ptr.To[int32](3)
	createUntilCleanup(t, cr)
	waitApplied(t, cr, newVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)

	expectCoreDNS := func(version, domain string, replicas int32) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, cmKey, cm)).To(Succeed())
			// Migrated, custom blocks kept, the typed dnsDomain applied on top.
			g.Expect(cm.Data["Corefile"]).To(Equal(strings.Replace(migratedCorefile, "DOMAIN", domain, 1)))
			// What later renders start from: the migrated Corefile before typed fields.
			g.Expect(cm.Annotations).To(HaveKeyWithValue(engine.AnnotationAdoptedConfig,
				strings.Replace(migratedCorefile, "DOMAIN", "cluster.local", 1)))
			g.Expect(k8sClient.Get(ctx, deployKey, deploy)).To(Succeed())
			g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + version))
			g.Expect(deploy.Spec.Replicas).To(Equal(ptr.To(replicas)))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	}
	expectCoreDNS(newVersion, "cluster.example", 3)
	getAddon(g, cr)
	for _, o := range existing {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
		g.Expect(live.GetUID()).To(Equal(o.GetUID()), "%s %s was re-created", o.GetKind(), o.GetName())
	}
	g.Expect(cr.Status.Adopted).To(ContainElement(HaveField("ObjectReference.Kind", "ConfigMap")))

	// The upgrade migrates the adopted Corefile from the version kaddons applied; the
	// typed fields, changed with it, still apply.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
		c.Spec.Version = kubeadmVersion
		c.Spec.DNSDomain = "cluster.internal"
		c.Spec.Replicas = ptr.To[int32](2)
	})
	waitApplied(t, cr, kubeadmVersion)
	expectCoreDNS(kubeadmVersion, "cluster.internal", 2)
}

// TestUpgradeMigratesAnAdoptedCorefile adopts a kubeadm CoreDNS at the version it runs,
// where nothing is migrated and the Corefile is kept byte for byte, then upgrades it: the
// upgrade migrates the adopted Corefile from the version kaddons applied.
func TestUpgradeMigratesAnAdoptedCorefile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	existing := kubeadmObjectsEdited(t, "coredns-custom.yaml", ns, atCoreDNSVersion(olderKubeadmVersion))
	var original string
	for _, o := range existing {
		if o.GetKind() == "ConfigMap" {
			original, _, _ = unstructured.NestedString(o.Object, "data", "Corefile")
		}
	}
	g.Expect(original).To(ContainSubstring("example.internal:53"))
	g.Expect(original).NotTo(Equal(strings.Replace(migratedCorefile, "DOMAIN", "cluster.local", 1)), "the test needs a Corefile the migration rewrites")

	cr := newCoreDNS(ns, olderKubeadmVersion)
	cr.Spec.Adopt = addonsv1alpha1.AdoptIfUnmanaged
	cr.Spec.ClusterIP = "10.96.0.10"
	createUntilCleanup(t, cr)
	waitApplied(t, cr, olderKubeadmVersion)
	cm := &corev1.ConfigMap{}
	cmKey := types.NamespacedName{Namespace: ns, Name: coreDNSConfigMap}
	g.Expect(k8sClient.Get(ctx, cmKey, cm)).To(Succeed())
	g.Expect(cm.Data["Corefile"]).To(Equal(original), "adopting at the running version changes nothing of the Corefile")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	waitApplied(t, cr, newVersion)
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, cmKey, cm)).To(Succeed())
		g.Expect(cm.Data["Corefile"]).To(Equal(strings.Replace(migratedCorefile, "DOMAIN", "cluster.local", 1)))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// createUntilCleanup creates cr and deletes it, children included, when the test ends,
// before the objects the test made for it: kubeadm's Service holds the fixed cluster IP
// 10.96.0.10, which a lingering add-on would otherwise re-create and keep.
func createUntilCleanup(t *testing.T, cr *addonsv1alpha1.CoreDNS) {
	t.Helper()
	NewWithT(t).Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
	t.Cleanup(func() {
		ctx := context.Background()
		if err := k8sClient.Delete(ctx, cr); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", cr.Name, err)
			return
		}
		NewWithT(t).Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), &addonsv1alpha1.CoreDNS{}))
		}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue())
	})
}

// TestCorefileMigrationFailedMessage pins the Stalled condition's message for a Corefile
// that cannot be migrated: corefile.Migrate says what blocks, the controller adds which of
// the spec's fields lift the block.
func TestCorefileMigrationFailedMessage(t *testing.T) {
	g := NewWithT(t)
	_, err := corefile.Migrate(".:53 {\n    forward . /etc/resolv.conf\n}\n", "v1.14.6", "1.12.1", false)
	var failed *corefile.MigrationError
	g.Expect(errors.As(err, &failed)).To(BeTrue(), "Migrate error = %v", err)
	blocked := corefileBlocked(failed)
	g.Expect(blocked.Reason).To(Equal(addonsv1alpha1.ReasonCorefileMigrationFailed))
	g.Expect(blocked.Message).To(Equal("the existing Corefile cannot be migrated from CoreDNS 1.14.6 to 1.12.1: " +
		"the running CoreDNS 1.14.6 is newer; adoption never downgrades it, so set spec.version to 1.14.6 or newer; " +
		"nothing was changed. Set spec.corefile, pin spec.version, or edit the Corefile"))
}
