//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// The suite's clients log nothing; without a logger controller-runtime prints a
	// warning with a stack trace into the test output.
	ctrllog.SetLogger(logr.Discard())
}

// freshCluster starts a local cluster of its own for t, separate from the suite's, and
// returns a kubectl for it as admin and a client. The cluster goes away with t.
func freshCluster(t *testing.T, name string) (func(stdin string, args ...string) (string, error), client.Client) {
	t.Helper()
	g := NewWithT(t)
	ports, err := freePorts(3)
	g.Expect(err).NotTo(HaveOccurred())
	dir := filepath.Join(workDir, name)
	env := append(os.Environ(),
		"LOCAL_CLUSTER_DIR="+dir,
		"LOCAL_CLUSTER_ETCD_PORT="+strconv.Itoa(ports[0]),
		"LOCAL_CLUSTER_ETCD_PEER_PORT="+strconv.Itoa(ports[1]),
		"LOCAL_CLUSTER_APISERVER_PORT="+strconv.Itoa(ports[2]),
		"LOCAL_CLUSTER_LOG_LINES=40",
	)
	script := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(repoRoot, "hack", "local-cluster.sh"), args...)
		cmd.Env = env
		return cmd
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := script("logs").CombinedOutput()
			t.Logf("logs of the cluster %s:\n%s", name, out)
			// Last, so that it ends the output: what the cluster made of the objects.
			t.Logf("state of the cluster %s:\n%s", name, clusterState(filepath.Join(dir, "kubeconfig")))
		}
		if os.Getenv("KADDONS_E2E_KEEP") != "" {
			t.Logf("KADDONS_E2E_KEEP is set: the cluster %s keeps running (LOCAL_CLUSTER_DIR=%s)", name, dir)
			return
		}
		if out, err := script("down", "--wipe").CombinedOutput(); err != nil {
			t.Errorf("stopping the cluster %s: %v\n%s", name, err, out)
		}
	})
	start := time.Now()
	out, err := script("up").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "starting the cluster %s:\n%s", name, out)
	logf("started the cluster %s in %s", name, time.Since(start).Round(time.Second))

	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	kc := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(kubectlPath, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		return output(cmd)
	}
	return kc, c
}

// clusterState describes the nodes and what runs in the operator's namespace, with the
// cluster's recent events, for the log of a failed test.
func clusterState(kubeconfig string) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "nodes", "-o", "wide"},
		{"get", "deployments,replicasets,pods,poddisruptionbudgets", "-n", operatorNamespace, "-o", "wide"},
		{"describe", "deployment", "-n", operatorNamespace},
		{"describe", "pods", "-n", operatorNamespace},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := exec.Command(kubectlPath, append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
		fmt.Fprintf(&b, "$ kubectl %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}

// TestInstaller applies the installer (make build-installer IMG=...) with kubectl to a
// fresh cluster: every object is accepted, the CRDs are Established, the manager
// Deployment becomes Available (kwok runs its pod), and deleting the installer removes
// the namespace and the CRDs.
func TestInstaller(t *testing.T) {
	g := NewWithT(t)
	const image = "registry.example.com/kaddons/manager:e2e"
	installer := filepath.Join(workDir, "installer", "install.yaml")
	cmd := exec.Command("make", "build-installer", "IMG="+image, "INSTALLER="+installer)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "make build-installer:\n%s", out)

	kc, c := freshCluster(t, "installer")
	start := time.Now()
	applied, err := kc("", "apply", "--server-side", "-f", installer)
	g.Expect(err).NotTo(HaveOccurred())
	listed, err := kc("", "get", "-f", installer, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	objects := strings.Fields(listed)
	g.Expect(strings.Count(applied, "serverside-applied")).To(Equal(len(objects)), "kubectl apply:\n%s", applied)

	var crds []string
	for _, o := range objects {
		if strings.HasPrefix(o, "customresourcedefinition") {
			crds = append(crds, o)
		}
	}
	g.Expect(crds).NotTo(BeEmpty())
	_, err = kc("", append([]string{"wait", "--for=condition=Established", "--timeout=2m"}, crds...)...)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kc("", "wait", "--for=condition=Available", "--timeout=3m", "-n", operatorNamespace,
		"deployment/kaddons-controller-manager")
	g.Expect(err).NotTo(HaveOccurred())
	logf("the installer's manager was Available %s after kubectl apply", time.Since(start).Round(time.Second))

	// What the cluster made of the bootstrap settings: the pod runs on the host network of
	// a node with the critical priority, with the image the installer names.
	ctx, cancel := background()
	defer cancel()
	deploy := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "kaddons-controller-manager"}, deploy)).To(Succeed())
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
	pods := &corev1.PodList{}
	g.Expect(c.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels(deploy.Spec.Selector.MatchLabels))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	pod := pods.Items[0]
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(pod.Spec.HostNetwork).To(BeTrue())
	g.Expect(pod.Spec.Priority).To(HaveValue(BeNumerically(">=", 2000000000)), "system-cluster-critical")
	g.Expect(pod.Status.PodIP).To(Equal(pod.Status.HostIP), "a host-network pod has its node's address")

	start = time.Now()
	_, err = kc("", "delete", "-f", installer, "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		_, err := kc("", "get", "namespace", operatorNamespace)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("NotFound"))
	}).WithTimeout(crdDeleteTimeout).WithPolling(poll).Should(Succeed(), "the namespace %s stays", operatorNamespace)
	// kube-apiserver's CRD finalizer can stall for about five minutes on "could not list
	// instances: storage is (re)initializing" when a CRD is deleted while its watch cache
	// re-initialises (upstream; docs/install.md says so), and the namespace's deletion,
	// which lists every namespaced kind, with it. Both must still go.
	lastReport := time.Now()
	g.Eventually(func(g Gomega) {
		left, err := kc("", "get", "crd", "-o", "name")
		g.Expect(err).NotTo(HaveOccurred())
		var stuck []string
		for _, crd := range crds {
			if slices.Contains(strings.Fields(left), crd) {
				stuck = append(stuck, crd)
			}
		}
		if len(stuck) > 0 && time.Since(lastReport) > time.Minute {
			lastReport = time.Now()
			var conditions strings.Builder
			for _, crd := range stuck {
				message, _ := kc("", "get", crd, "-o",
					`jsonpath={.status.conditions[?(@.type=="Terminating")].reason}: {.status.conditions[?(@.type=="Terminating")].message}`)
				fmt.Fprintf(&conditions, "%s: %s\n", crd, message)
			}
			logf("CRDs still terminating after %s:\n%s", time.Since(start).Round(time.Second), conditions.String())
		}
		g.Expect(stuck).To(BeEmpty(), "CRDs left after deleting the installer")
	}).WithTimeout(crdDeleteTimeout).WithPolling(poll).Should(Succeed())
	left, err := kc("", "get", "clusterrole,clusterrolebinding", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).NotTo(ContainSubstring("kaddons-"), "cluster-scoped RBAC of the installer remains")
	logf("kubectl delete removed the installer in %s", time.Since(start).Round(time.Second))
}
