package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
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
	objects, err := parseObjects(context.Background(),
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns, labels: {a: b}}\nspec: {replicas: 2}\n")
	if err != nil {
		t.Fatal(err)
	}
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
			if hit != tc.hit {
				t.Fatalf("get = %v; want hit %v", hit, tc.hit)
			}
			if !hit {
				return
			}
			// A hit is a copy of what was put, equal in every field (numbers included).
			if len(got.Items) != 1 || !equality.Semantic.DeepEqual(got.Items[0].UnstructuredObject().Object,
				objects.Items[0].UnstructuredObject().Object) {
				t.Fatalf("get = %v, want %v", got.Items, objects.Items)
			}
			if got.Items[0].Kind != "Deployment" || got.Items[0].GetName() != "d" || got.Items[0].GetNamespace() != "ns" {
				t.Errorf("the copy is %s %s/%s", got.Items[0].Kind, got.Items[0].GetNamespace(), got.Items[0].GetName())
			}
			got.Items[0].UnstructuredObject().Object["spec"] = nil
			again, _ := c.get(name, tc.lookup, tc.version, tc.rendered)
			if again.Items[0].UnstructuredObject().Object["spec"] == nil {
				t.Error("changing a hit's objects changed the cache")
			}
		})
	}
}

// TestParseCacheHandsOutCopies parses a manifest once and hands every render a copy of
// its own: a transform's change to one render never reaches the next, and a cached
// render equals a fresh parse.
func TestParseCacheHandsOutCopies(t *testing.T) {
	ctx := context.Background()
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n---\n" +
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\nspec:\n  replicas: 2\n"
	fresh, err := parseObjects(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	var c parseCache
	first, err := c.objects(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	first.Items[0].AddLabels(map[string]string{"changed": "yes"})
	for i := 0; i < 2; i++ {
		again, err := c.objects(ctx, manifest)
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Items) != len(fresh.Items) {
			t.Fatalf("render %d has %d objects, want %d", i, len(again.Items), len(fresh.Items))
		}
		for j, o := range again.Items {
			if !equality.Semantic.DeepEqual(o.UnstructuredObject().Object, fresh.Items[j].UnstructuredObject().Object) {
				t.Errorf("render %d, object %d = %v, want %v", i, j, o.UnstructuredObject().Object, fresh.Items[j].UnstructuredObject().Object)
			}
			if o.Kind != fresh.Items[j].Kind || o.GetName() != fresh.Items[j].GetName() {
				t.Errorf("render %d, object %d is %s %s, want %s %s", i, j, o.Kind, o.GetName(), fresh.Items[j].Kind, fresh.Items[j].GetName())
			}
		}
		again.Items[1].UnstructuredObject().Object["spec"] = nil
	}
	// KDP keeps a document it cannot read as an object as a blob; so does every copy.
	withBlob := manifest + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n"
	for i := 0; i < 2; i++ {
		got, err := c.objects(ctx, withBlob)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Blobs) != 1 || len(got.Items) != 2 {
			t.Errorf("render %d of a manifest with a blob: %d objects, %d blobs; want 2 and 1", i, len(got.Items), len(got.Blobs))
		}
	}
	for i := 0; i < parseCacheSize+3; i++ {
		if _, err := c.objects(ctx, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.entries) != parseCacheSize {
		t.Errorf("the cache keeps %d package outputs, want at most %d", len(c.entries), parseCacheSize)
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
