//go:build e2e && faults

// The fault suite (make test-faults): the e2e harness, with faults injected into the
// control plane, the network between the manager and the API server, and the manager
// itself. Each case checks that everything converges, that nothing outside the add-ons'
// own objects is deleted (decoys keep their UIDs), and that once converged the children's
// resourceVersions stay put for a fixed quiet window (Cluster API's
// ValidateResourceVersionStable idea): a fault must not leave a hot write loop behind.
//
// The cases are named TestFault*; the build tag keeps them out of make test-e2e.

package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// quietWindow is how long the children of converged add-ons must keep their
// resourceVersions. It is a fixed wait, not a poll: the check is that nothing writes.
const quietWindow = 10 * time.Second

// labelFaultRun marks the namespaces and add-ons of one fault case, for bulk cleanup.
const labelFaultRun = "e2e.kaddons.dev/fault-run"

// Versions of the test-only package testdata/packages/coredns/1.11.3-extra: 1.11.3 plus a
// ConfigMap that 1.12.1 does not have, so an upgrade to 1.12.1 prunes it.
const (
	extraVersion = "1.11.3-extra"
	extraObject  = "coredns-extra"
)

// faultRun is one fault case's set of add-on namespaces.
type faultRun struct {
	id         string
	namespaces []string
}

// newFaultRun creates n namespaces labelled for the case. Its cleanup deletes every add-on
// in them with one kubectl call (a manager must run; the case's cleanup restores one),
// then the namespaces.
func newFaultRun(t *testing.T, prefix string, n int) *faultRun {
	t.Helper()
	run := &faultRun{id: fmt.Sprintf("%s-%04x", prefix, rand.IntN(1<<16))}
	ctx, cancel := background()
	defer cancel()
	for i := range n {
		name := fmt.Sprintf("f-%s-%02d", run.id, i)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelFaultRun: run.id}}}
		if err := k8sClient.Create(ctx, ns); err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
		run.namespaces = append(run.namespaces, name)
	}
	t.Cleanup(func() {
		ensureSomeManager(t)
		selector := "--selector=" + labelFaultRun + "=" + run.id
		if _, err := kubectl("delete", "coredns.addons.kaddons.dev", "--all-namespaces", selector, "--ignore-not-found",
			"--timeout="+deleteTimeout.String()); err != nil {
			t.Errorf("deleting the add-ons of %s: %v", run.id, err)
			for _, ns := range run.namespaces {
				_, _ = kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
			}
		}
		if _, err := kubectl("delete", "namespace", selector, "--wait=false"); err != nil {
			t.Logf("deleting the namespaces of %s: %v", run.id, err)
		}
	})
	dumpOnFailure(t)
	return run
}

