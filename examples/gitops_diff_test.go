package examples

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// diffScript is the CI step of docs/bootstrap/gitops.md.
var diffScript = filepath.Join(gitopsDir, "ci", "diff.sh")

// runDiff runs the CI step on overlay against the shared API server, with the toolchain's
// kubectl and the kubectl-kaddons built by buildPlugin on the PATH, and returns its exit
// code and output.
func runDiff(t *testing.T, kubeconfig, overlay string) (int, string) {
	t.Helper()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl next to kube-apiserver: run `make test`, which builds it with hack/toolchain.sh: %v", err)
	}
	cmd := exec.Command(diffScript, overlay)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+buildPlugin(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("running %s: %v", diffScript, err)
	return 0, ""
}

var plugin struct {
	once sync.Once
	dir  string
	err  error
}

// buildPlugin builds kubectl-kaddons from this repository, once, and returns its folder.
func buildPlugin(t *testing.T) string {
	t.Helper()
	plugin.once.Do(func() {
		if plugin.dir, plugin.err = os.MkdirTemp("", "kaddons-plugin-"); plugin.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(plugin.dir, "kubectl-kaddons"), "./cmd/kubectl-kaddons")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			plugin.err = fmt.Errorf("building kubectl-kaddons: %w\n%s", err, out)
		}
	})
	if plugin.err != nil {
		t.Fatal(plugin.err)
	}
	return plugin.dir
}

// applyRendered applies what kaddons applies for the add-on live (kubectl kaddons render,
// then server-side apply as field manager kaddons, the add-on owning the objects in its
// namespace), as the operator would have after live was created.
func applyRendered(t *testing.T, c client.Client, live *unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	data, err := yaml.Marshal(live.Object)
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(filepath.Join(buildPlugin(t), "kubectl-kaddons"), "render", "-f", "-")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "kubectl kaddons render")
	for _, obj := range decodeObjects(t, out) {
		obj = asAPIObjects(t, []*unstructured.Unstructured{obj})[0]
		if obj.GetNamespace() == live.GetNamespace() {
			obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: live.GetAPIVersion(), Kind: live.GetKind(),
				Name: live.GetName(), UID: live.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
		}
		g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), client.FieldOwner("kaddons"),
			client.ForceOwnership)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		t.Cleanup(func() { _ = c.Delete(ctx, obj) })
	}
}

