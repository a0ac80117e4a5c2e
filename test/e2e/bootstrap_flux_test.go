//go:build e2e && bootstrap

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// The Flux kinds the test drives.
var (
	fluxGitRepository = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}
	fluxKustomization = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}
)

// TestBootstrapFlux proves the Flux recipe (docs/bootstrap/flux.md) with Flux's own
// source-controller and kustomize-controller on the suite's cluster. A git repository on a
// loopback git server holds what a user's repository holds: the installer under install/
// and the add-on resources of a cluster under clusters/e2e/. examples/flux/sync.yaml,
// pointed at that repository, makes Flux apply both with `wait: true`, the add-ons after
// the install; the suite's manager plays the installer's Deployment.
//
//   - The add-ons' Kustomization is Ready only once the CoreDNS add-on is Ready.
//   - A commit that asks for an unknown CoreDNS version makes it fail its health check with
//     the add-on reported as Failed (kstatus reads the add-on's Stalled condition), not
//     Ready, and the running CoreDNS stays.
//   - A commit that fixes the version and changes the replicas rolls out.
//   - A commit that removes the add-on makes Flux prune it, and kaddons deletes its children.
func TestBootstrapFlux(t *testing.T) {
	g := NewWithT(t)
	flux := toolDir(t, "flux")
	installer := bootstrapInstaller(t)
	applyCRDs(t, filepath.Join(flux, "crds"))
	ns := newNamespace(t, "flux")
	startFlux(t, flux)

	// The user's repository.
	server, err := gittestserver.NewTempGitServer()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(server.Root()) })
	server.AutoCreate()
	g.Expect(server.StartHTTP()).To(Succeed())
	t.Cleanup(server.StopHTTP)
	repo := newGitRepo(t, server.HTTPAddress()+"/kaddons/platform.git")
	data, err := os.ReadFile(installer)
	g.Expect(err).NotTo(HaveOccurred())
	repo.write("install/install.yaml", string(data))
	repo.write("install/kustomization.yaml", "resources:\n- install.yaml\n")
	repo.write("clusters/e2e/kustomization.yaml", "resources:\n- coredns.yaml\n")
	repo.write("clusters/e2e/coredns.yaml", coreDNSManifest(ns, oldVersion, 1))
	first := repo.commit("kaddons and CoreDNS " + oldVersion)

	// Flux's objects from the example, pointed at that repository and this namespace.
	sync := fluxSync(t, ns, server.HTTPAddress()+"/kaddons/platform.git", "./clusters/e2e")
	t.Cleanup(func() { deleteFluxObjects(t, ns) })
	dumpFluxOnFailure(t, ns)
	recorder := recordReady(t, ns)
	start := time.Now()
	_, err = kubectlIn(sync, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())

	// Ready once the add-on is: when the Kustomization turns Ready, CoreDNS is Ready for
	// its generation, and it became Ready no later than the Kustomization did.
	ready := waitKustomization(t, ns, "addons", first, metav1.ConditionTrue)
	cr := getCoreDNS(g, ns)
	coreReady := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	g.Expect(coreReady).NotTo(BeNil())
	g.Expect(coreReady.Status).To(Equal(metav1.ConditionTrue), "the Kustomization is Ready while CoreDNS is %s: %s",
		coreReady.Reason, coreReady.Message)
	g.Expect(coreReady.ObservedGeneration).To(Equal(cr.Generation))
	g.Expect(ready.LastTransitionTime.Time).NotTo(BeTemporally("<", coreReady.LastTransitionTime.Time),
		"the Kustomization turned Ready before CoreDNS did")
	g.Eventually(func(g Gomega) {
		expectNotReadyThenReady(g, recorder, cr.Generation, addonsv1alpha1.ReasonChildrenNotReady)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	expectRolledOut(g, getDeployment(g, ns), 1)
	waitKustomization(t, ns, "kaddons", first, metav1.ConditionTrue)
	logf("Flux applied the install and CoreDNS %s, Ready, in %s", oldVersion, time.Since(start).Round(time.Second))

	// An unknown version: kaddons stalls the add-on, kstatus reads Failed, the health check
	// fails early, and what runs stays.
	repo.write("clusters/e2e/coredns.yaml", coreDNSManifest(ns, "0.0.404", 1))
	broken := repo.commit("CoreDNS 0.0.404, which no channel has")
	requestReconcile(t, fluxGitRepository, ns, "platform")
	failed := waitKustomization(t, ns, "addons", broken, metav1.ConditionFalse)
	g.Expect(failed.Reason).To(Equal("HealthCheckFailed"), "%s", failed.Message)
	g.Expect(failed.Message).To(ContainSubstring(fmt.Sprintf("CoreDNS/%s/%s status: 'Failed'", ns, coreDNSName)))
	cr = getCoreDNS(g, ns)
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)).To(BeTrue())
	deploy := getDeployment(g, ns)
	g.Expect(containerImage(deploy)).To(Equal(coreDNSImage+oldVersion), "the running CoreDNS was replaced")
	expectRolledOut(g, deploy, 1)

	// A fix that also changes a field rolls out.
	repo.write("clusters/e2e/coredns.yaml", coreDNSManifest(ns, newVersion, 2))
	fixed := repo.commit("CoreDNS " + newVersion + " with two replicas")
	requestReconcile(t, fluxGitRepository, ns, "platform")
	waitKustomization(t, ns, "addons", fixed, metav1.ConditionTrue)
	cr = expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	deploy = getDeployment(g, ns)
	g.Expect(containerImage(deploy)).To(Equal(coreDNSImage + newVersion))
	expectRolledOut(g, deploy, 2)

	// Removed from git: Flux prunes the add-on, and kaddons deletes what it applied.
	inventory := cr.Status.Inventory.Objects()
	g.Expect(inventory).NotTo(BeEmpty())
	repo.remove("clusters/e2e/coredns.yaml")
	repo.write("clusters/e2e/kustomization.yaml", "resources: []\n")
	pruned := repo.commit("no CoreDNS")
	requestReconcile(t, fluxGitRepository, ns, "platform")
	waitKustomization(t, ns, "addons", pruned, metav1.ConditionTrue)
	g.Eventually(func(g Gomega) {
		ctx, cancel := background()
		defer cancel()
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: coreDNSName}, &addonsv1alpha1.CoreDNS{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CoreDNS still exists (%v)", err)
	}).WithTimeout(deleteTimeout).WithPolling(poll).Should(Succeed())
	expectGone(t, inventory)
}

