//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// quickstartMarker is the comment docs/quickstart.md puts before a block a test runs:
// <!-- quickstart:WALK STEP -->. An sh block is a step that runs in bash; a console block
// named output holds commands ("$ ...") and the lines each prints; one named output-kwok
// holds the lines the same command prints differently on the e2e cluster's kwok nodes.
var quickstartMarker = regexp.MustCompile(`^<!-- quickstart:(\S+) (\S+) -->$`)

// docBlock is a marked fenced block of docs/quickstart.md.
type docBlock struct {
	walk, step, lang, body string
	line                   int
}

// docCommand is a command of a console block and the lines it prints.
type docCommand struct {
	command string
	lines   []string
}

// readQuickstart returns the blocks of docs/quickstart.md marked for walk, in order.
func readQuickstart(t *testing.T, walk string) []docBlock {
	t.Helper()
	path := filepath.Join(repoRoot, "docs", "quickstart.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		m := quickstartMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: the marker %q is not followed by a fenced block", path, i+1, lines[i])
		}
		b := docBlock{walk: m[1], step: m[2], lang: strings.TrimPrefix(lines[i+1], "```"), line: i + 2}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 {
			t.Fatalf("%s:%d: the block never ends", path, b.line)
		}
		b.body = strings.Join(lines[i+2:i+2+end], "\n")
		i += 2 + end
		if b.walk == walk {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s marks no block for the %s walk", path, walk)
	}
	return blocks
}

// commands splits a console block into its commands and their output.
func (b docBlock) commands(t *testing.T) []docCommand {
	t.Helper()
	var cmds []docCommand
	for _, line := range strings.Split(b.body, "\n") {
		if command, ok := strings.CutPrefix(line, "$ "); ok {
			cmds = append(cmds, docCommand{command: command})
			continue
		}
		if len(cmds) == 0 {
			t.Fatalf("docs/quickstart.md:%d: a console block must start with a command", b.line)
		}
		cmds[len(cmds)-1].lines = append(cmds[len(cmds)-1].lines, line)
	}
	return cmds
}

// quickstartEnv is where the quickstart's commands run: the plugin's folder first on PATH
// (none when empty), HOME (this process's when empty), and the page's text the test
// replaces before running a block (a release's address and version).
type quickstartEnv struct {
	pluginDir string
	home      string
	replace   map[string]string
}

// quickstartShell runs script in bash as a reader of the quickstart would: from the
// repository's root, in the suite's cluster as admin, with the plugin and the toolchain's
// kubectl first on PATH. It returns stdout.
func quickstartShell(env quickstartEnv, script string) (string, error) {
	for page, replacement := range env.replace {
		script = strings.ReplaceAll(script, page, replacement)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = repoRoot
	dirs := []string{filepath.Dir(kubectlPath), os.Getenv("PATH")}
	if env.pluginDir != "" {
		dirs = append([]string{env.pluginDir}, dirs...)
	}
	path := strings.Join(dirs, string(os.PathListSeparator))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+adminKubeconfig, "PATH="+path)
	if env.home != "" {
		cmd.Env = append(cmd.Env, "HOME="+env.home)
	}
	return output(cmd)
}

// normalize joins a line's fields with single spaces: kubectl pads columns to the widest
// value, which differs between the page and a run.
func normalize(line string) string {
	return strings.Join(strings.Fields(line), " ")
}

// outputLines splits a command's output into lines, without the last newline.
func outputLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// rowKey identifies a row of a table by its first three fields (namespace, name and
// version, or namespace, kind and name).
func rowKey(line string) string {
	fields := strings.Fields(line)
	return strings.Join(fields[:min(3, len(fields))], " ")
}

// kwokLines returns, per command, the lines of the walk's output-kwok blocks.
func kwokLines(t *testing.T, blocks []docBlock) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range blocks {
		if b.step != "output-kwok" {
			continue
		}
		for _, c := range b.commands(t) {
			out[c.command] = append(out[c.command], c.lines...)
		}
	}
	return out
}

