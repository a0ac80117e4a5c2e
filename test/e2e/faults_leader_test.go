//go:build e2e && faults

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
)

// Short leader election timings for TestFaultLeaderFailover (the defaults are 15s, 10s, 2s).
const (
	failoverLeaseDuration = 6 * time.Second
	failoverRenewDeadline = 4 * time.Second
	failoverRetryPeriod   = 500 * time.Millisecond
	// failoverTolerance covers the requests' own latency on a busy two-core machine.
	failoverTolerance = 2 * time.Second
)

// failoverConfig is the managers' configuration file: every namespace trusted, and the
// short leader election timings.
var failoverConfig = fmt.Sprintf(`apiVersion: config.kaddons.dev/v1beta1
kind: OperatorConfiguration
manager:
  leaderElection:
    leaseDuration: %s
    renewDeadline: %s
    retryPeriod: %s
runtime:
  tenancy:
    trustedNamespaces: ["*"]
`, failoverLeaseDuration, failoverRenewDeadline, failoverRetryPeriod)

// TestFaultLeaderFailover runs two managers with leader election, each through a proxy of
// its own, and cuts the leader off from its Lease (its other requests still pass), so it
// loses the lease while alive and connected. The other manager must take over within the
// lease duration plus the retry period of the old leader's last renewal, the old leader
// must exit with an error, and it must make no write once its lease expired, although
// drift keeps giving it work.
//
// The bound: the Lease expires LeaseDuration after its last renewal. client-go's
// follower looks every RetryPeriod, jittered up to (1+JitterFactor)×RetryPeriod; it may
// see the last renewal one such period late, and it acquires on its first look after the
// expiry. So it acquires within LeaseDuration + 2×(1+JitterFactor)×RetryPeriod of the
// last renewal, plus the requests' latency.
func TestFaultLeaderFailover(t *testing.T) {
	if !managerHasFlag("leader-election-namespace") {
		t.Fatal("the manager has no --leader-election-namespace flag")
	}
	g := NewWithT(t)
	configPath := filepath.Join(workDir, "manager-failover.yaml")
	g.Expect(os.WriteFile(configPath, []byte(failoverConfig), 0o600)).To(Succeed())
	leaseID := fmt.Sprintf("faults-%d.addons.kaddons.dev", time.Now().UnixNano())
	args := []string{"--config=" + configPath, "--leader-elect=true", "--leader-election-namespace=" + operatorNamespace,
		"--leader-election-id=" + leaseID}
	a, proxyA := proxiedManager(t, "manager-failover-a", 1, args...)
	b, proxyB := proxiedManager(t, "manager-failover-b", 2, args...)
	run := newFaultRun(t, "failover", 2)
	decoys := plantDecoys(t, run.namespaces[0])

	const acquired = "successfully acquired lease"
	lock := operatorNamespace + "/" + leaseID
	leader, follower, leaderProxy := a, b, proxyA
	g.Eventually(func(g Gomega) {
		aLeads, bLeads := a.logHasLine(acquired, lock), b.logHasLine(acquired, lock)
		g.Expect(aLeads).NotTo(Equal(bLeads), "exactly one manager must hold the lease (a: %v, b: %v)", aLeads, bLeads)
		if bLeads {
			leader, follower, leaderProxy = b, a, proxyB
		}
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	run.createAddons(t, run.namespaces[:1], newVersion)
	run.expectAllReady(t, 1)
	old := getLease(g, leaseID)
	oldHolder := *old.Spec.HolderIdentity
	t.Logf("%s leads as %s", leader.name, oldHolder)

	// Follow the Lease closely: the last renewal by the old holder, and the takeover.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type leaseSeen struct {
		lastRenew time.Time
		taken     *coordinationv1.Lease
	}
	seen := make(chan leaseSeen, 1)
	go func() {
		var s leaseSeen
		for ctx.Err() == nil {
			_ = attempt(func(g Gomega) {
				l := getLease(g, leaseID)
				switch {
				case l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == oldHolder:
					if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(s.lastRenew) {
						s.lastRenew = l.Spec.RenewTime.Time
					}
				case l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "":
					s.taken = l
				}
			})
			if s.taken != nil {
				seen <- s
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	leaderProxy.setRefuse(func(r proxyRequest) fault {
		if r.group == "coordination.k8s.io" && r.resource == "leases" {
			return faultReset
		}
		return faultNone
	})
	cutAt := time.Now()
	t.Logf("cut %s off from its Lease", leader.name)
	// Work for whoever leads: a new add-on, and drift on the first one every second.
	run.createAddons(t, run.namespaces[1:], newVersion)
	driftDone := make(chan struct{})
	go func() {
		defer close(driftDone)
		for replicas := 2; ctx.Err() == nil; replicas = 5 - replicas {
			_, _ = kubectl("scale", "deployment/"+coreDNSName, "-n", run.namespaces[0], fmt.Sprintf("--replicas=%d", replicas))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	var s leaseSeen
	select {
	case s = <-seen:
	case <-time.After(time.Minute):
		t.Fatalf("nobody took the lease over within a minute of the cut")
	}
	newHolder := *s.taken.Spec.HolderIdentity
	g.Expect(s.taken.Spec.AcquireTime).NotTo(BeNil())
	expiry := s.lastRenew.Add(failoverLeaseDuration)
	takeover := s.taken.Spec.AcquireTime.Sub(s.lastRenew)
	bound := failoverLeaseDuration + time.Duration(2*(1+leaderelection.JitterFactor)*float64(failoverRetryPeriod)) + failoverTolerance
	t.Logf("last renewal %s after the cut; %s took over %s after it (lease duration %s, retry period %s, bound %s)",
		s.lastRenew.Sub(cutAt).Round(time.Millisecond), newHolder, takeover.Round(time.Millisecond),
		failoverLeaseDuration, failoverRetryPeriod, bound)
	g.Expect(newHolder).NotTo(Equal(oldHolder))
	g.Expect(takeover).To(BeNumerically("<=", bound), "the takeover was late")
	g.Expect(takeover).To(BeNumerically(">=", failoverLeaseDuration-failoverTolerance), "the lease was taken before it expired")
	g.Eventually(func() bool { return follower.logHasLine(acquired, lock) }).WithTimeout(10 * time.Second).Should(BeTrue())

	// The old leader stops: controller-runtime ends the manager when the lease is lost.
	var code int
	g.Eventually(func() bool {
		var exited bool
		code, exited = leader.exitCode()
		return exited
	}).WithTimeout(failoverRenewDeadline+30*time.Second).WithPolling(100*time.Millisecond).Should(BeTrue(),
		"%s is still running after losing its lease", leader.name)
	g.Expect(code).NotTo(BeZero(), "%s exited with 0 after losing its lease", leader.name)
	g.Expect(leader.logHasLine("leader election lost")).To(BeTrue(), "%s does not say it lost the lease", leader.name)

	cancel()
	<-driftDone
	run.expectAllReady(t, 2)
	g.Eventually(func(g Gomega) {
		g.Expect(getDeployment(g, run.namespaces[0]).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the new leader did not correct the drift")

	// Checked last, when the old leader is long gone: nothing it wrote was accepted after
	// its lease expired.
	late := leaderProxy.writesSince(expiry)
	g.Expect(late).To(BeEmpty(), "%s wrote after its lease expired", leader.name)
	t.Logf("%s made %d writes between the cut and its exit, none after its lease expired",
		leader.name, len(leaderProxy.writesSince(cutAt)))
	g.Expect(follower.alive()).To(BeTrue())

	g.Eventually(expectInventoryConsistent).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	expectDecoysIntact(g, decoys)
	expectStable(t, func(g Gomega) rvSnapshot { return decoysRVs(g, decoys, run.snapshotChildren(g)) })
}
