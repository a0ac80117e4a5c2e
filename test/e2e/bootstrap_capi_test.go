//go:build e2e && bootstrap

package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// The Cluster API kinds the test reads (v1beta2, what Cluster API v1.14 serves).
var (
	capiCluster    = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}
	capiCRS        = schema.GroupVersionKind{Group: "addons.cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterResourceSet"}
	capiCRSBinding = schema.GroupVersionKind{Group: "addons.cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterResourceSetBinding"}
)

// TestBootstrapClusterAPI proves the ClusterResourceSet recipe (docs/bootstrap/capi.md)
// with the real Cluster API core manager: the suite's cluster is the management cluster, a
// fresh local cluster is the workload cluster, and examples/capi, with the installer in
// it, is applied to the management cluster as a user would. The ClusterResourceSet
// applies the installer and the CoreDNS add-on to the workload cluster; the operator,
// running as the installer's ServiceAccount there, installs CoreDNS, which becomes Ready;
// the ClusterResourceSetBinding records both resources as applied.
//
// No infrastructure or control-plane provider exists here, and Cluster API v1.14 refuses
// a Cluster that names neither. The test therefore plays a minimal infrastructure
// provider: a LoopbackCluster kind (its CRD carries the contract label
// cluster.x-k8s.io/v1beta2: v1alpha1) whose object holds the workload cluster's endpoint
// in spec.controlPlaneEndpoint, and whose status the test sets as a provider would once
// its infrastructure exists: status.initialization.provisioned=true. Cluster API's
// Cluster controller then marks the Cluster's infrastructure provisioned, which is all
// ClusterResourceSet waits for (the cluster cache connects once
// status.initialization.infrastructureProvisioned is true). The kubeconfig Secret, which
// a control-plane provider would write, is written by the test, with the workload
// cluster's admin credentials.
func TestBootstrapClusterAPI(t *testing.T) {
	g := NewWithT(t)
	capi := toolDir(t, "capi")
	installer := bootstrapInstaller(t)

	// The workload cluster, and what the management cluster needs to reach it.
	const workloadName = "capi-workload"
	_, workload := freshCluster(t, workloadName)
	workloadDir := filepath.Join(workDir, workloadName)
	workloadKubeconfig, err := os.ReadFile(filepath.Join(workloadDir, "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	workloadPort := apiServerPort(t, workloadDir)

	// The Cluster API core manager on the management cluster, with its CRDs and its
	// webhooks (served from this machine; the configurations point at it by URL).
	applyCRDs(t, filepath.Join(capi, "crds"))
	startClusterAPI(t, capi)

	ns := newNamespace(t, "capi")
	clusterName := "workload"
	cleanupCAPI(t, ns)
	dumpCAPIOnFailure(t, ns, clusterName)

	// What a control-plane provider writes: the kubeconfig Secret.
	secret := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %[1]s-kubeconfig
  namespace: %[2]s
  labels:
    cluster.x-k8s.io/cluster-name: %[1]s
type: cluster.x-k8s.io/secret
data:
  value: %[3]s
`, clusterName, ns, base64.StdEncoding.EncodeToString(workloadKubeconfig))
	_, err = kubectlIn(secret, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	// The stand-in infrastructure provider's object, provisioned, and the Cluster on it.
	_, err = kubectlIn(loopbackClusterCRD, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kubectl("wait", "--for=condition=Established", "--timeout=2m", "crd/loopbackclusters."+loopbackGroup)
	g.Expect(err).NotTo(HaveOccurred())
	infra := fmt.Sprintf(`apiVersion: %s/v1alpha1
kind: LoopbackCluster
metadata:
  name: %s
  namespace: %s
spec:
  controlPlaneEndpoint:
    host: 127.0.0.1
    port: %d
`, loopbackGroup, clusterName, ns, workloadPort)
	_, err = kubectlIn(infra, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kubectl("patch", "loopbackcluster."+loopbackGroup, clusterName, "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"initialization":{"provisioned":true}}}`)
	g.Expect(err).NotTo(HaveOccurred())
	cluster := fmt.Sprintf(`apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: %s
  namespace: %s
  labels:
    addons.kaddons.dev/install: "true"
spec:
  infrastructureRef:
    apiGroup: %s
    kind: LoopbackCluster
    name: %s
`, clusterName, ns, loopbackGroup, clusterName)
	_, err = kubectlIn(cluster, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())

	// examples/capi with the installer, as the page tells a user to apply it.
	example := filepath.Join(workDir, "capi-example")
	g.Expect(copyTree(filepath.Join(repoRoot, "examples", "capi"), example)).To(Succeed())
	data, err := os.ReadFile(installer)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(example, "install.yaml"), data, 0o644)).To(Succeed())
	start := time.Now()
	_, err = kubectl("apply", "--server-side", "-n", ns, "-k", example)
	g.Expect(err).NotTo(HaveOccurred())

	// Cluster API reads the provider's status and endpoint into the Cluster: the status
	// ClusterResourceSet waits for.
	g.Eventually(func(g Gomega) {
		u := getUnstructured(g, capiCluster, ns, clusterName)
		provisioned, _, _ := unstructured.NestedBool(u.Object, "status", "initialization", "infrastructureProvisioned")
		g.Expect(provisioned).To(BeTrue(), "status.initialization.infrastructureProvisioned")
		port, _, _ := unstructured.NestedInt64(u.Object, "spec", "controlPlaneEndpoint", "port")
		g.Expect(port).To(BeEquivalentTo(workloadPort), "spec.controlPlaneEndpoint from the LoopbackCluster")
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// The ClusterResourceSet applied the installer: the operator's ServiceAccount exists on
	// the workload cluster, and the operator runs as it (on this machine, with the
	// installer's RBAC; kwok plays the installer's Deployment).
	g.Eventually(func(g Gomega) {
		ctx, cancel := background()
		defer cancel()
		sa := &corev1.ServiceAccount{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorServiceAccount}, sa)).To(Succeed())
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the installer never reached the workload cluster")
	saKubeconfig := filepath.Join(workloadDir, "manager.kubeconfig")
	script := exec.Command(filepath.Join(repoRoot, "hack", "local-cluster.sh"), "kubeconfig-for-sa", operatorNamespace,
		operatorServiceAccount, saKubeconfig)
	script.Env = append(os.Environ(), "LOCAL_CLUSTER_DIR="+workloadDir)
	out, err := script.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	manager := newManager("capi-workload-manager")
	manager.kubeconfig = saKubeconfig
	t.Cleanup(manager.stop)
	g.Expect(manager.start()).To(Succeed())

	// The add-on resource came with the second ConfigMap; the operator makes it Ready.
	coreDNS := &addonsv1alpha1.CoreDNS{}
	g.Eventually(func(g Gomega) {
		ctx, cancel := background()
		defer cancel()
		g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, coreDNS)).To(Succeed())
		ready := meta.FindStatusCondition(coreDNS.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "no Ready condition yet")
		g.Expect(ready.ObservedGeneration).To(Equal(coreDNS.Generation), "Ready is about an older generation")
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "CoreDNS on the workload cluster never became Ready")
	g.Expect(coreDNS.Status.AppliedVersion).NotTo(BeEmpty())
	ctx, cancel := background()
	defer cancel()
	deploy := &appsv1.Deployment{}
	g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, deploy)).To(Succeed())
	expectRolledOut(g, deploy, ptrValue(deploy.Spec.Replicas))
	logf("CoreDNS %s was Ready on the workload cluster %s after the ClusterResourceSet was applied",
		coreDNS.Status.AppliedVersion, time.Since(start).Round(time.Second))

	// The binding records both resources as applied to the Cluster, and the
	// ClusterResourceSet says so.
	binding := getUnstructured(g, capiCRSBinding, ns, clusterName)
	g.Expect(binding.GetOwnerReferences()).To(ContainElement(HaveField("Kind", "ClusterResourceSet")))
	bindings, _, _ := unstructured.NestedSlice(binding.Object, "spec", "bindings")
	g.Expect(bindings).To(HaveLen(1), "bindings: %v", bindings)
	entry := bindings[0].(map[string]any)
	g.Expect(entry).To(HaveKeyWithValue("clusterResourceSetName", "kaddons"))
	resources, _ := entry["resources"].([]any)
	applied := map[string]bool{}
	for _, r := range resources {
		res := r.(map[string]any)
		g.Expect(res).To(HaveKeyWithValue("kind", "ConfigMap"))
		g.Expect(res["hash"]).NotTo(BeEmpty(), "%v", res)
		applied[res["name"].(string)], _ = res["applied"].(bool)
	}
	g.Expect(applied).To(Equal(map[string]bool{"kaddons-install": true, "kaddons-addons": true}))
	crs := getUnstructured(g, capiCRS, ns, "kaddons")
	conditions, _, _ := unstructured.NestedSlice(crs.Object, "status", "conditions")
	g.Expect(conditions).To(ContainElement(And(HaveKeyWithValue("type", "ResourcesApplied"), HaveKeyWithValue("status", "True"))),
		"ClusterResourceSet conditions: %v", conditions)
}