// expectLines checks that a command printed the page's lines: as many, each the page's
// line or that line followed by more fields (the page leaves out the AGE column), once
// whitespace is normalized. kwok replaces the page's rows that have the same key.
func expectLines(g Gomega, c docCommand, kwok []string, stdout string) {
	want := slices.Clone(c.lines)
	for _, k := range kwok {
		replaced := false
		for i, line := range want {
			if strings.TrimSpace(line) != "" && rowKey(line) == rowKey(k) {
				want[i], replaced = k, true
			}
		}
		g.Expect(replaced).To(BeTrue(), "the output-kwok line %q replaces no line of `%s`", k, c.command)
	}
	got := outputLines(stdout)
	g.Expect(got).To(HaveLen(len(want)), "`%s` printed:\n%s\nthe page shows:\n%s", c.command, stdout, strings.Join(want, "\n"))
	for i := range want {
		w, a := normalize(want[i]), normalize(got[i])
		g.Expect(a == w || strings.HasPrefix(a, w+" ")).To(BeTrue(),
			"`%s`, line %d: printed %q, the page shows %q", c.command, i+1, got[i], want[i])
	}
}

// walkQuickstart runs the walk's blocks in order: each sh step, then its check, and each
// output block's commands against what the page shows. Every step must have a check and
// every check a step.
func walkQuickstart(t *testing.T, walk string, env quickstartEnv, checks map[string]func(stdout string)) {
	t.Helper()
	g := NewWithT(t)
	blocks := readQuickstart(t, walk)
	for page := range env.replace {
		g.Expect(slices.ContainsFunc(blocks, func(b docBlock) bool { return strings.Contains(b.body, page) })).To(BeTrue(),
			"the %s walk of docs/quickstart.md no longer has %q, which the test replaces", walk, page)
	}
	kwok := kwokLines(t, blocks)
	used := map[string]bool{}
	for _, b := range blocks {
		switch {
		case b.lang == "sh":
			check, ok := checks[b.step]
			g.Expect(ok).To(BeTrue(), "docs/quickstart.md:%d: the test has no check for step %q", b.line, b.step)
			g.Expect(used).NotTo(HaveKey(b.step), "docs/quickstart.md:%d: step %q twice", b.line, b.step)
			used[b.step] = true
			logf("quickstart %s: step %s (docs/quickstart.md:%d)", walk, b.step, b.line)
			stdout, err := quickstartShell(env, b.body)
			g.Expect(err).NotTo(HaveOccurred(), "docs/quickstart.md:%d, step %s", b.line, b.step)
			check(stdout)
		case b.lang == "console" && b.step == "output":
			for _, c := range b.commands(t) {
				stdout, err := quickstartShell(env, c.command)
				g.Expect(err).NotTo(HaveOccurred(), "docs/quickstart.md:%d", b.line)
				expectLines(g, c, kwok[c.command], stdout)
			}
		case b.lang == "console" && b.step == "output-kwok":
			// Read by kwokLines.
		default:
			t.Fatalf("docs/quickstart.md:%d: a %q block named %q means nothing to the test", b.line, b.lang, b.step)
		}
	}
	for step := range checks {
		g.Expect(used).To(HaveKey(step), "docs/quickstart.md has no step %q for the %s walk", step, walk)
	}
}

