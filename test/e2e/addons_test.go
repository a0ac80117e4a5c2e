//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// fakeNodes is how many kwok nodes hack/local-cluster.sh creates.
const fakeNodes = 3

// apply applies a manifest as the cluster admin.
func apply(t *testing.T, manifest string) {
	t.Helper()
	if _, err := kubectlIn(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying:\n%s\n%v", manifest, err)
	}
}

// readAddon reads obj straight from the API server.
func readAddon(g Gomega, obj addonsv1alpha1.Addon) {
	ctx, cancel := background()
	defer cancel()
	g.ExpectWithOffset(1, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// waitAddon waits until obj's Ready condition is about its current generation and passes
// check, and returns that condition.
func waitAddon(t *testing.T, obj addonsv1alpha1.Addon, check func(g Gomega, ready metav1.Condition)) metav1.Condition {
	t.Helper()
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		readAddon(g, obj)
		c := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil(), "no Ready condition yet")
		g.Expect(c.ObservedGeneration).To(Equal(obj.GetGeneration()), "Ready is about an older generation")
		ready = *c
		check(g, ready)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "%T %s", obj, client.ObjectKeyFromObject(obj))
	return ready
}

// isReady checks that the add-on is Ready.
func isReady(g Gomega, ready metav1.Condition) {
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
}

// daemonSetOnEveryNode checks that the DaemonSet runs one available, current pod on each
// of nodes nodes.
func daemonSetOnEveryNode(g Gomega, ns, name string, nodes int32) {
	ctx, cancel := background()
	defer cancel()
	ds := &appsv1.DaemonSet{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, ds)).To(Succeed())
	g.Expect(ds.Status.ObservedGeneration).To(Equal(ds.Generation))
	g.Expect(ds.Status.DesiredNumberScheduled).To(Equal(nodes), "desiredNumberScheduled")
	g.Expect(ds.Status.UpdatedNumberScheduled).To(Equal(nodes), "updatedNumberScheduled")
	g.Expect(ds.Status.NumberAvailable).To(Equal(nodes), "numberAvailable")
	pods := &corev1.PodList{}
	g.Expect(k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(ds.Spec.Selector.MatchLabels))).To(Succeed())
	onNode := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			onNode[p.Spec.NodeName] = true
		}
	}
	g.Expect(onNode).To(HaveLen(int(nodes)), "running pods per node: %v", onNode)
}

