//go:build e2e && faults

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Storm phases: errors, then severed watches, each for a bounded time.
const (
	stormErrorRate   = 0.3
	stormErrorPhase  = 20 * time.Second
	stormSeverPhase  = 15 * time.Second
	stormSeverWithin = 2 * time.Second
)

// stallWatch polls the run's add-ons and remembers every Stalled condition it sees.
type stallWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   map[string]bool
}

// watchStalls starts polling; stop returns what was seen.
func watchStalls(run *faultRun) *stallWatch {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stallWatch{cancel: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			_ = attempt(func(g Gomega) {
				for _, st := range run.stalledAddons(g) {
					s.mu.Lock()
					s.seen[st] = true
					s.mu.Unlock()
				}
			})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *stallWatch) stop() []string {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.seen))
	for st := range s.seen {
		out = append(out, st)
	}
	return out
}

// TestFaultProxyStorm puts a fault-injecting proxy between the manager and the API server
// while add-ons are created, changed and upgraded: first 30% of the requests (seeded)
// get 429 or 500, then every watch is severed as soon as it opens. One add-on is upgraded
// from a package with an extra ConfigMap to one without; its Deployment's writes fail for
// the whole storm, so its apply stays partial, and the extra ConfigMap must survive until
// the apply is complete. Afterwards everything converges, no add-on was ever Stalled, and
// the usual invariants hold.
func TestFaultProxyStorm(t *testing.T) {
	g := NewWithT(t)
	_, proxy := proxiedManager(t, "manager-storm", 14)
	run := newFaultRun(t, "storm", 8)
	healOnCleanup(t, proxy)
	upgrading, changed, created := run.namespaces[0], run.namespaces[1:3], run.namespaces[6:]
	decoys := plantDecoys(t, upgrading)

	run.createAddons(t, []string{upgrading}, extraVersion)
	run.createAddons(t, run.namespaces[1:6], newVersion)
	run.expectAllReady(t, 6)
	extra := objectRef{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace: upgrading, name: extraObject}
	extraUID := uidOf(g, extra)

	stalls := watchStalls(run)
	deploymentOf := func(ns string) string { return "apps/deployments/" + ns + "/" + coreDNSName }
	proxy.setRefuse(func(r proxyRequest) fault {
		if r.verb == "patch" && r.group == "apps" && r.resource == "deployments" && r.namespace == upgrading {
			return faultInternal
		}
		return faultNone
	})
	proxy.setErrorRate(stormErrorRate)
	stormStart := time.Now()
	t.Logf("storm: %.0f%% of the requests fail for %s", stormErrorRate*100, stormErrorPhase)

	_, err := kubectl("patch", "coredns/"+coreDNSName, "-n", upgrading, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"version":%q}}`, newVersion))
	g.Expect(err).NotTo(HaveOccurred())
	for _, ns := range changed {
		_, err := kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge", "-p", `{"spec":{"replicas":2}}`)
		g.Expect(err).NotTo(HaveOccurred())
	}
	run.createAddons(t, created, newVersion)
	time.Sleep(stormErrorPhase)

	proxy.setErrorRate(0)
	severed := proxy.setSeverWatches(true, stormSeverWithin)
	t.Logf("storm: every watch severed within %s for %s (%d requests cut at once)", stormSeverWithin, stormSeverPhase, severed)
	time.Sleep(stormSeverPhase)

	// Still partial: the upgrade's Deployment was never written, and the extra ConfigMap,
	// which the new version drops, is still there.
	g.Expect(uidOf(g, extra)).To(Equal(extraUID), "the extra ConfigMap was deleted during a partial apply")
	for _, w := range proxy.writesSince(stormStart) {
		g.Expect(w.object).NotTo(Equal(deploymentOf(upgrading)), "the refused Deployment was written")
	}
	cr := getCoreDNS(g, upgrading)
	g.Expect(cr.Status.AppliedVersion).To(Equal(extraVersion), "the partial upgrade claims to be applied")
	injected, cut := proxy.stats()
	t.Logf("storm over: %d faults injected, %d requests severed; the upgrading add-on says %s", injected, cut, readySummary(cr))

	proxy.setSeverWatches(false, 0)
	proxy.setRefuse(nil)
	healedAt := time.Now()
	items := run.expectAllReady(t, 8)
	g.Expect(stalls.stop()).To(BeEmpty(), "add-ons were Stalled by transient faults")

	for _, cr := range items {
		switch {
		case cr.Namespace == upgrading:
			g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
		case slices.Contains(changed, cr.Namespace):
			g.Eventually(func(g Gomega) { expectRolledOut(g, getDeployment(g, cr.Namespace), 2) }).
				WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
		}
	}
	// The extra ConfigMap went only once the upgrade was applied in full: its delete came
	// after the Deployment's write.
	g.Eventually(func(g Gomega) {
		found, err := exists(extra)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeFalse(), "the upgrade did not prune the ConfigMap it dropped")
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	var deploymentAt, pruneAt time.Time
	for _, w := range proxy.writesSince(healedAt) {
		if w.object == deploymentOf(upgrading) && deploymentAt.IsZero() {
			deploymentAt = w.at
		}
		if w.verb == "delete" && w.object == "/configmaps/"+upgrading+"/"+extraObject {
			pruneAt = w.at
		}
	}
	g.Expect(deploymentAt).NotTo(BeZero(), "the upgrade's Deployment write was not seen")
	g.Expect(pruneAt).NotTo(BeZero(), "the prune of the extra ConfigMap was not seen")
	g.Expect(pruneAt.Before(deploymentAt)).To(BeFalse(), "the extra ConfigMap was pruned before the apply was complete")

	g.Eventually(expectInventoryConsistent).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	expectDecoysIntact(g, decoys)
	expectStable(t, func(g Gomega) rvSnapshot { return decoysRVs(g, decoys, run.snapshotChildren(g)) })
}

// TestFaultTransientErrors refuses the writes of one add-on's Deployment with each kind
// of transient answer in turn (500, 429, 504, 409, a reset connection), then makes the
// whole API server unreachable (connection refused): each time the add-on shows
// Ready=False and Progressing=True with reason ApplyFailed and a message saying it
// retries, is never Stalled or Degraded, and keeps retrying; once the faults end it
// becomes Ready.
func TestFaultTransientErrors(t *testing.T) {
	g := NewWithT(t)
	m, proxy := proxiedManager(t, "manager-transient", 7)
	run := newFaultRun(t, "transient", 1)
	healOnCleanup(t, proxy)
	ns := run.namespaces[0]
	stalls := watchStalls(run)

	var mu sync.Mutex
	refused := 0
	current := faultInternal
	proxy.setRefuse(func(r proxyRequest) fault {
		if r.verb == "patch" && r.group == "apps" && r.resource == "deployments" && r.namespace == ns {
			mu.Lock()
			defer mu.Unlock()
			refused++
			return current
		}
		return faultNone
	})
	run.createAddons(t, []string{ns}, newVersion)

	for _, f := range []struct {
		fault fault
		name  string
		// says matches what the message reports of this fault.
		says string
	}{
		{faultInternal, "500 InternalError", "InternalError"},
		{faultThrottle, "429 TooManyRequests", "TooManyRequests"},
		{faultTimeout, "504 Timeout", "proxy: Timeout"},
		{faultConflict, "409 Conflict", "Conflict"},
		{faultReset, "a reset connection", "EOF|connection reset"},
	} {
		mu.Lock()
		current = f.fault
		before := refused
		mu.Unlock()
		// Retried: the Deployment's write is attempted again, and again.
		g.Eventually(func() int {
			mu.Lock()
			defer mu.Unlock()
			return refused - before
		}).WithTimeout(time.Minute).WithPolling(poll).Should(BeNumerically(">=", 2), "the write refused with %s was not retried", f.name)
		g.Eventually(func(g Gomega) {
			cr := getCoreDNS(g, ns)
			expectRetrying(g, cr)
			g.Expect(meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady).Message).
				To(And(ContainSubstring("Deployment "+ns+"/"+coreDNSName), MatchRegexp(f.says)), "the message does not name the refused object and the answer")
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "after %s", f.name)
		t.Logf("%s: retried, Progressing: %s", f.name, readySummary(getCoreDNS(g, ns)))
	}

	// Connection refused: nothing reaches the API server; the manager keeps running and
	// retrying, and picks up where it was once the server is back.
	proxy.setRefuse(nil)
	g.Expect(proxy.setDown(true)).To(Succeed())
	time.Sleep(5 * time.Second)
	g.Expect(m.alive()).To(BeTrue(), "the manager exited while the API server was unreachable")
	g.Expect(proxy.setDown(false)).To(Succeed())
	expectReady(t, ns)
	g.Expect(stalls.stop()).To(BeEmpty(), "transient errors made the add-on Stalled")
	g.Eventually(expectInventoryConsistent).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	expectStable(t, run.snapshotChildren)
}

// expectRetrying checks that cr shows a transient failure being retried: Ready=False and
// Progressing=True with reason ApplyFailed, neither Degraded nor Stalled.
func expectRetrying(g Gomega, cr *addonsv1alpha1.CoreDNS) {
	ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse), readySummary(cr))
	g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonApplyFailed), readySummary(cr))
	g.Expect(ready.Message).To(HavePrefix("retrying after a transient error"), readySummary(cr))
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionProgressing)).To(BeTrue(), "Progressing")
	g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)).To(BeFalse(), "Degraded")
	g.Expect(meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)).To(BeNil(), "Stalled")
}
