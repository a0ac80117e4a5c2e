package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// The author hooks of engine.Definition: where each runs, and what a hold, a refusal and
// a failure leave in the cluster and in the status.

// hookScript is what the test Definition's hooks answer for the add-ons of one
// namespace, and the calls they got. A namespace without a script gets the zero result.
type hookScript struct {
	mu      sync.Mutex
	answers map[string]func(engine.HookRequest) engine.HookResult
	calls   []hookCall
}

// hookCall is one call of a hook: its name, the versions of a BeforeUpgrade, and the
// number of rendered objects it was shown.
type hookCall struct {
	hook, from, to string
	objects        int
}

// hookScripts maps a namespace to its *hookScript.
var hookScripts sync.Map

// scriptHooks gives ns's add-ons a script: answers by hook name.
func scriptHooks(t *testing.T, ns string, answers map[string]func(engine.HookRequest) engine.HookResult) *hookScript {
	t.Helper()
	s := &hookScript{answers: answers}
	hookScripts.Store(ns, s)
	t.Cleanup(func() { hookScripts.Delete(ns) })
	return s
}

// answer replaces the answer of hook.
func (s *hookScript) answer(hook string, f func(engine.HookRequest) engine.HookResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[hook] = f
}

// called returns the calls of hook so far.
func (s *hookScript) called(hook string) []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.calls), func(c hookCall) bool { return c.hook != hook })
}

// scripted is the test Definition's hook named name: it records the call and answers
// what the namespace's script says.
func scripted(name string) func(context.Context, engine.HookRequest) engine.HookResult {
	return func(_ context.Context, req engine.HookRequest) engine.HookResult {
		v, ok := hookScripts.Load(req.Addon.GetNamespace())
		if !ok {
			return engine.HookResult{}
		}
		s := v.(*hookScript)
		s.mu.Lock()
		defer s.mu.Unlock()
		call := hookCall{hook: name, from: req.From, to: req.To}
		if req.Objects != nil {
			call.objects = len(req.Objects.Items)
		}
		s.calls = append(s.calls, call)
		if f := s.answers[name]; f != nil {
			return f(req)
		}
		return engine.HookResult{}
	}
}

// testHooks are the test Definition's hooks, every one scripted.
func testHooks() engine.Hooks {
	return engine.Hooks{
		Validate:      scripted("Validate"),
		Default:       scripted("Default"),
		Initialize:    scripted("Initialize"),
		BeforeUpgrade: scripted("BeforeUpgrade"),
		AfterReady:    scripted("AfterReady"),
		Cleanup:       scripted("Cleanup"),
	}
}

// hold answers a hold with reason and message, asked again after a second.
func hold(reason, message string) func(engine.HookRequest) engine.HookResult {
	return func(engine.HookRequest) engine.HookResult {
		return engine.HookResult{Reason: reason, Message: message, RetryAfter: time.Second}
	}
}

// goOn answers the zero result.
func goOn(engine.HookRequest) engine.HookResult { return engine.HookResult{} }

func TestHookValidateRefusesTheSpec(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"Validate": func(req engine.HookRequest) engine.HookResult {
			if r := req.Addon.(*addonsv1alpha1.CoreDNS).Spec.Replicas; r != nil && *r%2 == 0 {
				return engine.Hold("", "spec.replicas must be odd, not %d", *r)
			}
			return engine.HookResult{}
		},
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	cr.Spec.Replicas = ptr.To[int32](2)
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())

	stalled := waitStalled(t, cr, addonsv1alpha1.ReasonInvalidSpec)
	g.Expect(stalled.Message).To(Equal("the Validate hook holds the add-on: spec.replicas must be odd, not 2"))
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Len()).To(BeZero(), "a refused spec was applied")
	g.Expect(cr.Finalizers).To(BeEmpty())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"},
		&appsv1.Deployment{}))).To(BeTrue())
	g.Expect(script.called("Initialize")).To(BeEmpty(), "Initialize ran for a refused spec")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](3) })
	waitApplied(t, cr, oldVersion)
	getAddon(g, cr)
	g.Expect(meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)).To(BeNil())
}

func TestHookDefaultFillsTheRenderedCopyOnly(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"Default": func(req engine.HookRequest) engine.HookResult {
			if c := req.Addon.(*addonsv1alpha1.CoreDNS); c.Spec.Replicas == nil {
				c.Spec.Replicas = ptr.To[int32](5)
			}
			return engine.HookResult{}
		},
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)

	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
	g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(5))))
	getAddon(g, cr)
	g.Expect(cr.Spec.Replicas).To(BeNil(), "Default wrote to the spec")
}

func TestHookInitializeHoldsTheFirstApply(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"Initialize": hold("", "waiting for the platform's node pool"),
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())

	held := enginetest.WaitCondition(t, k8sClient, cr, addonsv1alpha1.ConditionProgressing, addonsv1alpha1.ReasonInitializationBlocked)
	g.Expect(held.Message).To(Equal("the Initialize hook holds the add-on: waiting for the platform's node pool"))
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Len()).To(BeZero())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"},
		&appsv1.Deployment{}))).To(BeTrue(), "a held first apply created the Deployment")
	// The hold is asked again without any change to the add-on.
	g.Eventually(func() int { return len(script.called("Initialize")) }).WithTimeout(eventuallyTimeout).Should(BeNumerically(">=", 2))
	calls := script.called("Initialize")
	g.Expect(calls[0].objects).To(BeNumerically(">", 0), "Initialize was not shown the objects about to be applied")

	script.answer("Initialize", goOn)
	waitApplied(t, cr, oldVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	// Initialize runs before the first apply only.
	n := len(script.called("Initialize"))
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](3) })
	waitApplied(t, cr, oldVersion)
	g.Expect(script.called("Initialize")).To(HaveLen(n))
}