// TestAllAddons runs every add-on kind in one manager and one cluster: two CoreDNS in
// different namespaces, NodeLocal DNSCache following one of them, the Dashboard in a
// namespace it creates, metrics-server, whose aggregated API this cluster cannot reach, and
// kube-proxy and kube-router on every node.
func TestAllAddons(t *testing.T) {
	g := NewWithT(t)
	nsA, nsB := newNamespace(t, "dns-a"), newNamespace(t, "dns-b")
	ui := nsA + "-ui"
	pkgNS := newNamespace(t, "pkg")
	apply(t, coreDNSManifest(nsA, newVersion, 2))
	apply(t, coreDNSManifest(nsB, oldVersion, 1))
	apply(t, fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: NodeLocalDNS
metadata: {name: nodelocaldns, namespace: %[1]s}
spec:
  coreDNSRef: {name: coredns}
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: Dashboard
metadata: {name: dashboard, namespace: %[1]s}
spec:
  targetNamespace: %[2]s
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: MetricsServer
metadata: {name: metrics-server, namespace: %[1]s}
spec:
  kubeletInsecureTLS: true
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeProxy
metadata: {name: kube-proxy, namespace: %[1]s}
spec:
  apiServerEndpoint: 10.254.254.1:6443
  clusterCIDR: 10.244.0.0/16
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeRouter
metadata: {name: kube-router, namespace: %[1]s}
spec:
  apiServerEndpoint: 10.254.254.1:6443
  networkPolicy: false
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: Package
metadata: {name: dns, namespace: %[1]s}
spec:
  package: coredns
  version: %[4]s
  targetNamespace: %[3]s
`, nsA, ui, pkgNS, oldVersion))

	t.Run("the test covers every add-on of the registry", func(t *testing.T) {
		g := NewWithT(t)
		for _, def := range controllers.Definitions() {
			list := &unstructured.UnstructuredList{}
			gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
			g.Expect(err).NotTo(HaveOccurred())
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			g.Expect(k8sClient.List(context.Background(), list, client.InNamespace(nsA))).To(Succeed())
			g.Expect(list.Items).NotTo(BeEmpty(), "TestAllAddons applies no %s; add it", gvk.Kind)
		}
	})

	dnsA, dnsB := expectReady(t, nsA), expectReady(t, nsB)
	g.Expect(dnsA.Status.AppliedVersion).To(Equal(newVersion))
	g.Expect(dnsB.Status.AppliedVersion).To(Equal(oldVersion))

	t.Run("NodeLocal DNSCache runs on every node and follows its CoreDNS", func(t *testing.T) {
		g := NewWithT(t)
		nl := &addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "nodelocaldns"}}
		waitAddon(t, nl, isReady)
		daemonSetOnEveryNode(g, nsA, "node-local-dns", fakeNodes)
		ctx, cancel := background()
		defer cancel()
		svc := &corev1.Service{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: nsA, Name: "kube-dns"}, svc)).To(Succeed())
		cm := &corev1.ConfigMap{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: nsA, Name: "node-local-dns"}, cm)).To(Succeed())
		g.Expect(cm.Data["Corefile"]).To(ContainSubstring("bind 169.254.20.10 " + svc.Spec.ClusterIP))
	})

	t.Run("kube-proxy runs on every node, configured by its fields", func(t *testing.T) {
		g := NewWithT(t)
		kp := &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "kube-proxy"}}
		waitAddon(t, kp, isReady)
		daemonSetOnEveryNode(g, nsA, "kube-proxy", fakeNodes)
		ctx, cancel := background()
		defer cancel()
		cm := &corev1.ConfigMap{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: nsA, Name: "kube-proxy"}, cm)).To(Succeed())
		g.Expect(cm.Data["kubeconfig.conf"]).To(ContainSubstring("server: https://10.254.254.1:6443"))
		g.Expect(cm.Data["config.conf"]).To(And(ContainSubstring("clusterCIDR: 10.244.0.0/16"), ContainSubstring("mode: iptables")))
	})

	t.Run("kube-router runs on every node, configured by its fields", func(t *testing.T) {
		g := NewWithT(t)
		kr := &addonsv1alpha1.KubeRouter{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "kube-router"}}
		waitAddon(t, kr, isReady)
		daemonSetOnEveryNode(g, nsA, "kube-router", fakeNodes)
		ctx, cancel := background()
		defer cancel()
		ds := &appsv1.DaemonSet{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: nsA, Name: "kube-router"}, ds)).To(Succeed())
		c := ds.Spec.Template.Spec.Containers[0]
		g.Expect(c.Args).To(ContainElements("--run-firewall=false", "--run-service-proxy=false"))
		g.Expect(c.Env).To(ContainElements(corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "10.254.254.1"},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}))
	})

	t.Run("the generic Package installs a typed kind's package by name", func(t *testing.T) {
		g := NewWithT(t)
		p := &addonsv1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "dns"}}
		waitAddon(t, p, isReady)
		g.Expect(p.Status.AppliedVersion).To(Equal(oldVersion))
		ctx, cancel := background()
		defer cancel()
		deploy := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: pkgNS, Name: "coredns"}, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + oldVersion))
		g.Expect(deploy.Labels).To(HaveKeyWithValue(ssa.LabelKind, "package"))
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "system:coredns-" + pkgNS}, &rbacv1.ClusterRole{})).To(Succeed())
	})

	t.Run("the Dashboard runs in the namespace it created", func(t *testing.T) {
		g := NewWithT(t)
		d := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "dashboard"}}
		waitAddon(t, d, isReady)
		g.Expect(d.Status.Inventory.Objects()).To(ContainElement(addonsv1alpha1.ObjectReference{Version: "v1", Kind: "Namespace", Name: ui}))
		for _, name := range []string{"kubernetes-dashboard", "dashboard-metrics-scraper"} {
			ctx, cancel := background()
			deploy := &appsv1.Deployment{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ui, Name: name}, deploy)).To(Succeed())
			cancel()
			expectRolledOut(g, deploy, 1)
		}
	})

	t.Run("metrics-server runs but its API is unreachable, and says so", func(t *testing.T) {
		g := NewWithT(t)
		ms := &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "metrics-server"}}
		ready := waitAddon(t, ms, func(g Gomega, ready metav1.Condition) {
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
			g.Expect(ready.Message).NotTo(ContainSubstring("Deployment"), "the Deployment is expected to be available")
		})
		// Only the APIService holds it back: this cluster publishes no endpoints, so the
		// API server has nowhere to send metrics.k8s.io requests.
		g.Expect(ready.Message).To(Equal(fmt.Sprintf("APIService v1beta1.metrics.k8s.io: Available=False (EndpointsNotFound: "+
			"cannot find endpointslices for service/metrics-server in %q)", nsA)))
		g.Expect(ms.Status.AppliedVersion).NotTo(BeEmpty())

		ctx, cancel := background()
		defer cancel()
		deploy := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: nsA, Name: "metrics-server"}, deploy)).To(Succeed())
		expectRolledOut(g, deploy, 1)
		g.Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--kubelet-insecure-tls"))

		apiService := &unstructured.Unstructured{}
		apiService.SetAPIVersion("apiregistration.k8s.io/v1")
		apiService.SetKind("APIService")
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "v1beta1.metrics.k8s.io"}, apiService)).To(Succeed())
		conditions, _, _ := unstructured.NestedSlice(apiService.Object, "status", "conditions")
		g.Expect(conditions).To(ContainElement(And(HaveKeyWithValue("type", "Available"),
			HaveKeyWithValue("status", "False"), HaveKeyWithValue("reason", "EndpointsNotFound"))))
		_, err := kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes")
		g.Expect(err).To(HaveOccurred(), "the metrics API answered, yet nothing serves it")
		g.Expect(err.Error()).To(ContainSubstring("ServiceUnavailable"))
	})

	t.Run("the two CoreDNS do not collide", func(t *testing.T) {
		g := NewWithT(t)
		a := map[objectRef]bool{}
		for _, r := range dnsA.Status.Inventory.Objects() {
			a[refFromInventory(r)] = true
		}
		for _, r := range dnsB.Status.Inventory.Objects() {
			g.Expect(a).NotTo(HaveKey(refFromInventory(r)), "both CoreDNS list %s", r)
		}
		g.Eventually(expectInventoryConsistent).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

		// Deleting one leaves the other, and everything that follows it, untouched.
		_, err := kubectl("delete", "coredns.addons.kaddons.dev/coredns", "-n", nsB, "--timeout="+deleteTimeout.String())
		g.Expect(err).NotTo(HaveOccurred())
		expectGone(t, dnsB.Status.Inventory.Objects())
		for _, r := range dnsA.Status.Inventory.Objects() {
			found, err := exists(refFromInventory(r))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue(), "%s of the other CoreDNS was deleted", r)
		}
		expectReady(t, nsA)
	})
}

// TestNodeLocalDNSWaitsForNewNode adds a node: NodeLocal DNSCache is not Ready until the
// DaemonSet's pod on it is available.
func TestNodeLocalDNSWaitsForNewNode(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "nodelocal")
	apply(t, fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: NodeLocalDNS
metadata: {name: nodelocaldns, namespace: %s}
spec:
  clusterDNSIP: 10.96.0.10
`, ns))
	nl := &addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodelocaldns"}}
	waitAddon(t, nl, isReady)
	g.Eventually(func(g Gomega) { daemonSetOnEveryNode(g, ns, "node-local-dns", fakeNodes) }).
		WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// A node that kwok does not run: its node-local-dns pod stays pending.
	name := strings.TrimPrefix(ns, "e2e-") + "-node"
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.99"}, {Type: corev1.NodeHostName, Address: name}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resourceQuantity("32"), corev1.ResourceMemory: resourceQuantity("256Gi"),
				corev1.ResourcePods: resourceQuantity("110")},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resourceQuantity("32"), corev1.ResourceMemory: resourceQuantity("256Gi"),
				corev1.ResourcePods: resourceQuantity("110")},
		},
	}
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() {
		ctx, cancel := background()
		defer cancel()
		if err := k8sClient.Delete(ctx, node); err != nil {
			t.Logf("deleting node %s: %v", name, err)
		}
	})

	ready := waitAddon(t, nl, func(g Gomega, ready metav1.Condition) {
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
	})
	g.Expect(ready.Message).To(ContainSubstring("DaemonSet " + ns + "/node-local-dns"))
	g.Expect(ready.Message).To(ContainSubstring(fmt.Sprintf("%d/%d", fakeNodes, fakeNodes+1)))

	// The new node's pod starts. kwok only runs nodes it manages from their creation, so
	// the test writes what that node's kubelet would: the pod runs and is ready.
	ctx, cancel = background()
	defer cancel()
	pods := &corev1.PodList{}
	g.Expect(k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": name})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	pod := &pods.Items[0]
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP, pod.Status.PodIP = "10.0.1.99", "10.0.1.99"
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Ready: true, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	g.Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	waitAddon(t, nl, isReady)
	daemonSetOnEveryNode(g, ns, "node-local-dns", fakeNodes+1)
}

// resourceQuantity parses a quantity such as "32" or "256Gi".
func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
