package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestRenderCache(t *testing.T) {
	name := types.NamespacedName{Namespace: "ns", Name: "dns"}
	addon := func(uid types.UID, generation int64) *addonsv1alpha1.CoreDNS {
		return &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: generation}}
	}
	objects := &Objects{}
	for _, tc := range []struct {
		name     string
		lookup   *addonsv1alpha1.CoreDNS
		version  string
		rendered string
		forget   bool
		hit      bool
	}{
		{name: "same inputs", lookup: addon("a", 2), version: "1.0", rendered: "m", hit: true},
		{name: "new generation", lookup: addon("a", 3), version: "1.0", rendered: "m"},
		{name: "re-created add-on", lookup: addon("b", 2), version: "1.0", rendered: "m"},
		{name: "other version", lookup: addon("a", 2), version: "2.0", rendered: "m"},
		{name: "package changed", lookup: addon("a", 2), version: "1.0", rendered: "m2"},
		{name: "forgotten", lookup: addon("a", 2), version: "1.0", rendered: "m", forget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c renderCache
			c.put(name, addon("a", 2), "1.0", "m", objects)
			if tc.forget {
				c.forget(name)
			}
			got, hit := c.get(name, tc.lookup, tc.version, tc.rendered)
			if hit != tc.hit || (hit && got != objects) {
				t.Fatalf("get = %p, %v; want hit %v", got, hit, tc.hit)
			}
		})
	}
}

func TestRenderRefusesKindsTheControllerDoesNotManage(t *testing.T) {
	// The test reconciler's definition lists only ConfigMaps and Deployments; the CoreDNS
	// package holds more kinds.
	r, _ := testReconciler(t, Options{})
	st := &reconcileState{addon: coreDNS("a", "x")}
	if out := r.resolve(context.Background(), st); out.stop {
		t.Fatalf("resolve stopped: %+v", out)
	}
	out := r.render(context.Background(), st)
	if !out.stop || out.class != classStalled || !out.terminal || out.reason != addonsv1alpha1.ReasonRenderFailed {
		t.Fatalf("render = %+v, want Stalled RenderFailed", out)
	}
	if !strings.Contains(out.message, "a kind the CoreDNS controller does not manage") {
		t.Errorf("message %q does not say which kind is refused", out.message)
	}
}

func TestRenderReportsBadPatches(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	addon := coreDNS("a", "x")
	addon.Spec.Patches = []*runtime.RawExtension{{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nope"}}`)}}
	st := &reconcileState{addon: addon}
	r.resolve(context.Background(), st)
	out := r.render(context.Background(), st)
	if out.class != classStalled || out.reason != addonsv1alpha1.ReasonPatchTargetNotFound {
		t.Fatalf("render = %+v, want Stalled PatchTargetNotFound", out)
	}
}

// TestRenderFailure: a package error from the channels source (a refused or oversized
// package, a missing version) stops the reconcile before apply and prune, Stalled with
// the source's reason and a terminal error, so that only a change of the spec or of the
// package (the directory source's recheck) reconciles it again; any other error is a
// retried RenderFailed.
func TestRenderFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		class    conditionClass
		reason   string
		terminal bool
	}{
		{name: "refused package", err: &channels.Error{Reason: addonsv1alpha1.ReasonPackageRefused,
			Message: "package coredns/x: packages/coredns/x/link.yaml is a symbolic link"},
			class: classStalled, reason: addonsv1alpha1.ReasonPackageRefused, terminal: true},
		{name: "package too large", err: &channels.Error{Reason: addonsv1alpha1.ReasonPackageTooLarge,
			Message: "package coredns/x: more than 512 files"},
			class: classStalled, reason: addonsv1alpha1.ReasonPackageTooLarge, terminal: true},
		{name: "wrapped package error", err: fmt.Errorf("rendering: %w", &channels.Error{
			Reason: addonsv1alpha1.ReasonPackageRefused, Message: "package coredns/x: remote"}),
			class: classStalled, reason: addonsv1alpha1.ReasonPackageRefused, terminal: true},
		{name: "other error", err: errors.New("reading: input/output error"),
			class: classFailed, reason: addonsv1alpha1.ReasonRenderFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderFailure(tc.err, "CoreDNS", "x")
			if !out.stop || out.class != tc.class || out.reason != tc.reason || out.terminal != tc.terminal {
				t.Fatalf("renderFailure = %+v, want class %v, reason %s, terminal %v", out, tc.class, tc.reason, tc.terminal)
			}
			var ce *channels.Error
			if errors.As(tc.err, &ce) && !strings.Contains(out.message, ce.Message) {
				t.Errorf("message %q does not carry the package error %q", out.message, ce.Message)
			}
		})
	}
}