func TestHookBeforeUpgradeHoldsTheVersion(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createReadyCoreDNS(t, cr)
	g.Expect(script.called("BeforeUpgrade")).To(BeEmpty(), "BeforeUpgrade ran without an upgrade")
	before := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, before)).To(Succeed())

	script.answer("BeforeUpgrade", hold("OutsideMaintenanceWindow", "upgrades run on Sundays"))
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	held := enginetest.WaitCondition(t, k8sClient, cr, addonsv1alpha1.ConditionProgressing, "OutsideMaintenanceWindow")
	g.Expect(held.Message).To(Equal("the BeforeUpgrade hook holds the add-on: upgrades run on Sundays"))
	calls := script.called("BeforeUpgrade")
	g.Expect(calls).NotTo(BeEmpty())
	g.Expect(calls[0].from).To(Equal(oldVersion))
	g.Expect(calls[0].to).To(Equal(newVersion))
	getAddon(g, cr)
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	after := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "a held upgrade changed what runs")

	script.answer("BeforeUpgrade", goOn)
	waitApplied(t, cr, newVersion)
}

func TestHookBeforeUpgradeDoesNotHoldARollback(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	// The hook lets the upgrade go and would hold a move back to the old version.
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"BeforeUpgrade": func(req engine.HookRequest) engine.HookResult {
			if req.To == oldVersion {
				return engine.Hold("", "no downgrades")
			}
			return engine.HookResult{}
		},
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Timeout: &metav1.Duration{Duration: 2 * time.Second}, Rollback: ptr.To(true)}
	createReadyCoreDNS(t, cr)

	// The new version never becomes available, the upgrade fails and rolls back.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	enginetest.WaitCondition(t, k8sClient, cr, addonsv1alpha1.ConditionDegraded, addonsv1alpha1.ReasonUpgradeFailed)
	waitApplied(t, cr, oldVersion)
	for _, call := range script.called("BeforeUpgrade") {
		g.Expect(call.to).To(Equal(newVersion), "the rollback asked BeforeUpgrade")
	}
	g.Expect(script.called("BeforeUpgrade")).NotTo(BeEmpty())
}

func TestHookAfterReadyRunsOncePerChange(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"AfterReady": hold("", "no DNS answer from 10.96.0.10 yet"),
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)
	markWorkloadsAvailable(t, ns)
	notServing := waitReason(t, cr, addonsv1alpha1.ReasonNotServing)
	g.Expect(notServing.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(notServing.Message).To(Equal("the AfterReady hook holds the add-on: no DNS answer from 10.96.0.10 yet"))

	script.answer("AfterReady", goOn)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	n := len(script.called("AfterReady"))
	// A reconcile that changes nothing does not ask again.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { metav1.SetMetaDataAnnotation(&c.ObjectMeta, "example.com/touch", "1") })
	waitQuiet(t, ns)
	g.Expect(script.called("AfterReady")).To(HaveLen(n), "AfterReady ran on a no-op reconcile")
	// A spec change asks again once it is ready.
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](3) })
	waitApplied(t, cr, oldVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	g.Expect(len(script.called("AfterReady"))).To(BeNumerically(">", n))
}

func TestHookCleanupHoldsTheDeletion(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"Cleanup": hold("", "draining the zone transfer"),
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	createCoreDNS(t, cr)
	g.Expect(k8sClient.Delete(context.Background(), cr)).To(Succeed())

	held := waitReason(t, cr, addonsv1alpha1.ReasonDeletionBlocked)
	g.Expect(held.Message).To(Equal("the Cleanup hook holds the add-on: draining the zone transfer"))
	g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, &appsv1.Deployment{})).
		To(Succeed(), "a held deletion deleted a child")
	g.Expect(script.called("Cleanup")).NotTo(BeEmpty())

	script.answer("Cleanup", goOn)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "coredns"}, cr))
	}).WithTimeout(eventuallyTimeout).Should(BeTrue())
	expectGone(t, cr.Status.Inventory.Objects())
}

func TestHookFailureIsRetried(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	script := scriptHooks(t, ns, map[string]func(engine.HookRequest) engine.HookResult{
		"Initialize": func(engine.HookRequest) engine.HookResult {
			return engine.HookResult{Err: errors.New("reading the platform's settings: connection refused")}
		},
	})
	cr := enginetest.NewCoreDNS(ns, oldVersion)
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
	failed := enginetest.WaitCondition(t, k8sClient, cr, addonsv1alpha1.ConditionDegraded, addonsv1alpha1.ReasonHookFailed)
	g.Expect(failed.Message).To(ContainSubstring("the Initialize hook failed: reading the platform's settings: connection refused"))
	getAddon(g, cr)
	g.Expect(cr.Status.Inventory.Len()).To(BeZero())
	// Retried with back-off, with no change to the add-on.
	g.Eventually(func() int { return len(script.called("Initialize")) }).WithTimeout(eventuallyTimeout).Should(BeNumerically(">=", 2))
	script.answer("Initialize", goOn)
	waitApplied(t, cr, oldVersion)
}