// startFlux runs source-controller (its artifacts in the work folder, served on loopback)
// and kustomize-controller from the flux build on the suite's cluster, as admin.
func startFlux(t *testing.T, flux string) {
	t.Helper()
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	storage := "127.0.0.1:" + strconv.Itoa(ports[0])
	artifacts := filepath.Join(workDir, "flux-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	startTool(t, "source-controller", filepath.Join(flux, "source-controller"), adminKubeconfig, ports[1],
		"--enable-leader-election=false",
		"--health-addr=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-addr=127.0.0.1:"+strconv.Itoa(ports[2]),
		"--storage-path="+artifacts,
		"--storage-addr="+storage,
		"--storage-adv-addr="+storage,
	)
	startTool(t, "kustomize-controller", filepath.Join(flux, "kustomize-controller"), adminKubeconfig, ports[3],
		"--enable-leader-election=false",
		"--health-addr=127.0.0.1:"+strconv.Itoa(ports[3]),
		"--metrics-addr=127.0.0.1:"+strconv.Itoa(ports[4]),
	)
}

// fluxSync returns examples/flux/sync.yaml with its objects in ns, the GitRepository at
// url, and the add-ons' Kustomization at path.
func fluxSync(t *testing.T, ns, url, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "examples", "flux", "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("examples/flux/sync.yaml: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		var setErr error
		switch {
		case u.GroupVersionKind() == fluxGitRepository:
			setErr = unstructured.SetNestedField(u.Object, url, "spec", "url")
		case u.GroupVersionKind() == fluxKustomization && u.GetName() == "addons":
			setErr = unstructured.SetNestedField(u.Object, path, "spec", "path")
		case u.GroupVersionKind() == fluxKustomization && u.GetName() == "kaddons":
		default:
			t.Fatalf("examples/flux/sync.yaml holds %s %s, which the test does not know", u.GetKind(), u.GetName())
		}
		if setErr != nil {
			t.Fatal(setErr)
		}
		kinds[u.GetKind()+"/"+u.GetName()] = true
		out, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(out))
	}
	for _, want := range []string{"GitRepository/platform", "Kustomization/kaddons", "Kustomization/addons"} {
		if !kinds[want] {
			t.Fatalf("examples/flux/sync.yaml has no %s", want)
		}
	}
	return strings.Join(docs, "---\n")
}

