//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
)

// Generous bounds: the machine may be busy, and nothing here measures speed.
const (
	readyTimeout  = 5 * time.Minute
	deleteTimeout = 3 * time.Minute
	// crdDeleteTimeout bounds the deletion of CRDs, which kube-apiserver's CRD finalizer
	// can stall for minutes (see TestInstaller).
	crdDeleteTimeout = 15 * time.Minute
	poll             = 500 * time.Millisecond
)

// The labels kaddons puts on every child (controllers/engine/labels.go).
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelNamespace = "addons.kaddons.dev/namespace"
	labelName      = "addons.kaddons.dev/name"
)

// newNamespace creates a namespace of its own for t. Its cleanup deletes the add-ons in it
// first, with a manager running, so their finalizers release cluster-scoped children.
// It also arranges for the diagnostics to be printed if t fails (before any cleanup).
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("e2e-%s-%04x", prefix, rand.IntN(1<<16))
	ctx, cancel := background()
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		deleteAddons(t, name)
		if _, err := kubectl("delete", "namespace", name, "--wait=false"); err != nil {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	dumpOnFailure(t)
	return name
}

// deleteAddons deletes every add-on in namespace ns and waits until they are gone. When
// one hangs, it removes the finalizers so the namespace can go, and fails t.
func deleteAddons(t *testing.T, ns string) {
	t.Helper()
	ensureSomeManager(t)
	// All kinds in one command, as `kubectl delete addons --all` does: an add-on that
	// others depend on waits for them (DependentsExist), so kind by kind could wait for a
	// kind not deleted yet.
	kinds := addonKinds(t)
	resources := make([]string, 0, len(kinds))
	for _, kind := range kinds {
		resources = append(resources, strings.ToLower(kind.Kind)+"."+kind.Group)
	}
	all := strings.Join(resources, ",")
	if _, err := kubectl("delete", all, "--all", "-n", ns, "--ignore-not-found", "--timeout="+deleteTimeout.String()); err != nil {
		t.Errorf("add-ons in %s were not deleted: %v", ns, err)
		out, _ := kubectl("get", all, "-n", ns, "-o", "name")
		for _, name := range strings.Fields(out) {
			_, _ = kubectl("patch", name, "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		}
	}
}

// ensureSomeManager restarts the suite's manager unless some manager runs (a test may
// have replaced it with managers of its own), so that finalizers get handled.
func ensureSomeManager(t *testing.T) {
	t.Helper()
	for _, p := range allManagers() {
		if p.alive() {
			return
		}
	}
	if err := suiteManager.start(); err != nil {
		t.Errorf("restarting the manager: %v", err)
	}
}

// dumpOnFailure prints the diagnostics when t has failed, before t's earlier cleanups
// delete what they would show.
func dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			dumpDiagnostics(os.Stderr, t.Name())
		}
	})
}

// dumpDiagnostics prints what explains a failure: the managers' logs, every add-on's
// conditions and inventory, the kaddons workloads, recent add-on events and the cluster
// components' logs.
func dumpDiagnostics(w io.Writer, title string) {
	var b strings.Builder
	printf := func(format string, args ...any) { _, _ = fmt.Fprintf(&b, format, args...) }
	printf("\n========== diagnostics for %s ==========\n", title)
	for _, p := range allManagers() {
		printf("\n----- manager %s (running: %v): last 80 lines of %s -----\n%s\n", p.name, p.alive(), p.logPath, p.logTail(80))
	}
	if k8sClient != nil {
		printf("\n----- add-ons -----\n%s", describeAddons())
		out, err := kubectl("get", "deploy,rs,pods,svc,cm,sa,pdb,clusterrole,clusterrolebinding", "-A", "-o", "wide",
			"-l", labelManagedBy+"=kaddons")
		printf("\n----- objects labelled %s=kaddons -----\n%s%v\n", labelManagedBy, out, errOrEmpty(err))
		out, err = kubectl("get", "events", "-A", "--field-selector=involvedObject.apiVersion="+addonsv1alpha1.GroupVersion.String(),
			"--sort-by=.lastTimestamp")
		printf("\n----- add-on events -----\n%s%v\n", tailLines(out, 40), errOrEmpty(err))
	}
	var logs bytes.Buffer
	if err := runLocalCluster(&logs, "logs"); err != nil {
		printf("(hack/local-cluster.sh logs: %v)\n", err)
	}
	printf("\n----- hack/local-cluster.sh logs -----\n%s", logs.String())
	printf("========== end of diagnostics for %s ==========\n\n", title)
	_, _ = io.WriteString(w, b.String())
}

