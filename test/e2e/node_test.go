//go:build e2e && node

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Bounds of the real-node cases: what a user may expect of kaddons on a node, generous
// enough for a busy 2-core machine. They are limits, not measurements.
const (
	// driftRecoveryBound is how long DNS may be unanswered after the CoreDNS Deployment
	// was deleted: kaddons re-creates it from its watch, and the new Pods start and turn
	// Ready (their readiness probe waits for the kubernetes plugin's first sync).
	driftRecoveryBound = 90 * time.Second
	// crashingVersion is a test package (testdata/packages) whose CoreDNS exits at start.
	crashingVersion = "1.12.1-crashing"
	// upgradeTimeout is the crashing upgrade's spec.upgrade.timeout.
	upgradeTimeout = "45s"
	// dnsQueryTimeout bounds one DNS query; a query is retried once, as a resolver with
	// resolv.conf's `attempts: 2` does.
	dnsQueryTimeout = 2 * time.Second
)

// kubernetesName is the name every cluster DNS must answer.
const kubernetesName = "kubernetes.default.svc.cluster.local"

// TestRealNode runs kaddons' promise on a real node, in order: it bootstraps the node's network,
// its CoreDNS answers, survives the deletion of its Deployment, a crashing upgrade is rolled
// back without unanswered queries, and metrics-server serves metrics. Each step builds on
// the cluster the one before left.
func TestRealNode(t *testing.T) {
	dumpOnFailure(t)
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"bootstrap: kaddons, a Pod on the NotReady node, installs the CNI and kube-proxy, the node turns Ready, and a Pod's DNS query is answered", testNodeBootstrap},
		{"drift: DNS answers again after the CoreDNS Deployment is deleted", testNodeDrift},
		{"rollback: a crashing CoreDNS upgrade is rolled back, every DNS query answered", testNodeRollback},
		{"metrics: MetricsServer is Ready and the metrics API serves node and Pod metrics", testNodeMetrics},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("%q failed; the later steps need what it sets up", s.name)
		}
	}
}

