package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/kaddons/kaddons/internal/engine/ssa"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestEchoHandler(t *testing.T) {
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	configMaps := schema.GroupKind{Kind: "ConfigMap"}
	deployment := func(name, rv string) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	configMap := func(name, rv string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	// Each step is a write that begins or ends, or an event; the requests it enqueued
	// are the event's object names (a write that ends can release waiting events).
	type step struct {
		kind         schema.GroupKind
		begin, end   client.Object
		endErr       error
		create       client.Object
		update       client.Object
		delete       client.Object
		wantEnqueued []string
	}
	written := func(kind schema.GroupKind, obj client.Object) []step {
		return []step{{kind: kind, begin: obj}, {kind: kind, end: obj}}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "the creation of a child the engine created is dropped", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: deployments, create: deployment("coredns", "10")})},
		{name: "an event that comes before the write's response waits, and is then dropped", steps: []step{
			{kind: deployments, begin: deployment("coredns", "")},
			{kind: deployments, create: deployment("coredns", "10")},
			{kind: deployments, end: deployment("coredns", "10")},
		}},
		{name: "another change that comes during a write is passed on when it ends", steps: []step{
			{kind: deployments, begin: deployment("coredns", "9")},
			{kind: deployments, update: deployment("coredns", "10")},
			{kind: deployments, update: deployment("coredns", "11")},
			{kind: deployments, end: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}},
		}},
		{name: "events that wait for a failed write are passed on", steps: []step{
			{kind: deployments, begin: deployment("coredns", "")},
			{kind: deployments, create: deployment("coredns", "10")},
			{kind: deployments, end: deployment("coredns", ""), endErr: errors.New("conflict"), wantEnqueued: []string{"coredns"}},
		}},
		{name: "two writes that end before the first one's event: both events are echoes", steps: append(append(
			written(deployments, deployment("coredns", "10")), written(deployments, deployment("coredns", "11"))...),
			step{kind: deployments, update: deployment("coredns", "10")},
			step{kind: deployments, update: deployment("coredns", "11")})},
		{name: "an event of a later write: the earlier writes' events will not come", steps: append(append(
			written(deployments, deployment("coredns", "10")), written(deployments, deployment("coredns", "11"))...),
			step{kind: deployments, update: deployment("coredns", "11")},
			step{kind: deployments, update: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}})},
		{name: "an echo is dropped once: the same event again reconciles", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: deployments, update: deployment("coredns", "10")},
			step{kind: deployments, update: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}})},
		{name: "a later change by anyone reconciles", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: deployments, update: deployment("coredns", "11"), wantEnqueued: []string{"coredns"}})},
		{name: "a deletion reconciles and forgets the write", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: deployments, delete: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}},
			step{kind: deployments, create: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}})},
		{name: "an object the engine never wrote reconciles", steps: []step{
			{kind: deployments, create: deployment("coredns", "10"), wantEnqueued: []string{"coredns"}},
		}},
		{name: "another kind of the same name is not an echo", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: configMaps, create: configMap("coredns", "10"), wantEnqueued: []string{"coredns"}})},
		{name: "another object of the kind is not an echo", steps: append(written(deployments, deployment("coredns", "10")),
			step{kind: deployments, create: deployment("other", "10"), wantEnqueued: []string{"other"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &echoes{}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			ctx := context.Background()
			for i, s := range tc.steps {
				h := echoHandler{echoes: e, kind: s.kind, mapFn: self}
				switch {
				case s.begin != nil:
					e.Begin(s.kind, s.begin)
				case s.end != nil:
					e.End(s.kind, s.end, s.endErr)
				case s.create != nil:
					h.Create(ctx, event.CreateEvent{Object: s.create}, q)
				case s.update != nil:
					h.Update(ctx, event.UpdateEvent{ObjectOld: s.update, ObjectNew: s.update}, q)
				case s.delete != nil:
					h.Delete(ctx, event.DeleteEvent{Object: s.delete}, q)
				}
				var got []string
				for q.Len() > 0 {
					r, _ := q.Get()
					got = append(got, r.Name)
					q.Done(r)
					q.Forget(r)
				}
				if !slices.Equal(got, s.wantEnqueued) {
					t.Errorf("step %d: enqueued %q, want %q", i, got, s.wantEnqueued)
				}
			}
		})
	}

	t.Run("a nil echoes drops nothing", func(t *testing.T) {
		var e *echoes
		e.Begin(deployments, deployment("coredns", ""))
		e.End(deployments, deployment("coredns", "10"), nil)
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		echoHandler{echoes: e, kind: deployments, mapFn: self}.Create(context.Background(), event.CreateEvent{Object: deployment("coredns", "10")}, q)
		if q.Len() != 1 {
			t.Errorf("a nil echoes enqueued %d requests, want 1", q.Len())
		}
	})

	t.Run("an update that moves a child wakes both add-ons", func(t *testing.T) {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		r := &Reconciler{name: "coredns"}
		owned := func(owner string) client.Object {
			return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coredns", ResourceVersion: "10",
				Labels: ssa.InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "ns", Name: owner})}}
		}
		h := echoHandler{echoes: &echoes{}, kind: deployments, mapFn: r.mapChild(appsv1.SchemeGroupVersion.WithKind("Deployment"))}
		h.Update(context.Background(), event.UpdateEvent{ObjectOld: owned("a"), ObjectNew: owned("b")}, q)
		if q.Len() != 2 {
			t.Errorf("enqueued %d requests, want 2 (the add-on before and after)", q.Len())
		}
	})
}
