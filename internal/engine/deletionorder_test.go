package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// deletionOrderReconciler returns a CoreDNS-kind reconciler that knows the CoreDNS and
// NodeLocalDNS kinds (AddonKinds), over a fake client holding objs and indexing both
// kinds by DependencyField; a NodeLocalDNS follows the CoreDNS its spec.coreDNSRef names.
func deletionOrderReconciler(t *testing.T, tenancy *Tenancy, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := testScheme(t)
	def := Definition{Prototype: &addonsv1alpha1.CoreDNS{}}
	follower := Definition{Prototype: &addonsv1alpha1.NodeLocalDNS{}, Follows: func(a addonsv1alpha1.Addon) []addonsv1alpha1.AddonReference {
		n := a.(*addonsv1alpha1.NodeLocalDNS)
		if n.Spec.CoreDNSRef == nil {
			return nil
		}
		return []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: n.Spec.CoreDNSRef.Name, Namespace: n.Spec.CoreDNSRef.Namespace}}
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&addonsv1alpha1.CoreDNS{}, &addonsv1alpha1.NodeLocalDNS{}).
		WithIndex(&addonsv1alpha1.CoreDNS{}, DependencyField, func(o client.Object) []string {
			return def.dependencyKeys(o.(addonsv1alpha1.Addon))
		}).
		WithIndex(&addonsv1alpha1.NodeLocalDNS{}, DependencyField, func(o client.Object) []string {
			return follower.dependencyKeys(o.(addonsv1alpha1.Addon))
		}).Build()
	opts := Options{
		Catalog:    channels.NewCatalog(filepath.Join("..", "..", "channels"), ""),
		Settings:   NewSettingsStore(Settings{Tenancy: tenancy}),
		AddonKinds: []client.Object{&addonsv1alpha1.CoreDNS{}, &addonsv1alpha1.NodeLocalDNS{}},
	}
	r, err := NewWithClients(def, opts, Clients{Client: c, Reader: c, Scheme: s, Mapper: testMapper(s),
		Recorder: events.NewFakeRecorder(100)})
	if err != nil {
		t.Fatal(err)
	}
	r.targets = &dependencyTargets{}
	return r, c
}

// deletionOrderAddon is a CoreDNS or NodeLocalDNS named namespace/name that depends on deps.
func deletionOrderAddon(kind, namespace, name string, deps ...addonsv1alpha1.AddonReference) addonsv1alpha1.Addon {
	var a addonsv1alpha1.Addon
	switch kind {
	case "CoreDNS":
		a = &addonsv1alpha1.CoreDNS{}
	default:
		a = &addonsv1alpha1.NodeLocalDNS{}
	}
	a.SetNamespace(namespace)
	a.SetName(name)
	a.SetFinalizers([]string{Finalizer})
	a.GetAddonSpec().DependsOn = deps
	return a
}

// beingDeleted marks a as being deleted, holding finalizers instead of its own.
func beingDeleted(a addonsv1alpha1.Addon, finalizers ...string) addonsv1alpha1.Addon {
	now := metav1.NewTime(time.Now())
	a.SetDeletionTimestamp(&now)
	a.SetFinalizers(finalizers)
	return a
}