// describeAddons prints every add-on with its conditions and inventory.
func describeAddons() string {
	var b strings.Builder
	printf := func(format string, args ...any) { _, _ = fmt.Fprintf(&b, format, args...) }
	for _, a := range listAddons() {
		printf("%s %s/%s generation %d, appliedVersion %q, deleting %v\n", a.kind, a.namespace, a.name,
			a.generation, a.status.AppliedVersion, a.deleting)
		for _, c := range a.status.Conditions {
			printf("  %s=%s %s (generation %d, since %s): %s\n", c.Type, c.Status, c.Reason,
				c.ObservedGeneration, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message)
		}
		for _, ref := range a.status.Inventory.Objects() {
			printf("  inventory: %s\n", ref)
		}
	}
	return b.String()
}

func errOrEmpty(err error) any {
	if err == nil {
		return ""
	}
	return err
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// addonKinds returns the kinds of every add-on kaddons manages.
func addonKinds(t testing.TB) []schema.GroupVersionKind {
	defs := controllers.Definitions()
	kinds := make([]schema.GroupVersionKind, 0, len(defs))
	for _, def := range defs {
		gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
		if err != nil {
			t.Fatalf("add-on prototype %T: %v", def.Prototype, err)
		}
		kinds = append(kinds, gvk)
	}
	return kinds
}

// childKinds returns every kind that some add-on applies.
func childKinds() []schema.GroupVersionKind {
	seen := map[schema.GroupVersionKind]bool{}
	var kinds []schema.GroupVersionKind
	for _, def := range controllers.Definitions() {
		for _, gvk := range def.Children {
			if !seen[gvk] {
				seen[gvk] = true
				kinds = append(kinds, gvk)
			}
		}
	}
	return kinds
}

// addon is an add-on of any kind, with the status every kind shares.
type addon struct {
	kind, namespace, name string
	generation            int64
	deleting              bool
	status                addonsv1alpha1.AddonStatus
}

// listAddons reads every add-on of every kind (nil on error: it serves diagnostics).
func listAddons() []addon {
	var out []addon
	for _, def := range controllers.Definitions() {
		gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
		if err != nil {
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		ctx, cancel := background()
		err = k8sClient.List(ctx, list)
		cancel()
		if err != nil {
			continue
		}
		for _, u := range list.Items {
			a := addon{kind: gvk.Kind, namespace: u.GetNamespace(), name: u.GetName(), generation: u.GetGeneration(),
				deleting: u.GetDeletionTimestamp() != nil}
			if raw, ok := u.Object["status"]; ok {
				data, _ := json.Marshal(raw)
				_ = json.Unmarshal(data, &a.status)
			}
			out = append(out, a)
		}
	}
	return out
}

// coreDNSManifest is a CoreDNS add-on pinned to version with replicas pods.
func coreDNSManifest(ns, version string, replicas int) string {
	return fmt.Sprintf(`apiVersion: addons.kaddons.dev/v1alpha1
kind: CoreDNS
metadata:
  name: coredns
  namespace: %s
spec:
  version: %q
  replicas: %d
`, ns, version, replicas)
}

// getCoreDNS reads the CoreDNS named coredns in ns straight from the API server.
func getCoreDNS(g Gomega, ns string) *addonsv1alpha1.CoreDNS {
	ctx, cancel := background()
	defer cancel()
	cr := &addonsv1alpha1.CoreDNS{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: coreDNSName}, cr)).To(Succeed())
	return cr
}