// loopbackGroup is the API group of the test's stand-in infrastructure provider.
const loopbackGroup = "infrastructure.e2e.kaddons.dev"

// loopbackClusterCRD defines LoopbackCluster, the InfrastructureCluster of the test's
// stand-in provider: its label says which of its versions serves Cluster API's v1beta2
// contract, and it keeps whatever fields it is given (spec.controlPlaneEndpoint,
// status.initialization.provisioned are the ones the contract reads).
const loopbackClusterCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: loopbackclusters.` + loopbackGroup + `
  labels:
    cluster.x-k8s.io/v1beta2: v1alpha1
spec:
  group: ` + loopbackGroup + `
  names:
    kind: LoopbackCluster
    listKind: LoopbackClusterList
    plural: loopbackclusters
    singular: loopbackcluster
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// apiServerPort returns the kube-apiserver port hack/local-cluster.sh recorded for the
// cluster in dir.
func apiServerPort(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "settings.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "apiserver_port="); ok {
			port, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return port
		}
	}
	t.Fatalf("%s/settings.env records no apiserver_port", dir)
	return 0
}

// startClusterAPI runs the Cluster API core manager from the capi build on the suite's
// cluster, as admin, with its webhooks registered.
func startClusterAPI(t *testing.T, capi string) {
	t.Helper()
	g := NewWithT(t)
	ports, err := freePorts(3)
	g.Expect(err).NotTo(HaveOccurred())
	webhookPort, healthPort, diagnosticsPort := ports[0], ports[1], ports[2]
	certDir := filepath.Join(workDir, "capi-webhook-certs")
	caBundle, err := servingCert(certDir)
	g.Expect(err).NotTo(HaveOccurred())
	startTool(t, "cluster-api-manager", filepath.Join(capi, "cluster-api-manager"), adminKubeconfig, healthPort,
		"--leader-elect=false",
		"--webhook-port="+strconv.Itoa(webhookPort),
		"--webhook-cert-dir="+certDir,
		"--health-addr=127.0.0.1:"+strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:"+strconv.Itoa(diagnosticsPort),
		"--insecure-diagnostics",
	)

	webhooks, err := capiWebhooks(filepath.Join(capi, "webhooks.yaml"), webhookPort, caBundle)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := kubectlIn(webhooks, "apply", "--server-side", "-f", "-", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if _, err := kubectl(append([]string{"delete", "--ignore-not-found"}, strings.Fields(out)...)...); err != nil {
			t.Errorf("deleting Cluster API's webhook configurations: %v", err)
		}
	})
}

