package engine

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func coreDNS(ns, name string, deps ...addonsv1alpha1.AddonReference) *addonsv1alpha1.CoreDNS {
	c := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}}
	c.Spec.DependsOn = deps
	return c
}

func readyCoreDNS(ns, name string) *addonsv1alpha1.CoreDNS {
	c := coreDNS(ns, name)
	c.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: addonsv1alpha1.ReasonReconciled, ObservedGeneration: 1, LastTransitionTime: metav1.Now()}}
	return c
}

// failingCoreDNS is an add-on whose Ready condition is False with a reason and message
// that only its own namespace may read.
func failingCoreDNS(ns, name string) *addonsv1alpha1.CoreDNS {
	c := coreDNS(ns, name)
	c.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: addonsv1alpha1.ReasonForbidden, Message: "ServiceAccount " + ns + "/secret-team may not create Secret " + ns + "/db-password",
		ObservedGeneration: 1, LastTransitionTime: metav1.Now()}}
	return c
}

func TestGate(t *testing.T) {
	dep := func(name string) addonsv1alpha1.AddonReference {
		return addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: name}
	}
	depIn := func(ns, name string) addonsv1alpha1.AddonReference {
		return addonsv1alpha1.AddonReference{Kind: "CoreDNS", Namespace: ns, Name: name}
	}
	suspended := coreDNS("a", "x")
	suspended.Spec.Suspend = true
	for _, tc := range []struct {
		name        string
		addon       *addonsv1alpha1.CoreDNS
		existing    []client.Object
		settings    Settings
		wantStop    bool
		wantClass   conditionClass
		wantReason  string
		wantMessage string
		// wantExact compares the whole message, to show that nothing else leaks into it.
		wantExact bool
		wantErr   bool
	}{
		{name: "nothing to wait for", addon: coreDNS("a", "x")},
		{name: "suspended", addon: suspended, wantStop: true, wantClass: classPaused, wantReason: addonsv1alpha1.ReasonPaused,
			wantMessage: "spec.suspend"},
		{name: "kind paused by the configuration", addon: coreDNS("a", "x"), settings: Settings{PausedKinds: []string{"CoreDNS"}},
			wantStop: true, wantClass: classPaused, wantReason: addonsv1alpha1.ReasonPaused, wantMessage: "every CoreDNS is paused"},
		{name: "dependency missing", addon: coreDNS("a", "x", dep("dns")), wantStop: true, wantClass: classProgressing,
			wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantMessage: "CoreDNS a/dns: not found"},
		{name: "dependency not ready", addon: coreDNS("a", "x", dep("dns")), existing: []client.Object{coreDNS("a", "dns")},
			wantStop: true, wantClass: classProgressing, wantReason: addonsv1alpha1.ReasonDependencyNotReady,
			wantMessage: "CoreDNS a/dns: not Ready yet"},
		{name: "dependency ready", addon: coreDNS("a", "x", dep("dns")), existing: []client.Object{readyCoreDNS("a", "dns")}},
		{name: "dependency failing: its reason and message", addon: coreDNS("a", "x", dep("dns")),
			existing: []client.Object{failingCoreDNS("a", "dns")}, wantStop: true, wantClass: classProgressing,
			wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true,
			wantMessage: "waiting for CoreDNS a/dns: not Ready (Forbidden: ServiceAccount a/secret-team may not create Secret a/db-password)"},
		{name: "same namespace named explicitly", addon: coreDNS("a", "x", depIn("a", "dns")), wantStop: true,
			wantClass: classProgressing, wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true,
			wantMessage: "waiting for CoreDNS a/dns: not found"},
		{name: "other namespace, ready", addon: coreDNS("a", "x", depIn("b", "dns")), existing: []client.Object{readyCoreDNS("b", "dns")}},
		{name: "other namespace, failing: only not Ready", addon: coreDNS("a", "x", depIn("b", "dns")),
			existing: []client.Object{failingCoreDNS("b", "dns")}, wantStop: true, wantClass: classProgressing,
			wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true, wantMessage: "waiting for CoreDNS b/dns: not Ready"},
		{name: "other namespace, no condition yet: only not Ready", addon: coreDNS("a", "x", depIn("b", "dns")),
			existing: []client.Object{coreDNS("b", "dns")}, wantStop: true, wantClass: classProgressing,
			wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true, wantMessage: "waiting for CoreDNS b/dns: not Ready"},
		{name: "other namespace, missing: the same words as not Ready", addon: coreDNS("a", "x", depIn("b", "dns")),
			wantStop: true, wantClass: classProgressing, wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true,
			wantMessage: "waiting for CoreDNS b/dns: not Ready"},
		{name: "other namespace, unknown kind", addon: coreDNS("a", "x", addonsv1alpha1.AddonReference{Kind: "Nothing", Namespace: "b", Name: "n"}),
			wantStop: true, wantClass: classProgressing, wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true,
			wantMessage: "waiting for Nothing b/n: not Ready"},
		{name: "a cycle through another namespace is not followed there", addon: coreDNS("a", "x", depIn("b", "y")),
			existing: []client.Object{coreDNS("a", "x", depIn("b", "y")), coreDNS("b", "y", depIn("a", "x"))},
			wantStop: true, wantClass: classProgressing, wantReason: addonsv1alpha1.ReasonDependencyNotReady, wantExact: true,
			wantMessage: "waiting for CoreDNS b/y: not Ready"},
		{name: "cycle", addon: coreDNS("a", "x", dep("y")),
			existing: []client.Object{coreDNS("a", "x", dep("y")), coreDNS("a", "y", dep("x"))},
			wantStop: true, wantClass: classStalled, wantReason: addonsv1alpha1.ReasonDependencyCycle,
			wantMessage: "CoreDNS a/x -> CoreDNS a/y -> CoreDNS a/x", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := testReconciler(t, Options{}, tc.existing...)
			out := r.gate(context.Background(), &reconcileState{addon: tc.addon, settings: tc.settings})
			if out.stop != tc.wantStop || out.class != tc.wantClass || out.reason != tc.wantReason {
				t.Fatalf("gate = stop %v class %v reason %q, want %v %v %q", out.stop, out.class, out.reason,
					tc.wantStop, tc.wantClass, tc.wantReason)
			}
			if tc.wantExact && out.message != tc.wantMessage {
				t.Errorf("message %q, want exactly %q", out.message, tc.wantMessage)
			}
			if !strings.Contains(out.message, tc.wantMessage) {
				t.Errorf("message %q does not contain %q", out.message, tc.wantMessage)
			}
			if (out.err != nil) != tc.wantErr || (tc.wantErr && !out.terminal) {
				t.Errorf("err = %v (terminal %v), want error %v and terminal", out.err, out.terminal, tc.wantErr)
			}
		})
	}
}

func TestRefNamespace(t *testing.T) {
	from := coreDNS("home", "x")
	if got := RefNamespace(from, addonsv1alpha1.AddonReference{Name: "y"}); got != "home" {
		t.Errorf("RefNamespace without a namespace = %q, want home", got)
	}
	if got := RefNamespace(from, addonsv1alpha1.AddonReference{Name: "y", Namespace: "other"}); got != "other" {
		t.Errorf("RefNamespace with a namespace = %q, want other", got)
	}
}