// expectReady waits until the CoreDNS in ns is Ready for its current generation and
// returns it.
func expectReady(t *testing.T, ns string) *addonsv1alpha1.CoreDNS {
	t.Helper()
	var cr *addonsv1alpha1.CoreDNS
	NewWithT(t).Eventually(func(g Gomega) {
		cr = getCoreDNS(g, ns)
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "no Ready condition yet")
		g.Expect(ready.ObservedGeneration).To(Equal(cr.Generation), "Ready is about an older generation")
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "CoreDNS %s/%s never became Ready", ns, coreDNSName)
	return cr
}

// getDeployment reads the CoreDNS Deployment in ns straight from the API server.
func getDeployment(g Gomega, ns string) *appsv1.Deployment {
	ctx, cancel := background()
	defer cancel()
	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: coreDNSName}, d)).To(Succeed())
	return d
}

// expectRolledOut checks that the Deployment's rollout is complete: the controller saw the
// latest spec, and exactly replicas pods run the current template, all available (kwok
// made them Ready).
func expectRolledOut(g Gomega, d *appsv1.Deployment, replicas int32) {
	g.Expect(d.Spec.Replicas).To(HaveValue(Equal(replicas)), "spec.replicas")
	g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation), "the deployment controller has not seen the latest spec")
	g.Expect(d.Status.UpdatedReplicas).To(Equal(replicas), "updatedReplicas")
	g.Expect(d.Status.Replicas).To(Equal(replicas), "replicas (old pods still around?)")
	g.Expect(d.Status.AvailableReplicas).To(Equal(replicas), "availableReplicas")
}

// containerImage returns the image of the CoreDNS container.
func containerImage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == coreDNSContainer {
			return c.Image
		}
	}
	return ""
}

// readyObservation is one state of an add-on's Ready condition seen by a watch.
type readyObservation struct {
	generation int64 // the add-on's metadata.generation
	status     metav1.ConditionStatus
	reason     string
	observed   int64 // the condition's observedGeneration
	since      metav1.Time
}

func (o readyObservation) String() string {
	return fmt.Sprintf("gen %d: Ready=%s %s (observedGeneration %d)", o.generation, o.status, o.reason, o.observed)
}

// readyRecorder watches one CoreDNS and records every change of its Ready condition.
type readyRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []readyObservation
}

// recordReady starts recording the Ready condition of the CoreDNS named coreDNSName in
// ns, which need not exist yet. The recording stops with t.
func recordReady(t *testing.T, ns string) *readyRecorder {
	name := coreDNSName
	ctx, cancel := context.WithCancel(context.Background())
	r := &readyRecorder{cancel: cancel, done: make(chan struct{})}
	started := make(chan struct{})
	go r.run(ctx, ns, name, started)
	<-started
	t.Cleanup(r.stop)
	return r
}

func (r *readyRecorder) run(ctx context.Context, ns, name string, started chan struct{}) {
	defer close(r.done)
	once := sync.Once{}
	for ctx.Err() == nil {
		w, err := k8sClient.Watch(ctx, &addonsv1alpha1.CoreDNSList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": name})
		once.Do(func() { close(started) })
		if err != nil {
			time.Sleep(poll)
			continue
		}
		for ev := range w.ResultChan() {
			if cr, ok := ev.Object.(*addonsv1alpha1.CoreDNS); ok {
				r.observe(cr)
			}
		}
		w.Stop()
	}
}

func (r *readyRecorder) observe(cr *addonsv1alpha1.CoreDNS) {
	c := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	if c == nil {
		return
	}
	o := readyObservation{generation: cr.Generation, status: c.Status, reason: c.Reason, observed: c.ObservedGeneration,
		since: c.LastTransitionTime}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.seen); n > 0 {
		last := r.seen[n-1]
		if last.status == o.status && last.reason == o.reason && last.observed == o.observed && last.generation == o.generation {
			return
		}
	}
	r.seen = append(r.seen, o)
}

// observations returns what was recorded so far.
func (r *readyRecorder) observations() []readyObservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]readyObservation(nil), r.seen...)
}

func (r *readyRecorder) stop() {
	r.cancel()
	<-r.done
}