func TestAwaitDependents(t *testing.T) {
	ctx := context.Background()
	on := func(name string) addonsv1alpha1.AddonReference {
		return addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: name}
	}
	onIn := func(ns, name string) addonsv1alpha1.AddonReference {
		return addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: name, Namespace: ns}
	}
	tenants := &Tenancy{TrustedNamespaces: []string{"kube-system"}}
	for _, tc := range []struct {
		name    string
		tenancy *Tenancy
		// target is the CoreDNS dns being deleted; nil means team-a/dns.
		target addonsv1alpha1.Addon
		others []client.Object
		// want is the message's list of dependents; empty means the deletion goes on.
		want string
		// wakes is a dependent whose events wake the waiting deletion.
		wakes string
	}{
		{name: "no dependents"},
		{
			name: "dependsOn in the same namespace, defaulted",
			others: []client.Object{deletionOrderAddon("NodeLocalDNS", "team-a", "cache", on("dns")),
				deletionOrderAddon("CoreDNS", "team-a", "other", on("dns-2")),
				deletionOrderAddon("NodeLocalDNS", "team-a", "kind", addonsv1alpha1.AddonReference{Kind: "NodeLocalDNS", Name: "dns"})},
			want:  "depend on it (1): NodeLocalDNS team-a/cache;",
			wakes: "NodeLocalDNS team-a/cache",
		},
		{
			name: "a follower",
			others: []client.Object{func() client.Object {
				n := deletionOrderAddon("NodeLocalDNS", "team-a", "cache").(*addonsv1alpha1.NodeLocalDNS)
				n.Spec.CoreDNSRef = &addonsv1alpha1.LocalAddonReference{Name: "dns"}
				return n
			}()},
			want:  "NodeLocalDNS team-a/cache;",
			wakes: "NodeLocalDNS team-a/cache",
		},
		{
			name:   "a dependent being deleted counts until kaddons released it",
			others: []client.Object{beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "c", on("dns")), Finalizer)},
			want:   "CoreDNS team-a/c (being deleted);",
			wakes:  "CoreDNS team-a/c",
		},
		{
			name:   "a dependent kaddons released does not count, whatever else holds it",
			others: []client.Object{beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "c", on("dns")), "example.com/other")},
		},
		{
			name:   "another namespace, every namespace trusted",
			others: []client.Object{deletionOrderAddon("NodeLocalDNS", "team-b", "cache", onIn("team-a", "dns"))},
			want:   "NodeLocalDNS team-b/cache;",
			wakes:  "NodeLocalDNS team-b/cache",
		},
		{
			name:    "another namespace the tenancy does not trust",
			tenancy: tenants,
			others:  []client.Object{deletionOrderAddon("NodeLocalDNS", "team-b", "cache", onIn("team-a", "dns"))},
		},
		{
			name:    "a trusted namespace",
			tenancy: tenants,
			others:  []client.Object{deletionOrderAddon("NodeLocalDNS", "kube-system", "cache", onIn("team-a", "dns"))},
			want:    "NodeLocalDNS kube-system/cache;",
			wakes:   "NodeLocalDNS kube-system/cache",
		},
		{
			name:    "an untrusted namespace's own add-ons",
			tenancy: tenants,
			others:  []client.Object{deletionOrderAddon("NodeLocalDNS", "team-a", "cache", on("dns"))},
			want:    "NodeLocalDNS team-a/cache;",
			wakes:   "NodeLocalDNS team-a/cache",
		},
		{
			name:   "a cycle deleted at once does not wait for itself",
			target: beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "dns", on("b")), Finalizer),
			others: []client.Object{beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "b", on("c")), Finalizer),
				beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "c", on("dns")), Finalizer)},
		},
		{
			name:   "a cycle through an add-on that stays waits",
			target: beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "dns", on("b")), Finalizer),
			others: []client.Object{deletionOrderAddon("CoreDNS", "team-a", "b", on("c")),
				beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "c", on("dns")), Finalizer)},
			want:  "CoreDNS team-a/c (being deleted);",
			wakes: "CoreDNS team-a/c",
		},
		{
			name: "the list is capped",
			others: func() []client.Object {
				var objs []client.Object
				for i := range 7 {
					objs = append(objs, deletionOrderAddon("CoreDNS", "team-a", fmt.Sprintf("d%d", i), on("dns")))
				}
				return objs
			}(),
			want: "depend on it (7): CoreDNS team-a/d0, CoreDNS team-a/d1, CoreDNS team-a/d2, " +
				"CoreDNS team-a/d3, CoreDNS team-a/d4 and 2 more;",
			wakes: "CoreDNS team-a/d6",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == nil {
				target = beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "dns"), Finalizer)
			}
			r, _ := deletionOrderReconciler(t, tc.tenancy, append(tc.others, target)...)
			out := r.awaitDependents(ctx, target)
			if out.err != nil {
				t.Fatal(out.err)
			}
			owner := client.ObjectKeyFromObject(target)
			waiting := r.targets.deletions().waiting("any key")
			if tc.want == "" {
				if out.stop {
					t.Fatalf("the deletion waits: %s", out.message)
				}
				if len(waiting) > 0 {
					t.Errorf("a deletion that goes on is still recorded as waiting: %v", waiting)
				}
				return
			}
			if !out.stop || out.class != classDeleting || out.reason != addonsv1alpha1.ReasonDependentsExist {
				t.Fatalf("got outcome %+v, want a DependentsExist deletion", out)
			}
			if !strings.Contains(out.message, tc.want) {
				t.Errorf("message %q does not contain %q", out.message, tc.want)
			}
			if out.requeueAfter != dependentsRecheck {
				t.Errorf("requeue after %s, want the %s safety net", out.requeueAfter, dependentsRecheck)
			}
			if len(waiting) > 0 {
				t.Errorf("a waiting deletion is woken by any add-on: %v", waiting)
			}
			if got := r.targets.deletions().waiting(tc.wakes); !slices.Contains(got, reconcile.Request{NamespacedName: owner}) {
				t.Errorf("an event of %s wakes %v, want %s", tc.wakes, got, owner)
			}
		})
	}
}