// capiWebhooks returns Cluster API's webhook configurations, pointed at the manager on
// 127.0.0.1:port instead of its in-cluster Service, and named capi-<name>.
func capiWebhooks(path string, port int, caBundle []byte) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var docs []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetName("capi-" + u.GetName())
		webhooks, _, err := unstructured.NestedSlice(u.Object, "webhooks")
		if err != nil {
			return "", err
		}
		for i, w := range webhooks {
			hook := w.(map[string]any)
			svcPath, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if svcPath == "" {
				return "", fmt.Errorf("%s: webhook %v has no service path", path, hook["name"])
			}
			hook["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, svcPath),
				"caBundle": base64.StdEncoding.EncodeToString(caBundle),
			}
			webhooks[i] = hook
		}
		if err := unstructured.SetNestedSlice(u.Object, webhooks, "webhooks"); err != nil {
			return "", err
		}
		out, err := yaml.Marshal(u.Object)
		if err != nil {
			return "", err
		}
		docs = append(docs, string(out))
	}
	if len(docs) == 0 {
		return "", fmt.Errorf("%s holds no webhook configuration", path)
	}
	return strings.Join(docs, "---\n"), nil
}

// cleanupCAPI deletes the Cluster API objects of ns while the manager still runs, so
// that their finalizers are handled (it is registered after the manager's cleanup, so
// it runs before it).
func cleanupCAPI(t *testing.T, ns string) {
	t.Cleanup(func() {
		for _, kind := range []string{"clusterresourcesets.addons.cluster.x-k8s.io", "clusters.cluster.x-k8s.io", "loopbackclusters." + loopbackGroup} {
			if _, err := kubectl("delete", kind, "--all", "-n", ns, "--ignore-not-found", "--timeout="+deleteTimeout.String()); err != nil {
				t.Errorf("deleting the %s of %s: %v", kind, ns, err)
			}
		}
	})
}

// dumpCAPIOnFailure prints the Cluster API objects of ns when t failed.
func dumpCAPIOnFailure(t *testing.T, ns, cluster string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, err := kubectl("get", "clusters.cluster.x-k8s.io,loopbackclusters."+loopbackGroup+",clusterresourcesets.addons.cluster.x-k8s.io,"+
			"clusterresourcesetbindings.addons.cluster.x-k8s.io", "-n", ns, "-o", "yaml")
		t.Logf("Cluster API objects in %s (cluster %s):\n%s%v", ns, cluster, tailLines(out, 200), errOrEmpty(err))
	})
}

// getUnstructured reads an object of kind gvk from the suite's cluster.
func getUnstructured(g Gomega, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	ctx, cancel := background()
	defer cancel()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed(), "%s %s/%s", gvk.Kind, ns, name)
	return u
}

// ptrValue returns *p, or 1 (the API's default replicas) when p is nil.
func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