func testNodeBootstrap(t *testing.T) {
	g := NewWithT(t)
	ready := nodeReadyCondition(g)
	g.Expect(ready.Status).To(Equal(corev1.ConditionFalse), "the node is Ready before it has a pod network")
	g.Expect(ready.Message).To(ContainSubstring("NetworkPluginNotReady"), "the node is NotReady for another reason than the network")

	// kaddons runs as a bootstrapper installs it: the installer's Deployment, its image
	// on the node, on the host network with its bootstrap tolerations. The suite's manager
	// on this machine steps aside until the bootstrap is done, and takes over again after
	// (the later steps use test packages that only it reads).
	suiteManager.stop()
	t.Cleanup(func() { handOverToSuiteManager(t) })
	release := installManagerOnNode(g)
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, operatorNamespace, client.MatchingLabels{"control-plane": "controller-manager"})
		g.Expect(pods).To(HaveLen(1))
		p := pods[0]
		g.Expect(p.Spec.NodeName).To(Equal(node.Name))
		g.Expect(p.Spec.HostNetwork).To(BeTrue())
		g.Expect(p.Spec.Containers[0].Image).To(Equal(release.image))
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
		g.Expect(p.Status.ContainerStatuses[0].Ready).To(BeTrue(), "the manager Pod is not ready: %+v", p.Status.ContainerStatuses[0].State)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the manager Pod never ran on the node")
	g.Expect(nodeReadyCondition(g).Status).To(Equal(corev1.ConditionFalse), "the node turned Ready before kaddons installed its network")

	_, err := kubectlIn(fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeRouter
metadata: {name: kube-router, namespace: kube-system}
spec:
  channel: stable
  apiServerEndpoint: %[1]q
  cniConfDir: %[2]q
  cniBinDir: %[3]q
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeProxy
metadata: {name: kube-proxy, namespace: kube-system}
spec:
  channel: stable
  apiServerEndpoint: %[1]q
  clusterCIDR: %[4]q
`, node.APIServerEndpoint, node.CNIConfDir, node.CNIBinDir, node.ClusterCIDR), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		ready := nodeReadyCondition(g)
		g.Expect(ready.Status).To(Equal(corev1.ConditionTrue), "node: %s: %s", ready.Reason, ready.Message)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the node never became Ready")
	expectAddonReady(t, &addonsv1alpha1.KubeRouter{}, "kube-router")
	expectAddonReady(t, &addonsv1alpha1.KubeProxy{}, "kube-proxy")
	// kube-router wrote its CNI configuration and installed the plugins it uses into the
	// node's folders, which the add-on's fields named.
	for _, f := range []string{filepath.Join(node.CNIConfDir, "10-kuberouter.conflist"), filepath.Join(node.CNIBinDir, "bridge"), filepath.Join(node.CNIBinDir, "host-local")} {
		_, err := os.Stat(f)
		g.Expect(err).NotTo(HaveOccurred(), "kube-router left no %s", f)
	}

	_, err = kubectlIn(fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: CoreDNS
metadata: {name: coredns, namespace: kube-system}
spec:
  channel: stable
  clusterIP: %q
  replicas: 2
`, node.ClusterDNS), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	expectAddonReady(t, &addonsv1alpha1.CoreDNS{}, "coredns")
	pods := podsOf(g, "kube-system", client.MatchingLabels{"k8s-app": "kube-dns"})
	g.Expect(pods).To(HaveLen(2))
	for _, p := range pods {
		g.Expect(p.Spec.NodeName).To(Equal(node.Name))
		g.Expect(p.Status.PodIP).NotTo(BeEmpty())
	}

	// A Pod resolves the API server's Service name through the cluster DNS (the kubelet's
	// clusterDNS, the kube-dns Service kaddons created): busybox's nslookup in the
	// kube-router image, the only image here with a DNS client.
	kubernetesIP := serviceIP(g, "default", "kubernetes")
	ns := newNamespace(t, "node-dns")
	_, err = kubectl("run", "-n", ns, "dns-probe", "--image=docker.io/cloudnativelabs/kube-router:v2.1.0",
		"--image-pull-policy=Never", "--restart=Never", "--command", "--", "nslookup", kubernetesName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		pod := &corev1.Pod{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "dns-probe"}, pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "the DNS probe Pod: %s", pod.Status.Phase)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	answer, err := kubectl("logs", "-n", ns, "dns-probe")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(answer).To(ContainSubstring("Server:\t\t"+node.ClusterDNS), "the Pod asked another server than the cluster DNS")
	g.Expect(answer).To(MatchRegexp(`Name:\s+`+strings.ReplaceAll(kubernetesName, ".", `\.`)+`\s+Address:\s+`+strings.ReplaceAll(kubernetesIP, ".", `\.`)),
		"the Pod did not get the kubernetes Service's address")
	// Every add-on so far was applied by the manager Pod: no manager ran on this machine.
	for _, p := range allManagers() {
		g.Expect(p.alive()).To(BeFalse(), "a manager process of the suite ran during the bootstrap")
	}

	// The release's plugin, as krew or a download installs it, reports the release on both
	// sides and lists what the release's operator runs.
	pluginDir := releasePlugin(g, release)
	plugin := func(args ...string) string {
		cmd := exec.Command("kubectl", append([]string{"kaddons"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+adminKubeconfig,
			"PATH="+pluginDir+string(os.PathListSeparator)+filepath.Dir(kubectlPath)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "kubectl kaddons %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	version := plugin("version")
	g.Expect(version).To(ContainSubstring("Client Version: " + nodeRelease + " (revision "))
	g.Expect(version).To(ContainSubstring("Operator Version: " + nodeRelease + " (image " + release.image + ", Deployment " +
		operatorNamespace + "/kaddons-controller-manager)"))
	listed := plugin("get", "-A")
	for _, addon := range []string{`CoreDNS\s+coredns`, `KubeProxy\s+kube-proxy`, `KubeRouter\s+kube-router`} {
		g.Expect(listed).To(MatchRegexp(`(?m)^kube-system\s+`+addon+`\s+\S+\s+True\s`), "kubectl kaddons get")
	}
	handOverToSuiteManager(t)
}

// handOverToSuiteManager stops the manager Deployment (scaled to zero, its Pod gone) and
// makes sure the suite's manager runs on this machine again. Running it twice is harmless.
func handOverToSuiteManager(t *testing.T) {
	t.Helper()
	if _, err := kubectl("scale", "deployment", "-n", operatorNamespace, "kaddons-controller-manager", "--replicas=0"); err != nil {
		t.Logf("scaling the manager Deployment to zero: %v", err)
	}
	if _, err := kubectl("wait", "--for=delete", "pod", "-n", operatorNamespace, "-l", "control-plane=controller-manager", "--timeout=2m"); err != nil {
		t.Logf("waiting for the manager Pod to go: %v", err)
	}
	if err := suiteManager.ensureRunning(); err != nil {
		t.Errorf("restarting the suite's manager: %v", err)
	}
}

func testNodeDrift(t *testing.T) {
	g := NewWithT(t)
	loop := startDNSLoop(t)
	g.Eventually(loop.answered).WithTimeout(readyTimeout).WithPolling(poll).Should(BeNumerically(">", 0), "no DNS answer before the deletion")

	deployment := getDeployment(g, "kube-system")
	oldUID := deployment.UID
	deleted := time.Now()
	g.Expect(k8sClient.Delete(context.Background(), deployment, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())

	// The old Pods go, then kaddons' Deployment brings new ones: DNS answers again.
	g.Eventually(func(g Gomega) {
		g.Expect(getDeployment(g, "kube-system").UID).NotTo(Equal(oldUID), "the deleted Deployment is still there")
	}).WithTimeout(driftRecoveryBound).WithPolling(poll).Should(Succeed(), "kaddons did not re-create the CoreDNS Deployment")
	g.Eventually(func() time.Time { return loop.lastAnswer() }).WithTimeout(driftRecoveryBound).WithPolling(poll).
		Should(BeTemporally(">", time.Now().Add(-time.Second)), "DNS did not answer again within %s of the deletion", driftRecoveryBound)
	t.Logf("DNS answers again %s after the Deployment was deleted (bound %s); %s", time.Since(deleted).Round(time.Second), driftRecoveryBound, loop)
	loop.stop()
	expectAddonReady(t, &addonsv1alpha1.CoreDNS{}, "coredns")
}

func testNodeRollback(t *testing.T) {
	g := NewWithT(t)
	healthy := getCoreDNS(g, "kube-system").Status.LastHealthyVersion
	g.Expect(healthy).NotTo(BeEmpty())
	// The promise: the Deployment rolls with maxUnavailable 1 of 2 replicas, so one Ready
	// CoreDNS serves throughout, and CoreDNS answers during its 5s lameduck while
	// endpoints drop a Pod that stops. No query may go unanswered.
	d := getDeployment(g, "kube-system")
	g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
	g.Expect(d.Spec.Strategy.RollingUpdate.MaxUnavailable.String()).To(Equal("1"))

	loop := startDNSLoop(t)
	g.Eventually(loop.answered).WithTimeout(readyTimeout).WithPolling(poll).Should(BeNumerically(">", 0))
	_, err := kubectl("patch", "coredns", "-n", "kube-system", "coredns", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"version":%q,"upgrade":{"timeout":%q}}}`, crashingVersion, upgradeTimeout))
	g.Expect(err).NotTo(HaveOccurred())

	// The new version's CoreDNS really crashes: a container of the new ReplicaSet exits.
	g.Eventually(func(g Gomega) {
		crashed := false
		for _, p := range podsOf(g, "kube-system", client.MatchingLabels{"k8s-app": "kube-dns"}) {
			if !slices.Contains(p.Spec.Containers[0].Args, "/etc/coredns/no-such-Corefile") {
				continue
			}
			for _, s := range p.Status.ContainerStatuses {
				if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
					crashed = true
				}
				if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
					crashed = true
				}
			}
		}
		g.Expect(crashed).To(BeTrue(), "no Pod of %s exited yet", crashingVersion)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// kaddons gives up after the upgrade timeout and rolls back to the healthy version.
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, "kube-system")
		g.Expect(cr.Status.Upgrade).NotTo(BeNil())
		g.Expect(cr.Status.Upgrade.FailedVersion).To(Equal(crashingVersion))
		g.Expect(cr.Status.AppliedVersion).To(Equal(healthy))
		degraded := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
		g.Expect(degraded).NotTo(BeNil())
		g.Expect(degraded.Reason).To(Equal("UpgradeFailed"))
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
		d := getDeployment(g, "kube-system")
		expectRolledOut(g, d, 2)
		g.Expect(d.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement("/etc/coredns/no-such-Corefile"))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the crashing upgrade was not rolled back")
	expectEvent(g, "kube-system", "coredns", "RolledBack")

	loop.stop()
	t.Logf("during the crashing upgrade and its rollback: %s", loop)
	g.Expect(loop.answered()).To(BeNumerically(">", 0))
	g.Expect(loop.failures()).To(BeEmpty(), "DNS queries went unanswered while one CoreDNS was always Ready")
}

func testNodeMetrics(t *testing.T) {
	g := NewWithT(t)
	_, err := kubectlIn(`apiVersion: addons.kaddons.dev/v1alpha1
kind: MetricsServer
metadata: {name: metrics-server, namespace: kube-system}
spec:
  channel: stable
  kubeletInsecureTLS: true
  metricResolution: 15s
`, "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	// Ready includes the APIService: the API server reached metrics-server on the node.
	expectAddonReady(t, &addonsv1alpha1.MetricsServer{}, "metrics-server")

	g.Eventually(func(g Gomega) {
		nodes := &unstructured.UnstructuredList{}
		nodes.SetGroupVersionKind(schema.GroupVersionKind{Group: "metrics.k8s.io", Version: "v1beta1", Kind: "NodeMetricsList"})
		g.Expect(k8sClient.List(context.Background(), nodes)).To(Succeed())
		g.Expect(nodes.Items).To(HaveLen(1))
		g.Expect(nodes.Items[0].GetName()).To(Equal(node.Name))
		cpu, _, _ := unstructured.NestedString(nodes.Items[0].Object, "usage", "cpu")
		memory, _, _ := unstructured.NestedString(nodes.Items[0].Object, "usage", "memory")
		g.Expect(cpu).NotTo(BeEmpty())
		g.Expect(memory).NotTo(BeEmpty())
	}).WithTimeout(readyTimeout).WithPolling(2*time.Second).Should(Succeed(), "no node metrics")

	g.Eventually(func(g Gomega) {
		pods := &unstructured.UnstructuredList{}
		pods.SetGroupVersionKind(schema.GroupVersionKind{Group: "metrics.k8s.io", Version: "v1beta1", Kind: "PodMetricsList"})
		g.Expect(k8sClient.List(context.Background(), pods, client.InNamespace("kube-system"))).To(Succeed())
		names := make([]string, 0, len(pods.Items))
		for _, p := range pods.Items {
			names = append(names, p.GetName())
		}
		g.Expect(names).To(ContainElement(HavePrefix("coredns-")))
		g.Expect(names).To(ContainElement(HavePrefix("metrics-server-")))
	}).WithTimeout(readyTimeout).WithPolling(2*time.Second).Should(Succeed(), "no Pod metrics")

	out, err := kubectl("top", "nodes")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring(node.Name))
	t.Logf("kubectl top nodes:\n%s", out)
}

// nodeReadyCondition returns the real node's Ready condition.
func nodeReadyCondition(g Gomega) corev1.NodeCondition {
	n := &corev1.Node{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: node.Name}, n)).To(Succeed())
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	g.Expect("no Ready condition").To(BeEmpty())
	return corev1.NodeCondition{}
}

// expectAddonReady waits until the add-on kube-system/name, as a bootstrapper puts it, is
// Ready for its current generation.
func expectAddonReady(t *testing.T, obj addonsv1alpha1.Addon, name string) {
	const ns = "kube-system"
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)).To(Succeed())
		ready := meta.FindStatusCondition(obj.GetAddonStatus().Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "no Ready condition yet")
		g.Expect(ready.ObservedGeneration).To(Equal(obj.GetGeneration()), "Ready is about an older generation")
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "%T %s/%s never became Ready", obj, ns, name)
}

// podsOf lists the Pods in ns with the labels.
func podsOf(g Gomega, ns string, labels client.MatchingLabels) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(k8sClient.List(context.Background(), pods, client.InNamespace(ns), labels)).To(Succeed())
	return pods.Items
}

// serviceIP returns the clusterIP of Service ns/name.
func serviceIP(g Gomega, ns, name string) string {
	svc := &corev1.Service{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, svc)).To(Succeed())
	return svc.Spec.ClusterIP
}

// expectEvent checks that the add-on CoreDNS ns/name has an event with reason.
func expectEvent(g Gomega, ns, name, reason string) {
	events := &corev1.EventList{}
	g.Expect(k8sClient.List(context.Background(), events, client.InNamespace(ns))).To(Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "CoreDNS" && e.InvolvedObject.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	g.Expect(reasons).To(ContainElement(reason))
}

// dnsLoop queries the cluster DNS Service from this machine (through kube-proxy's rules,
// as a Pod's queries go) for the kubernetes Service's name, one query after another, and
// counts the answers and the queries that failed twice.
type dnsLoop struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ok       int
	failed   []string
	last     time.Time
	resolver *net.Resolver
}

// startDNSLoop starts a loop that runs until stop (or the end of t).
func startDNSLoop(t *testing.T) *dnsLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &dnsLoop{cancel: cancel, done: make(chan struct{})}
	server := net.JoinHostPort(node.ClusterDNS, "53")
	l.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	go l.run(ctx)
	t.Cleanup(l.stop)
	return l
}

func (l *dnsLoop) run(ctx context.Context) {
	defer close(l.done)
	for ctx.Err() == nil {
		var err error
		for attempt := 0; attempt < 2; attempt++ {
			if err = l.query(ctx); err == nil {
				break
			}
		}
		l.mu.Lock()
		switch {
		case err == nil:
			l.ok++
			l.last = time.Now()
		case ctx.Err() == nil:
			l.failed = append(l.failed, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err))
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// query resolves the kubernetes Service's name once.
func (l *dnsLoop) query(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dnsQueryTimeout)
	defer cancel()
	addrs, err := l.resolver.LookupHost(ctx, kubernetesName+".")
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return fmt.Errorf("no address for %s", kubernetesName)
	}
	return nil
}

func (l *dnsLoop) stop() {
	l.cancel()
	<-l.done
}

func (l *dnsLoop) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

func (l *dnsLoop) lastAnswer() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func (l *dnsLoop) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.failed)
}

func (l *dnsLoop) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d queries answered, %d unanswered", l.ok, len(l.failed))
}