// TestReconcileDeleteWaitsForDependents: a deletion keeps the finalizer and writes
// DependentsExist while a dependent lives; the dependent's deletion event wakes it (the
// AddonKinds watch's map function), and it then releases the finalizer.
func TestReconcileDeleteWaitsForDependents(t *testing.T) {
	ctx := context.Background()
	target := beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "dns"), Finalizer, "example.com/keep")
	cache := deletionOrderAddon("NodeLocalDNS", "team-a", "cache", addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "dns"})
	cache.SetFinalizers(nil) // deleted at once
	r, c := deletionOrderReconciler(t, nil, target, cache)
	owner := client.ObjectKeyFromObject(target)
	read := func() *addonsv1alpha1.CoreDNS {
		got := &addonsv1alpha1.CoreDNS{}
		if err := c.Get(ctx, owner, got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	res, err := r.reconcileDelete(ctx, read(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != dependentsRecheck {
		t.Errorf("requeue after %s, want %s", res.RequeueAfter, dependentsRecheck)
	}
	got := read()
	if !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Fatal("the finalizer was removed while a dependent lives")
	}
	if ready := readyMessage(got); !strings.Contains(ready, "NodeLocalDNS team-a/cache") {
		t.Errorf("Ready message %q does not name the dependent", ready)
	}
	for _, typ := range []string{addonsv1alpha1.ConditionReady, addonsv1alpha1.ConditionProgressing} {
		if cond := meta.FindStatusCondition(got.Status.Conditions, typ); cond == nil || cond.Reason != addonsv1alpha1.ReasonDependentsExist {
			t.Errorf("%s is %+v, want reason %s", typ, cond, addonsv1alpha1.ReasonDependentsExist)
		}
	}

	// The dependent's deletion event (its last state) maps to the waiting add-on.
	if err := c.Delete(ctx, cache); err != nil {
		t.Fatal(err)
	}
	if requests := r.mapDependents("NodeLocalDNS")(ctx, cache); !slices.Contains(requests, reconcile.Request{NamespacedName: owner}) {
		t.Errorf("the dependent's deletion wakes %v, want %s", requests, owner)
	}
	if _, err := r.reconcileDelete(ctx, read(), nil); err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(read(), Finalizer) {
		t.Error("the finalizer stays once the dependent is gone")
	}
	if waiting := r.targets.deletions().waiting("NodeLocalDNS team-a/cache"); len(waiting) > 0 {
		t.Errorf("the finished deletion is still recorded as waiting: %v", waiting)
	}
}

func TestAwaitDependentsOrphanDoesNotWait(t *testing.T) {
	target := beingDeleted(deletionOrderAddon("CoreDNS", "team-a", "dns"), Finalizer)
	target.GetAddonSpec().DeletionPolicy = addonsv1alpha1.DeletionPolicyOrphan
	cache := deletionOrderAddon("NodeLocalDNS", "team-a", "cache", addonsv1alpha1.AddonReference{Kind: "CoreDNS", Name: "dns"})
	r, _ := deletionOrderReconciler(t, nil, target, cache)
	if out := r.awaitDependents(context.Background(), target); out.stop {
		t.Errorf("an Orphan deletion waits: %s", out.message)
	}
}

func TestDeletionWaitsRecord(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	var w deletionWaits
	if got := w.waiting("CoreDNS ns/x"); len(got) != 0 {
		t.Fatalf("an empty record wakes %v", got)
	}
	w.expect(a, nil)
	w.expect(b, []string{"CoreDNS ns/x"})
	for _, tc := range []struct {
		key  string
		want []types.NamespacedName
	}{
		{key: "CoreDNS ns/x", want: []types.NamespacedName{a, b}},
		{key: "CoreDNS ns/y", want: []types.NamespacedName{a}},
	} {
		var got []types.NamespacedName
		for _, req := range w.waiting(tc.key) {
			got = append(got, req.NamespacedName)
		}
		slices.SortFunc(got, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s wakes %v, want %v", tc.key, got, tc.want)
		}
	}
	w.done(a)
	w.done(b)
	if got := w.waiting("CoreDNS ns/x"); len(got) != 0 {
		t.Errorf("done add-ons are still woken: %v", got)
	}
	var none *deletionWaits
	none.expect(a, nil)
	none.done(a)
	if got := none.waiting("CoreDNS ns/x"); got != nil {
		t.Errorf("a nil record wakes %v", got)
	}
}