// addonManifest is a CoreDNS add-on in ns with one replica, labelled for the run.
func (run *faultRun) addonManifest(ns, version string) string {
	return fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: CoreDNS
metadata:
  name: coredns
  namespace: %s
  labels:
    %s: %s
spec:
  version: %q
  replicas: 1
  upgrade:
    # The runs move between 1.11.3-extra and 1.12.1 both ways.
    allowDowngrade: true
`, ns, labelFaultRun, run.id, version)
}

// createAddons applies one CoreDNS (one replica) per namespace of namespaces, with one
// kubectl call.
func (run *faultRun) createAddons(t *testing.T, namespaces []string, version string) {
	t.Helper()
	docs := make([]string, 0, len(namespaces))
	for _, ns := range namespaces {
		docs = append(docs, run.addonManifest(ns, version))
	}
	if _, err := kubectlIn(strings.Join(docs, "---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("creating add-ons: %v", err)
	}
}

// addons lists the run's add-ons.
func (run *faultRun) addons(g Gomega) []addonsv1alpha1.CoreDNS {
	ctx, cancel := background()
	defer cancel()
	list := &addonsv1alpha1.CoreDNSList{}
	g.Expect(k8sClient.List(ctx, list, client.MatchingLabels{labelFaultRun: run.id})).To(Succeed())
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Namespace < list.Items[j].Namespace })
	return list.Items
}

// expectAllReady waits until every add-on of the run is Ready for its current generation
// and returns them.
func (run *faultRun) expectAllReady(t *testing.T, want int) []addonsv1alpha1.CoreDNS {
	t.Helper()
	var items []addonsv1alpha1.CoreDNS
	NewWithT(t).Eventually(func(g Gomega) {
		items = run.addons(g)
		g.Expect(items).To(HaveLen(want))
		var notReady []string
		for i := range items {
			if !readyNow(&items[i]) {
				notReady = append(notReady, items[i].Namespace+": "+readySummary(&items[i]))
			}
		}
		g.Expect(notReady).To(BeEmpty(), "%d of %d add-ons are not Ready", len(notReady), want)
	}).WithTimeout(readyTimeout).WithPolling(time.Second).Should(Succeed())
	return items
}

// readyNow tells whether cr is Ready for its current generation.
func readyNow(cr *addonsv1alpha1.CoreDNS) bool {
	c := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == cr.Generation &&
		cr.Status.ObservedGeneration == cr.Generation
}

// stalledAddons names the run's add-ons that are Stalled right now.
func (run *faultRun) stalledAddons(g Gomega) []string {
	var stalled []string
	for _, cr := range run.addons(g) {
		if c := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			stalled = append(stalled, fmt.Sprintf("%s: %s: %s", cr.Namespace, c.Reason, c.Message))
		}
	}
	return stalled
}

// rvSnapshot maps objects to their resourceVersions.
type rvSnapshot map[string]string

// snapshotChildren records the resourceVersion of every add-on of the run and of every
// object in their inventories.
func (run *faultRun) snapshotChildren(g Gomega) rvSnapshot {
	snap := rvSnapshot{}
	for _, cr := range run.addons(g) {
		snap["CoreDNS "+cr.Namespace+"/"+cr.Name] = cr.ResourceVersion
		for _, ref := range cr.Status.Inventory.Objects() {
			snap[ref.String()] = resourceVersionOf(g, refFromInventory(ref))
		}
	}
	return snap
}

// resourceVersionOf reads ref's resourceVersion straight from the API server.
func resourceVersionOf(g Gomega, ref objectRef) string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.gvk)
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ref.namespace, Name: ref.name}, u)).To(Succeed(), "reading %s", ref)
	return u.GetResourceVersion()
}

// expectStable takes a snapshot with take, waits quietWindow, takes another and fails on
// any object whose resourceVersion changed.
func expectStable(t *testing.T, take func(g Gomega) rvSnapshot) {
	t.Helper()
	g := NewWithT(t)
	before := take(g)
	g.Expect(before).NotTo(BeEmpty())
	time.Sleep(quietWindow)
	after := take(g)
	var changed []string
	for key, rv := range before {
		if after[key] != rv {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", key, rv, after[key]))
		}
	}
	sort.Strings(changed)
	g.Expect(changed).To(BeEmpty(), "objects written during a %s quiet window after convergence", quietWindow)
	t.Logf("%d objects kept their resourceVersions for %s", len(before), quietWindow)
}

// decoy is an object that is not an add-on's and must survive every fault unchanged.
type decoy struct {
	ref objectRef
	uid types.UID
}

// plantDecoys creates, in ns, objects that look like the add-on's but are not in its
// inventory: a ConfigMap and a Secret carrying the CoreDNS pods' label k8s-app=kube-dns,
// and a ClusterRole named and labelled like the add-on's RBAC. It also records two
// objects Kubernetes itself keeps in every namespace (the default ServiceAccount and
// the kube-root-ca.crt ConfigMap). The ClusterRole is deleted with t.
func plantDecoys(t *testing.T, ns string) []decoy {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := background()
	defer cancel()
	labels := map[string]string{"k8s-app": "kube-dns"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns-decoy", Labels: labels},
		Data: map[string]string{"Corefile": ".:53 {\n    forward . 127.0.0.1\n}\n"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns-decoy", Labels: labels},
		StringData: map[string]string{"key": "value"}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns-decoy-" + ns, Labels: labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"list"}}}}
	for _, obj := range []client.Object{cm, secret, role} {
		g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	}
	t.Cleanup(func() {
		ctx, cancel := background()
		defer cancel()
		if err := k8sClient.Delete(ctx, role); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting decoy ClusterRole %s: %v", role.Name, err)
		}
	})
	decoys := []decoy{
		{ref: objectRef{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace: ns, name: cm.Name}, uid: cm.UID},
		{ref: objectRef{gvk: corev1.SchemeGroupVersion.WithKind("Secret"), namespace: ns, name: secret.Name}, uid: secret.UID},
		{ref: objectRef{gvk: rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), name: role.Name}, uid: role.UID},
	}
	// Kubernetes' own objects of the namespace appear a moment after it does.
	for _, own := range []objectRef{
		{gvk: corev1.SchemeGroupVersion.WithKind("ServiceAccount"), namespace: ns, name: "default"},
		{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace: ns, name: "kube-root-ca.crt"},
	} {
		g.Eventually(func(g Gomega) {
			decoys = append(decoys, decoy{ref: own, uid: uidOf(g, own)})
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	}
	return decoys
}

// uidOf reads ref's UID.
func uidOf(g Gomega, ref objectRef) types.UID {
	u := &metav1.PartialObjectMetadata{}
	u.SetGroupVersionKind(ref.gvk)
	ctx, cancel := background()
	defer cancel()
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ref.namespace, Name: ref.name}, u)).To(Succeed(), "reading %s", ref)
	return u.GetUID()
}

// expectDecoysIntact checks that every decoy still exists, as the same object.
func expectDecoysIntact(g Gomega, decoys []decoy) {
	for _, d := range decoys {
		u := &metav1.PartialObjectMetadata{}
		u.SetGroupVersionKind(d.ref.gvk)
		ctx, cancel := background()
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: d.ref.namespace, Name: d.ref.name}, u)
		cancel()
		g.Expect(err).NotTo(HaveOccurred(), "decoy %s is gone", d.ref)
		g.Expect(u.GetUID()).To(Equal(d.uid), "decoy %s was deleted and re-created", d.ref)
		g.Expect(u.GetDeletionTimestamp()).To(BeNil(), "decoy %s is being deleted", d.ref)
	}
}

// decoysRVs adds the decoys' resourceVersions to a snapshot.
func decoysRVs(g Gomega, decoys []decoy, snap rvSnapshot) rvSnapshot {
	for _, d := range decoys {
		if d.ref.name == "default" || d.ref.name == "kube-root-ca.crt" {
			continue // Kubernetes' own; its controllers may write them
		}
		snap["decoy "+d.ref.String()] = resourceVersionOf(g, d.ref)
	}
	return snap
}

// proxiedManager starts a manager (leader election off unless args say otherwise) whose
// every API request goes through a new faultProxy seeded with seed. The suite's manager
// stops first, so the two never race; it comes back with t's cleanup, after the proxy
// has healed and the case's add-ons are deleted (cleanups run last-in, first-out, so
// call this before creating the case's namespaces).
func proxiedManager(t *testing.T, name string, seed uint64, args ...string) (*managerProcess, *faultProxy) {
	t.Helper()
	proxy, kubeconfig, err := newFaultProxy(name+"-proxy", managerKubeconfig, seed)
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(name, args...)
	m.kubeconfig = kubeconfig
	t.Cleanup(func() {
		m.stop()
		_ = proxy.Close()
		if err := suiteManager.ensureRunning(); err != nil {
			t.Errorf("restarting the suite's manager: %v", err)
		}
	})
	suiteManager.stop()
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	return m, proxy
}

// healOnCleanup removes every fault of proxy when t ends, before the case's add-ons are
// deleted (register it after newFaultRun).
func healOnCleanup(t *testing.T, proxy *faultProxy) {
	t.Cleanup(func() {
		proxy.setErrorRate(0)
		proxy.setSeverWatches(false, 0)
		proxy.setRefuse(nil)
		if err := proxy.setDown(false); err != nil {
			t.Error(err)
		}
	})
}

// childPath returns the proxy's object key of ref ("<group>/<resource>/<namespace>/<name>").
func childPath(g Gomega, ref addonsv1alpha1.ObjectReference) string {
	mapping, err := k8sClient.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.Group, Kind: ref.Kind}, ref.Version)
	g.Expect(err).NotTo(HaveOccurred())
	return strings.Join([]string{ref.Group, mapping.Resource.Resource, ref.Namespace, ref.Name}, "/")
}

// writesPerChild counts the accepted writes to each child of items (status writes and
// Events left out), by the children's proxy keys.
func writesPerChild(g Gomega, items []addonsv1alpha1.CoreDNS, writes []proxyWrite) map[string]int {
	counts := map[string]int{}
	for _, cr := range items {
		for _, ref := range cr.Status.Inventory.Objects() {
			counts[childPath(g, ref)] = 0
		}
	}
	for _, w := range writes {
		if _, ok := counts[w.object]; ok {
			counts[w.object]++
		}
	}
	return counts
}

// isChildWrite tells whether w wrote an add-on child rather than an add-on, its status,
// an Event or a Lease.
func isChildWrite(w proxyWrite) bool {
	return !strings.HasPrefix(w.object, addonsv1alpha1.GroupVersion.Group+"/") &&
		!strings.Contains(w.object, "/events/") && !strings.HasPrefix(w.object, "events.k8s.io/") &&
		!strings.HasPrefix(w.object, "coordination.k8s.io/") && w.verb != "create"
}

// pidOf reads the pid of a local-cluster component from its pid file.
func pidOf(t *testing.T, component string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(workDir, "cluster", "pids", component+".pid"))
	if err != nil {
		t.Fatalf("reading the pid of %s: %v", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("the pid file of %s: %v", component, err)
	}
	return pid
}

// killComponent sends SIGKILL to a local-cluster component, as a crash would, and waits
// until it is gone.
func killComponent(t *testing.T, component string) {
	t.Helper()
	pid := pidOf(t, component)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %s (pid %d): %v", component, pid, err)
	}
	NewWithT(t).Eventually(func() bool { return !processRunning(pid) }).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).
		Should(BeTrue(), "%s (pid %d) is still running", component, pid)
	logf("killed %s (pid %d)", component, pid)
}

// processRunning tells whether pid runs (a zombie does not).
func processRunning(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// clusterUp runs hack/local-cluster.sh up; with dependents false it starts only what is
// stopped (LOCAL_CLUSTER_RESTART_DEPENDENTS=0).
func clusterUp(t *testing.T, dependents bool) {
	t.Helper()
	start := time.Now()
	saved := clusterEnv
	if !dependents {
		clusterEnv = append(append([]string(nil), saved...), "LOCAL_CLUSTER_RESTART_DEPENDENTS=0")
	}
	err := runLocalCluster(os.Stderr, "up")
	clusterEnv = saved
	if err != nil {
		t.Fatalf("bringing the cluster back: %v", err)
	}
	logf("cluster back in %s", time.Since(start).Round(time.Second))
}

// exitCode returns the exit code of the manager's last run, and whether it has exited.
func (p *managerProcess) exitCode() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.running() {
		return 0, false
	}
	return p.cmd.ProcessState.ExitCode(), true
}

// attemptFailure carries a failed assertion of attempt out of f.
type attemptFailure string

// attempt runs f with a Gomega of its own and returns its first failed assertion, for
// goroutines that watch the cluster and must not fail the test themselves.
func attempt(f func(g Gomega)) (err error) {
	g := NewGomega(func(message string, _ ...int) { panic(attemptFailure(message)) })
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(attemptFailure)
			if !ok {
				panic(r)
			}
			err = errors.New(string(msg))
		}
	}()
	f(g)
	return nil
}