func TestGitOpsDiffStep(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, kubeconfig := startAPIServer(t)
	overlay := filepath.Join(gitopsDir, "clusters", "production")

	// The cluster runs what git said before the pull request: production's CoreDNS one
	// version back, and the objects kaddons applied for it.
	objects := build(t, overlay)
	var coreDNS *addonsv1alpha1.CoreDNS
	for _, obj := range objects {
		live := obj.DeepCopy()
		if obj.GetKind() == "CoreDNS" {
			coreDNS = &addonsv1alpha1.CoreDNS{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, coreDNS)).To(Succeed())
			g.Expect(coreDNS.Spec.Version).NotTo(BeEmpty(), "production pins CoreDNS")
			g.Expect(coreDNS.Spec.Version).NotTo(Equal("1.11.3"))
			g.Expect(unstructured.SetNestedField(live.Object, "1.11.3", "spec", "version")).To(Succeed())
		}
		g.Expect(c.Create(ctx, live)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		t.Cleanup(func() { _ = c.Delete(ctx, live) })
		if obj.GetKind() == "CoreDNS" {
			applyRendered(t, c, live)
		}
	}
	g.Expect(coreDNS).NotTo(BeNil())
	const image = "registry.k8s.io/coredns/coredns:v"
	deployment := "apps.v1.Deployment." + coreDNS.Namespace + "." + coreDNS.Name

	rc, out := runDiff(t, kubeconfig, overlay)
	g.Expect(rc).To(BeZero(), "%s", out)
	// The add-on resource, as the pull request changes it...
	g.Expect(out).To(ContainSubstring("-  version: 1.11.3"))
	g.Expect(out).To(ContainSubstring("+  version: " + coreDNS.Spec.Version))
	// ...and what kaddons will change for it.
	g.Expect(out).To(ContainSubstring("--- live/" + deployment))
	g.Expect(out).To(ContainSubstring("-        image: " + image + "1.11.3"))
	g.Expect(out).To(ContainSubstring("+        image: " + image + coreDNS.Spec.Version))
	// Dry run only: the cluster still runs the old version.
	live := &addonsv1alpha1.CoreDNS{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(coreDNS), live)).To(Succeed())
	g.Expect(live.Spec.Version).To(Equal("1.11.3"))
	liveDeployment := &unstructured.Unstructured{}
	liveDeployment.SetAPIVersion("apps/v1")
	liveDeployment.SetKind("Deployment")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(coreDNS), liveDeployment)).To(Succeed())
	containers, _, _ := unstructured.NestedSlice(liveDeployment.Object, "spec", "template", "spec", "containers")
	g.Expect(containers).NotTo(BeEmpty())
	g.Expect(containers[0]).To(HaveKeyWithValue("image", image+"1.11.3"))

	// Once merged and applied, and CoreDNS's objects with it, the step shows nothing of
	// either. (The other add-ons' objects, which no operator applied here, still show as
	// to be created.)
	for _, obj := range objects {
		live := obj.DeepCopy()
		g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(live), client.FieldOwner("kustomize-controller"), client.ForceOwnership)).To(Succeed())
		if obj.GetKind() == "CoreDNS" {
			applyRendered(t, c, live)
		}
	}
	rc, out = runDiff(t, kubeconfig, overlay)
	g.Expect(rc).To(BeZero(), "%s", out)
	g.Expect(out).NotTo(ContainSubstring("live/addons.kaddons.dev"), "an add-on resource still differs")
	g.Expect(out).NotTo(ContainSubstring("live/"+deployment), "CoreDNS's Deployment still differs")
	g.Expect(out).To(ContainSubstring("+++ merged/apps.v1.Deployment.kube-system.metrics-server"),
		"the plugin's diff did not run")

	// An add-on the API server refuses fails the step.
	broken := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(broken, "kustomization.yaml"), []byte("resources:\n- coredns.yaml\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(broken, "coredns.yaml"), []byte(`apiVersion: addons.kaddons.dev/v1alpha1
kind: CoreDNS
metadata:
  name: coredns
  namespace: kube-system
spec:
  version: 1.12.1
  clusterIP: 10.96.0.999
`), 0o600)).To(Succeed())
	rc, out = runDiff(t, kubeconfig, broken)
	g.Expect(rc).To(BeNumerically(">", 1), "%s", out)
	g.Expect(out).To(ContainSubstring("clusterIP must be an IPv4 or IPv6 address"))

	// So does an add-on kaddons cannot render: a version no channel has.
	unknown := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(unknown, "kustomization.yaml"), []byte("resources:\n- coredns.yaml\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(unknown, "coredns.yaml"), []byte(`apiVersion: addons.kaddons.dev/v1alpha1
kind: CoreDNS
metadata:
  name: coredns
  namespace: kube-system
spec:
  version: 0.0.404
`), 0o600)).To(Succeed())
	rc, out = runDiff(t, kubeconfig, unknown)
	g.Expect(rc).To(BeNumerically(">", 1), "%s", out)
	g.Expect(out).To(ContainSubstring("0.0.404"))

	// So does an overlay kustomize cannot build.
	rc, out = runDiff(t, kubeconfig, filepath.Join(broken, "missing"))
	g.Expect(rc).NotTo(BeZero(), "%s", out)
}

func TestGitOpsPageShowsTheDiffStep(t *testing.T) {
	g := NewWithT(t)
	script, err := os.ReadFile(diffScript)
	g.Expect(err).NotTo(HaveOccurred())
	page, err := os.ReadFile(filepath.Join("..", "docs", "bootstrap", "gitops.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fencedBlocks(string(page), "bash")).To(ContainElement(string(script)),
		"docs/bootstrap/gitops.md shows another CI step than %s", diffScript)
}