// expectNotReadyThenReady checks that, for generation gen, the recorder saw Ready False
// with reason before it saw Ready True.
func expectNotReadyThenReady(g Gomega, r *readyRecorder, gen int64, reason string) {
	seen := r.observations()
	notReady, ready := -1, -1
	for i, o := range seen {
		if o.observed != gen {
			continue
		}
		if o.status == metav1.ConditionFalse && o.reason == reason && notReady < 0 && ready < 0 {
			notReady = i
		}
		if o.status == metav1.ConditionTrue && ready < 0 {
			ready = i
		}
	}
	g.Expect(ready).To(BeNumerically(">=", 0), "Ready never turned True for generation %d; saw %v", gen, seen)
	g.Expect(notReady).To(BeNumerically(">=", 0),
		"Ready was never False/%s for generation %d before it turned True; saw %v", reason, gen, seen)
}

// objectRef identifies one object in the cluster.
type objectRef struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

func (o objectRef) String() string {
	if o.namespace == "" {
		return o.gvk.Kind + " " + o.name
	}
	return o.gvk.Kind + " " + o.namespace + "/" + o.name
}

func refFromInventory(r addonsv1alpha1.ObjectReference) objectRef {
	return objectRef{gvk: r.GroupVersionKind(), namespace: r.Namespace, name: r.Name}
}

// exists tells whether the object exists.
func exists(ref objectRef) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.gvk)
	ctx, cancel := background()
	defer cancel()
	err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ref.namespace, Name: ref.name}, u)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// listManaged lists every object of the add-ons' child kinds that carries the given
// labels (cluster-wide).
func listManaged(g Gomega, labels client.MatchingLabels) []objectRef {
	var refs []objectRef
	for _, gvk := range childKinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		ctx, cancel := background()
		err := k8sClient.List(ctx, list, labels)
		cancel()
		g.Expect(err).NotTo(HaveOccurred(), "listing %s", gvk.Kind)
		for _, u := range list.Items {
			if u.GetDeletionTimestamp() != nil {
				continue // on its way out
			}
			refs = append(refs, objectRef{gvk: gvk, namespace: u.GetNamespace(), name: u.GetName()})
		}
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// expectInventoryConsistent checks the invariants that must hold whenever every add-on has
// converged: each inventory lists each object once and every listed object exists, each
// add-on has exactly one object per kind and name it applies, and no object labelled
// managed-by=kaddons is missing from every inventory (nothing is orphaned).
func expectInventoryConsistent(g Gomega) {
	inventoried := map[objectRef]bool{}
	for _, a := range listAddons() {
		g.Expect(a.deleting).To(BeFalse(), "%s %s/%s is still being deleted", a.kind, a.namespace, a.name)
		own := map[objectRef]bool{}
		for _, r := range a.status.Inventory.Objects() {
			ref := refFromInventory(r)
			g.Expect(own).NotTo(HaveKey(ref), "%s %s/%s lists %s twice", a.kind, a.namespace, a.name, ref)
			own[ref] = true
			inventoried[ref] = true
			found, err := exists(ref)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue(), "%s %s/%s lists %s, which does not exist", a.kind, a.namespace, a.name, ref)
		}
		// Every object labelled as this add-on's is in its inventory, so there is exactly
		// one Deployment, ConfigMap, Service... per add-on.
		labelled := listManaged(g, client.MatchingLabels{labelNamespace: a.namespace, labelName: a.name})
		var extra []string
		for _, ref := range labelled {
			if !own[ref] {
				extra = append(extra, ref.String())
			}
		}
		g.Expect(extra).To(BeEmpty(), "objects labelled as %s %s/%s but not in its inventory", a.kind, a.namespace, a.name)
		g.Expect(labelled).To(HaveLen(len(own)), "%s %s/%s: labelled objects %v, inventory %v", a.kind, a.namespace,
			a.name, labelled, a.status.Inventory.Objects())
	}
	var orphans []string
	for _, ref := range listManaged(g, client.MatchingLabels{labelManagedBy: "kaddons"}) {
		if !inventoried[ref] {
			orphans = append(orphans, ref.String())
		}
	}
	g.Expect(orphans).To(BeEmpty(), "objects labelled %s=kaddons that no add-on's inventory lists", labelManagedBy)
}