// waitKustomization waits until the Kustomization ns/name has attempted revision
// main@sha1:<commit> and its Ready condition has status want, and returns that condition.
func waitKustomization(t *testing.T, ns, name, commit string, want metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	revision := "main@sha1:" + commit
	var ready metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		u := getUnstructured(g, fluxKustomization, ns, name)
		attempted, _, _ := unstructured.NestedString(u.Object, "status", "lastAttemptedRevision")
		g.Expect(attempted).To(Equal(revision), "lastAttemptedRevision")
		c := meta.FindStatusCondition(conditionsOf(u), "Ready")
		g.Expect(c).NotTo(BeNil(), "no Ready condition")
		g.Expect(c.ObservedGeneration).To(Equal(u.GetGeneration()))
		g.Expect(c.Status).To(Equal(want), "Ready: %s: %s", c.Reason, c.Message)
		if want == metav1.ConditionTrue {
			applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
			g.Expect(applied).To(Equal(revision), "lastAppliedRevision")
		}
		ready = *c
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "Kustomization %s/%s at %s", ns, name, revision)
	return ready
}

// conditionsOf returns the status.conditions of u.
func conditionsOf(u *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		data, err := yaml.Marshal(m)
		if err != nil {
			continue
		}
		var c metav1.Condition
		if yaml.Unmarshal(data, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// requestReconcile asks Flux to reconcile an object now, as `flux reconcile` does.
func requestReconcile(t *testing.T, gvk schema.GroupVersionKind, ns, name string) {
	t.Helper()
	resource := strings.ToLower(gvk.Kind) + "." + gvk.Group
	if _, err := kubectl("annotate", "--overwrite", resource, name, "-n", ns,
		"reconcile.fluxcd.io/requestedAt="+time.Now().Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
}

// deleteFluxObjects deletes the Flux objects of ns while the controllers run: the add-ons'
// Kustomization with its pruning (nothing is left to prune by then), the install's without
// (the suite still needs the CRDs), then the GitRepository.
func deleteFluxObjects(t *testing.T, ns string) {
	if _, err := kubectl("patch", "kustomization.kustomize.toolkit.fluxcd.io", "kaddons", "-n", ns, "--type=merge",
		"-p", `{"spec":{"prune":false}}`); err != nil && !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("keeping the install: %v", err)
	}
	for _, resource := range []string{"kustomizations.kustomize.toolkit.fluxcd.io", "gitrepositories.source.toolkit.fluxcd.io"} {
		if _, err := kubectl("delete", resource, "--all", "-n", ns, "--ignore-not-found", "--timeout="+deleteTimeout.String()); err != nil {
			t.Errorf("deleting the %s of %s: %v", resource, ns, err)
		}
	}
}

// dumpFluxOnFailure prints the Flux objects of ns when t failed.
func dumpFluxOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, err := kubectl("get", "gitrepositories.source.toolkit.fluxcd.io,kustomizations.kustomize.toolkit.fluxcd.io",
			"-n", ns, "-o", "yaml")
		t.Logf("Flux objects in %s:\n%s%v", ns, tailLines(out, 200), errOrEmpty(err))
	})
}

// gitRepo is a work tree that pushes to a remote on every commit.
type gitRepo struct {
	t           *testing.T
	dir, remote string
}

// newGitRepo starts an empty work tree whose branch main pushes to remote.
func newGitRepo(t *testing.T, remote string) *gitRepo {
	r := &gitRepo{t: t, dir: t.TempDir(), remote: remote}
	r.git("init", "--quiet", "--initial-branch=main")
	return r
}

func (r *gitRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=kaddons e2e", "GIT_AUTHOR_EMAIL=e2e@kaddons.dev",
		"GIT_COMMITTER_NAME=kaddons e2e", "GIT_COMMITTER_EMAIL=e2e@kaddons.dev", "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.dir)
	out, err := output(cmd)
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// write writes a file of the work tree.
func (r *gitRepo) write(path, content string) {
	r.t.Helper()
	full := filepath.Join(r.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// remove deletes a file of the work tree.
func (r *gitRepo) remove(path string) {
	r.t.Helper()
	r.git("rm", "--quiet", path)
}

// commit commits everything, pushes main and returns the commit's hash.
func (r *gitRepo) commit(message string) string {
	r.t.Helper()
	r.git("add", "--all")
	r.git("commit", "--quiet", "-m", message)
	r.git("push", "--quiet", r.remote, "main")
	return r.git("rev-parse", "HEAD")
}