// TestQuickstart walks docs/quickstart.md's kind/kubeadm path as written, on a cluster
// that holds kubeadm's CoreDNS: the page's commands take it over and add metrics-server,
// what they print is what the page shows, the state is what the page says, and the undo
// step leaves CoreDNS running without kaddons. The page's install step is not marked:
// the suite's manager is the operator.
func TestQuickstart(t *testing.T) {
	g := NewWithT(t)
	const ns = "kube-system"
	kubeadmFile := filepath.Join(repoRoot, "test", "testdata", "kubeadm", "coredns.yaml")
	sample := filepath.Join(repoRoot, "config", "samples", "quickstart", "kubeadm")
	t.Cleanup(func() {
		ensureSomeManager(t)
		_, _ = kubectl("delete", "-k", sample, "--ignore-not-found", "--timeout="+deleteTimeout.String())
		_, _ = kubectl("delete", "-f", kubeadmFile, "--ignore-not-found", "--timeout="+deleteTimeout.String())
		// kaddons' own object of the CoreDNS, left running by deletionPolicy Orphan.
		_, _ = kubectl("delete", "poddisruptionbudget", "coredns", "-n", ns, "--ignore-not-found")
	})
	dumpOnFailure(t)
	// A release as the page installs one, served on loopback at the address the page
	// downloads from, and a HOME of its own for the plugin the page puts in ~/.local/bin.
	release := makeRelease(g, quickstartRelease, runtime.GOOS+"/"+runtime.GOARCH)
	server := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(release.dir))))
	t.Cleanup(server.Close)
	t.Cleanup(func() { removeReleaseManager(t, release) })
	home := t.TempDir()
	env := quickstartEnv{
		pluginDir: filepath.Join(home, ".local", "bin"),
		home:      home,
		replace: map[string]string{
			"VERSION=v0.1.0": "VERSION=" + release.version,
			"https://github.com/kaddons/kaddons/releases/download/$VERSION": server.URL + "/$VERSION",
		},
	}

	// The cluster kubeadm leaves: its CoreDNS objects, written by the field manager
	// kubeadm, and the Deployment's status written by kube-controller-manager.
	_, err := kubectl("create", "-f", kubeadmFile, "--field-manager=kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		expectRolledOut(g, getDeployment(g, ns), 2)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())

	walkQuickstart(t, "kubeadm", env, map[string]func(string){
		"release": func(string) {
			// The release's operator runs the release's image, by digest.
			deploy := &appsv1.Deployment{}
			ctx, cancel := background()
			defer cancel()
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: operatorNamespace, Name: "kaddons-controller-manager"}, deploy)).To(Succeed())
			g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(Equal(release.image))
			g.Expect(deploy.Status.AvailableReplicas).To(BeNumerically(">=", 1))
			g.Expect(filepath.Join(home, ".local", "bin", "kubectl-kaddons")).To(BeAnExistingFile())
		},
		"installed": func(stdout string) {
			g.Expect(stdout).To(ContainSubstring("Client Version: " + release.version + " (revision "))
			g.Expect(stdout).To(ContainSubstring("Operator Version: " + release.version + " (image " + release.image))
		},
		"apply": func(string) { expectQuickstartApplied(t, ns) },
		"look": func(stdout string) {
			// describe: the adopted objects with their field managers, and the event.
			g.Expect(stdout).To(ContainSubstring("Field Managers:"))
			g.Expect(stdout).To(MatchRegexp(`(?m)^\s+Normal\s+Adopted\s+.*Took over objects kaddons did not create: ` +
				`ServiceAccount kube-system/coredns \(from no field managers\); ClusterRole system:coredns \(from kubeadm\)`))
			g.Expect(stdout).To(MatchRegexp(`(?m)^kube-system\s+CoreDNS\s+coredns\s+1\.14\.6\s+True\s`))
		},
		"undo": func(string) { expectQuickstartUndone(t, ns) },
	})
}

// quickstartRelease is the version of the release TestQuickstart makes and installs.
const quickstartRelease = "v0.1.0-quickstart"

// removeReleaseManager deletes what the release's install.yaml added to the suite's
// cluster beside what the suite installs itself (installKinds): the manager's Deployment,
// Service and ConfigMap, which on kwok's nodes only look as if they ran.
func removeReleaseManager(t *testing.T, r testRelease) {
	data, err := os.ReadFile(filepath.Join(r.dir, "install.yaml"))
	if err != nil {
		t.Errorf("reading the release's installer: %v", err)
		return
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Errorf("decoding the release's installer: %v", err)
			return
		}
		if u.Object == nil || installKinds[u.GetKind()] {
			continue
		}
		ctx, cancel := background()
		if err := k8sClient.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the release's %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		cancel()
	}
}

