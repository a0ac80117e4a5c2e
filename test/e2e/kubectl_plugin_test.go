//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// buildPlugin builds cmd/kubectl-kaddons into a folder of its own, to put on PATH.
func buildPlugin(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(workDir, "plugins")
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-kaddons"), "./cmd/kubectl-kaddons")
	cmd.Dir = repoRoot
	if _, err := output(cmd); err != nil {
		t.Fatalf("building the plugin: %v", err)
	}
	return dir
}

// TestKubectlPlugin runs every command of the plugin the way users do, as `kubectl
// kaddons ...` through kubectl's plugin lookup, against the suite's cluster and manager.
func TestKubectlPlugin(t *testing.T) {
	g := NewWithT(t)
	pluginDir := buildPlugin(t)
	// plugin runs `kubectl kaddons args...` and returns its exit code, stdout and stderr.
	plugin := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(kubectlPath, append([]string{"kaddons"}, append(args, "--kubeconfig="+adminKubeconfig)...)...)
		cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return exit.ExitCode(), stdout.String(), stderr.String()
		case err != nil:
			t.Fatalf("running kubectl kaddons %s: %v", strings.Join(args, " "), err)
		}
		return 0, stdout.String(), stderr.String()
	}

	ns := newNamespace(t, "cli")
	coreDNS := func(replicas int) string {
		return fmt.Sprintf("apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata:\n  name: %s\n  namespace: %s\n"+
			"spec:\n  replicas: %d\n", coreDNSName, ns, replicas)
	}
	// The manager reads channelsDir; the plugin renders from the same channels.
	renderArgs := []string{"-f", "-", "--channels", channelsDir}

	code, rendered, stderr := plugin(coreDNS(1), append([]string{"render"}, renderArgs...)...)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(rendered).To(And(ContainSubstring("kind: Deployment"), ContainSubstring("namespace: "+ns)))

	code, out, stderr := plugin(coreDNS(1), append([]string{"diff"}, renderArgs...)...)
	g.Expect(code).To(Equal(1), "nothing applied yet: %s", stderr)
	g.Expect(out).To(ContainSubstring("+++ merged/apps.v1.Deployment." + ns + "." + coreDNSName))

	// Once the operator applied the add-on, the same input makes no difference: diff
	// applies exactly what the operator applies, owner references included.
	apply(t, coreDNS(1))
	expectReady(t, ns)
	code, out, stderr = plugin(coreDNS(1), append([]string{"diff"}, renderArgs...)...)
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", out, stderr)
	g.Expect(out).To(BeEmpty())

	code, out, stderr = plugin(coreDNS(2), append([]string{"diff"}, renderArgs...)...)
	g.Expect(code).To(Equal(1), stderr)
	g.Expect(out).To(And(MatchRegexp(`(?m)^-  replicas: 1$`), MatchRegexp(`(?m)^\+  replicas: 2$`)))

	code, out, stderr = plugin("", "get", "-n", ns)
	g.Expect(code).To(Equal(0), stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2), out)
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAMESPACE", "KIND", "NAME", "VERSION", "READY", "REASON", "MESSAGE"}))
	cr := getCoreDNS(g, ns)
	g.Expect(strings.Fields(lines[1])[:5]).To(Equal([]string{ns, "CoreDNS", coreDNSName, cr.Status.AppliedVersion, "True"}))

	code, out, stderr = plugin("", "get", "-A")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+` + coreDNSName + `\s`))

	// check: the add-on's package supports the next minor, and none supports a long-gone one.
	code, out, stderr = plugin("", "check", "--kubernetes-version", "1.38", "-n", ns, "--channels", channelsDir)
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", out, stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+` + coreDNSName + `\s+` + cr.Status.AppliedVersion + `\s+>=1\.21\.0\s+OK\s*$`))
	code, out, stderr = plugin("", "check", "--kubernetes-version", "1.20", "-n", ns, "--channels", channelsDir)
	g.Expect(code).To(Equal(1), "stdout:\n%s\nstderr:\n%s", out, stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+` + coreDNSName + `\s+\S+\s+>=1\.21\.0\s+BLOCKS\s+no version of the add-on supports it yet$`))
	g.Expect(stderr).To(ContainSubstring("1 add-on(s) would block an upgrade to Kubernetes 1.20"))

	// tree: every object the ready CoreDNS applied is there and Current (kstatus).
	ref := "coredns/" + coreDNSName
	g.Eventually(func(g Gomega) {
		code, out, stderr := plugin("", "tree", ref, "-n", ns)
		g.Expect(code).To(Equal(0), stderr)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines[0]).To(MatchRegexp(`^CoreDNS/` + ns + `/` + coreDNSName + `\s+Ready=True\s`))
		g.Expect(lines[1:]).To(HaveLen(getCoreDNS(g, ns).Status.Inventory.Len()), out)
		g.Expect(lines[len(lines)-1]).To(HavePrefix("└── "))
		for _, line := range lines[1:] {
			g.Expect(line).To(MatchRegexp(`^(├|└)── \S+/\S+\s+Current(\s|$)`), out)
		}
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	// reconcile: the operator handles the request, and the add-on stays Ready.
	code, out, stderr = plugin("", "reconcile", "CoreDNS/"+coreDNSName, "-n", ns, "--timeout", readyTimeout.String())
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", out, stderr)
	g.Expect(out).To(HavePrefix("CoreDNS " + ns + "/" + coreDNSName + " reconciled: Ready=True, Reconciled: "))
	cr = getCoreDNS(g, ns)
	g.Expect(cr.Status.LastHandledReconcileAt).NotTo(BeEmpty())
	g.Expect(cr.Status.LastHandledReconcileAt).To(Equal(cr.Annotations[addonsv1alpha1.AnnotationRequestedAt]))

	// suspend: the operator pauses the add-on, and reconcile is refused meanwhile.
	code, out, stderr = plugin("", "suspend", ref, "-n", ns)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(Equal("CoreDNS " + ns + "/" + coreDNSName + " suspended\n"))
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, ns)
		g.Expect(cr.Spec.Suspend).To(BeTrue())
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(Equal(cr.Generation))
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonPaused))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	code, _, stderr = plugin("", "reconcile", ref, "-n", ns)
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("is suspended (spec.suspend): resume it first"))

	// resume: spec.suspend is cleared, and the reconcile it asks for ends Ready.
	code, out, stderr = plugin("", "resume", ref, "-n", ns, "--timeout", readyTimeout.String())
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", out, stderr)
	g.Expect(out).To(HavePrefix("CoreDNS " + ns + "/" + coreDNSName + " reconciled: Ready=True, Reconciled: "))
	cr = getCoreDNS(g, ns)
	g.Expect(cr.Spec.Suspend).To(BeFalse())
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionReady)).To(BeTrue())

	// The suite's manager runs on this machine, not as a Deployment in the cluster.
	code, out, stderr = plugin("", "version")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^Client Version: \S+`))
	g.Expect(out).To(ContainSubstring("Operator Version: not found (no kaddons manager Deployment in namespace " + operatorNamespace + ")"))
}
