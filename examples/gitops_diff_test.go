package examples

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// diffScript is the CI step of docs/bootstrap/gitops.md.
var diffScript = filepath.Join(gitopsDir, "ci", "diff.sh")

// runDiff runs the CI step on overlay against the shared API server, with the toolchain's
// kubectl, and returns its exit code and output.
func runDiff(t *testing.T, kubeconfig, overlay string) (int, string) {
	t.Helper()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl next to kube-apiserver: run `make test`, which builds it with hack/toolchain.sh: %v", err)
	}
	cmd := exec.Command(diffScript, overlay)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
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

func TestGitOpsDiffStep(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, kubeconfig := startAPIServer(t)
	overlay := filepath.Join(gitopsDir, "clusters", "production")

	// The cluster runs what git said before the pull request: production's CoreDNS one
	// version back.
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
	}
	g.Expect(coreDNS).NotTo(BeNil())

	rc, out := runDiff(t, kubeconfig, overlay)
	g.Expect(rc).To(BeZero(), "%s", out)
	g.Expect(out).To(ContainSubstring("-  version: 1.11.3"))
	g.Expect(out).To(ContainSubstring("+  version: " + coreDNS.Spec.Version))
	// Dry run only: the cluster still runs the old version.
	live := &addonsv1alpha1.CoreDNS{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(coreDNS), live)).To(Succeed())
	g.Expect(live.Spec.Version).To(Equal("1.11.3"))

	// Once merged and applied, the step has nothing to show.
	for _, obj := range objects {
		live := obj.DeepCopy()
		g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(live), client.FieldOwner("kustomize-controller"), client.ForceOwnership)).To(Succeed())
	}
	rc, out = runDiff(t, kubeconfig, overlay)
	g.Expect(rc).To(BeZero(), "%s", out)
	g.Expect(out).To(BeEmpty())

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