// expectQuickstartApplied checks what step 2 of the quickstart says happened: kubeadm's
// six objects adopted in place (field managers recorded) plus kaddons' own
// PodDisruptionBudget, Ready; metrics-server's nine objects, its APIService last.
func expectQuickstartApplied(t *testing.T, ns string) {
	g := NewWithT(t)
	cr := getCoreDNS(g, ns)
	ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(ready.ObservedGeneration).To(Equal(cr.Generation))
	managers := map[string][]string{}
	for _, a := range cr.Status.Adopted {
		managers[a.Kind+"/"+a.Name] = a.FieldManagers
		g.Expect(a.AdoptedAt).NotTo(BeNil(), "%s/%s", a.Kind, a.Name)
	}
	g.Expect(managers).To(HaveLen(6))
	g.Expect(managers).To(HaveKeyWithValue("ServiceAccount/coredns", BeEmpty()))
	g.Expect(managers).To(HaveKeyWithValue("Deployment/coredns", ConsistOf("kubeadm", "kube-controller-manager")))
	for _, name := range []string{"ClusterRole/system:coredns", "ClusterRoleBinding/system:coredns", "ConfigMap/coredns", "Service/kube-dns"} {
		g.Expect(managers).To(HaveKeyWithValue(name, ConsistOf("kubeadm")))
	}
	g.Expect(cr.Status.Inventory.Len()).To(Equal(7))
	pdb := getObject(g, "PodDisruptionBudget", "policy/v1", ns, "coredns")
	g.Expect(pdb.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, coreDNSName))

	// The step waits for metrics-server's Deployment; the APIService is applied after it,
	// and on kwok's nodes the API server then finds no endpoint to reach it at.
	g.Eventually(func(g Gomega) {
		ms := &addonsv1alpha1.MetricsServer{}
		ctx, cancel := background()
		defer cancel()
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "metrics-server"}, ms)).To(Succeed())
		g.Expect(ms.Status.AppliedVersion).To(Equal("0.7.2"))
		g.Expect(ms.Status.Inventory.Len()).To(Equal(9))
		g.Expect(ms.Status.Adopted).To(BeEmpty())
		ready := meta.FindStatusCondition(ms.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(Equal(ms.Generation))
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
		g.Expect(ready.Message).To(HavePrefix("APIService v1beta1.metrics.k8s.io: Available=False (EndpointsNotFound: "))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	apiService := getObject(g, "APIService", "apiregistration.k8s.io/v1", "", "v1beta1.metrics.k8s.io")
	g.Expect(apiService.GetLabels()).To(HaveKeyWithValue(ssa.LabelName, "metrics-server"))
	deploy := &appsv1.Deployment{}
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "metrics-server"}, deploy)).To(Succeed())
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--kubelet-insecure-tls"))
}

// expectQuickstartUndone checks what step 4 says: both add-ons gone, metrics-server with
// them, CoreDNS still running and unlabelled.
func expectQuickstartUndone(t *testing.T, ns string) {
	g := NewWithT(t)
	for _, obj := range []client.Object{
		&addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: coreDNSName}},
		&addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}},
	} {
		ctx, cancel := background()
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		cancel()
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s: %v", obj, obj.GetName(), err)
	}
	deploy := getDeployment(g, ns)
	g.Expect(deploy.Labels).NotTo(HaveKey(ssa.LabelName))
	expectRolledOut(g, deploy, 2)
	g.Expect(getConfigMap(g, ns).Labels).NotTo(HaveKey(ssa.LabelName))
}

// TestQuickstartK3s checks what docs/quickstart.md says of k3d: kaddons refuses to adopt
// a CoreDNS shaped like k3s's, whose Corefile uses the import plugin, and changes
// nothing of it.
func TestQuickstartK3s(t *testing.T) {
	g := NewWithT(t)
	const ns = "kube-system"
	k3sFile := filepath.Join(repoRoot, "test", "e2e", "testdata", "k3s", "coredns.yaml")
	sample := filepath.Join(repoRoot, "config", "samples", "quickstart", "kubeadm", "coredns.yaml")
	t.Cleanup(func() {
		ensureSomeManager(t)
		_, _ = kubectl("delete", "-f", sample, "--ignore-not-found", "--timeout="+deleteTimeout.String())
		_, _ = kubectl("delete", "-f", k3sFile, "--ignore-not-found", "--timeout="+deleteTimeout.String())
	})
	dumpOnFailure(t)

	_, err := kubectl("create", "-f", k3sFile, "--field-manager=k3s")
	g.Expect(err).NotTo(HaveOccurred())
	cmBefore := getConfigMap(g, ns)
	deployBefore := getDeployment(g, ns)

	_, err = kubectl("apply", "-f", sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		cr := getCoreDNS(g, ns)
		stalled := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)
		g.Expect(stalled).NotTo(BeNil(), "not Stalled yet")
		g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonCorefileMigrationFailed))
		g.Expect(stalled.Message).To(And(ContainSubstring(`Plugin "import" is unsupported by this migration tool`),
			ContainSubstring("nothing was changed")))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	walkQuickstart(t, "k3d", quickstartEnv{}, map[string]func(string){})

	cm := getConfigMap(g, ns)
	g.Expect(cm.ResourceVersion).To(Equal(cmBefore.ResourceVersion), "the ConfigMap was written")
	deploy := getDeployment(g, ns)
	g.Expect(deploy.Generation).To(Equal(deployBefore.Generation), "the Deployment's spec was written")
	g.Expect(deploy.Labels).To(Equal(deployBefore.Labels))
	g.Expect(listManaged(g, client.MatchingLabels{labelNamespace: ns, labelName: coreDNSName})).To(BeEmpty(),
		"kaddons created objects for a CoreDNS it refused")
}

// TestQuickstartSamples checks the sample kustomizations against the suite's CRDs, server
// side, changing nothing: config/samples (which `kubectl apply -k` takes, and which holds
// no AddonSource, whose registry would not exist) and both quickstart kustomizations.
func TestQuickstartSamples(t *testing.T) {
	g := NewWithT(t)
	for dir, kinds := range map[string][]string{
		"config/samples":                    {"coredns", "dashboard", "kubeproxy", "kuberouter", "metricsserver", "nodelocaldns", "package"},
		"config/samples/quickstart/kubeadm": {"coredns", "metricsserver"},
		"config/samples/quickstart/k3d":     {"coredns", "metricsserver"},
	} {
		out, err := kubectl("apply", "-k", filepath.Join(repoRoot, dir), "--dry-run=server")
		g.Expect(err).NotTo(HaveOccurred(), dir)
		var applied []string
		scanner := bufio.NewScanner(strings.NewReader(out))
		for scanner.Scan() {
			kind, _, _ := strings.Cut(scanner.Text(), ".")
			applied = append(applied, kind)
		}
		g.Expect(applied).To(ConsistOf(kinds), "%s:\n%s", dir, out)
	}
}

// getObject reads any object straight from the API server.
func getObject(g Gomega, kind, apiVersion, ns, name string) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}}
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)).To(Succeed(), fmt.Sprintf("%s %s", kind, name))
	return obj
}

// getConfigMap reads the CoreDNS ConfigMap in ns straight from the API server.
func getConfigMap(g Gomega, ns string) *corev1.ConfigMap {
	ctx, cancel := background()
	defer cancel()
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, cm)).To(Succeed())
	return cm
}
