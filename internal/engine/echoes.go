package engine

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// echoes tells the watch events of the engine's own writes from every other event. The
// event that reports a write back (the creation of a child the apply just made, the
// add-on's own finalizer and write-ahead patch) carries nothing the reconcile that wrote
// it did not already know, so it costs no reconcile: a new add-on is reconciled once,
// not once more for each of its own writes.
//
// Only the event at exactly the resource version a write left is its echo. Any other
// change, by anyone, has another resource version and reconciles as before, and so does
// every deletion. An event that arrives while a write to its object is still under way
// (the watch can be faster than the response) waits for that write to end, and is then
// dropped if the write left its resource version, else passed on.
type echoes struct {
	mu sync.Mutex
	// written are the resource versions the finished writes to an object left, oldest
	// first, until their events come (at most maxUnseenWrites).
	written map[echoKey][]string
	// inflight are the writes under way, and the events that wait for them.
	inflight map[echoKey]*flight
}

// maxUnseenWrites bounds the resource versions remembered of one object's writes whose
// events have not come yet.
const maxUnseenWrites = 8

// echoKey names one object of one kind.
type echoKey struct {
	kind            schema.GroupKind
	namespace, name string
}

// flight is the writes under way to one object.
type flight struct {
	writers int
	// left are the resource versions the writes that ended so far left.
	left []string
	// waiting are the events that arrived meanwhile.
	waiting []waitingEvent
}

// waitingEvent is an event held until the writes to its object end.
type waitingEvent struct {
	resourceVersion string
	pass            func()
}

func keyOf(gk schema.GroupKind, obj client.Object) echoKey {
	return echoKey{kind: gk, namespace: obj.GetNamespace(), name: obj.GetName()}
}

// Begin records that a write to obj, of kind gk, starts. end must follow. A nil echoes
// records nothing.
func (e *echoes) Begin(gk schema.GroupKind, obj client.Object) {
	if e == nil {
		return
	}
	key := keyOf(gk, obj)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight == nil {
		e.inflight = map[echoKey]*flight{}
	}
	f := e.inflight[key]
	if f == nil {
		f = &flight{}
		e.inflight[key] = f
	}
	f.writers++
}

// End records that the write begin announced ended: when err is nil, obj is what it left.
// Once the last write to the object ends, the events that waited for it are dropped (the
// echoes) or passed on.
func (e *echoes) End(gk schema.GroupKind, obj client.Object, err error) {
	if e == nil {
		return
	}
	key := keyOf(gk, obj)
	var pass []func()
	e.mu.Lock()
	f := e.inflight[key]
	if f == nil {
		e.mu.Unlock()
		return
	}
	if rv := obj.GetResourceVersion(); err == nil && rv != "" {
		f.left = append(f.left, rv)
	}
	if f.writers--; f.writers > 0 {
		e.mu.Unlock()
		return
	}
	delete(e.inflight, key)
	for _, w := range f.waiting {
		if i := slices.Index(f.left, w.resourceVersion); i >= 0 {
			f.left = slices.Delete(f.left, i, i+1)
			continue
		}
		pass = append(pass, w.pass)
	}
	if len(f.left) > 0 {
		if e.written == nil {
			e.written = map[echoKey][]string{}
		}
		// Two writes in a row (the finalizer patch, then the status patch) may both end
		// before the first one's event comes: each is remembered until its event.
		written := append(e.written[key], f.left...)
		e.written[key] = written[max(0, len(written)-maxUnseenWrites):]
	}
	e.mu.Unlock()
	for _, p := range pass {
		p()
	}
}

// sort passes on the event of obj, of kind gk, by calling pass, unless it is the echo of
// a write: then it drops it, or, while a write is under way, decides once it ends.
func (e *echoes) sort(gk schema.GroupKind, obj client.Object, pass func()) {
	if e == nil {
		pass()
		return
	}
	key, rv := keyOf(gk, obj), obj.GetResourceVersion()
	e.mu.Lock()
	if f := e.inflight[key]; f != nil {
		f.waiting = append(f.waiting, waitingEvent{resourceVersion: rv, pass: pass})
		e.mu.Unlock()
		return
	}
	if i := slices.Index(e.written[key], rv); i >= 0 {
		// Events come in order: the writes before this one have had theirs, or never
		// will (a re-list sends only the latest state).
		if rest := e.written[key][i+1:]; len(rest) > 0 {
			e.written[key] = rest
		} else {
			delete(e.written, key)
		}
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	pass()
}

// forget drops what is remembered of the writes to obj, of kind gk (it was deleted).
func (e *echoes) forget(gk schema.GroupKind, obj client.Object) {
	e.forgetKey(keyOf(gk, obj))
}

// unseen drops what is remembered of the last write to ref: the reconcile that made it
// did not see it in the cache, so its event, when it comes, is news and reconciles. The
// informer may deliver nothing else: after a re-list it sends only an object's latest
// state, which is what a write that changed nothing (a no-op apply) left.
func (e *echoes) unseen(ref addonsv1alpha1.ObjectReference) {
	e.forgetKey(echoKey{kind: ref.GroupVersionKind().GroupKind(), namespace: ref.Namespace, name: ref.Name})
}

// forgetKey drops what is remembered of the writes to the object of key.
func (e *echoes) forgetKey(key echoKey) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.written, key)
}

// echoHandler enqueues the requests mapFn maps an event's object to, as
// handler.EnqueueRequestsFromMapFunc does, but for the echoes of the engine's own writes
// to objects of kind.
type echoHandler struct {
	echoes *echoes
	kind   schema.GroupKind
	mapFn  handler.MapFunc
}

var _ handler.EventHandler = echoHandler{}

// Create implements handler.EventHandler.
func (h echoHandler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.sorted(ctx, q, e.Object, nil)
}

// Update implements handler.EventHandler; it maps the object before and after the change,
// so that a child whose labels moved wakes both add-ons.
func (h echoHandler) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.sorted(ctx, q, e.ObjectNew, e.ObjectOld)
}

// Delete implements handler.EventHandler: a deletion always reconciles.
func (h echoHandler) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.echoes.forget(h.kind, e.Object)
	for _, r := range h.requests(ctx, e.Object, nil) {
		q.Add(r)
	}
}

// Generic implements handler.EventHandler.
func (h echoHandler) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for _, r := range h.requests(ctx, e.Object, nil) {
		q.Add(r)
	}
}

// sorted enqueues the requests of obj (and old), unless the event is an echo.
func (h echoHandler) sorted(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], obj, old client.Object) {
	requests := h.requests(ctx, obj, old)
	if len(requests) == 0 {
		return
	}
	h.echoes.sort(h.kind, obj, func() {
		log.FromContext(ctx).V(1).Info("Watch event is news", "kind", h.kind.String(),
			"object", client.ObjectKeyFromObject(obj).String(), "resourceVersion", obj.GetResourceVersion(), "requests", requests)
		for _, r := range requests {
			q.Add(r)
		}
	})
}

// requests maps obj, and old when set, to their distinct requests.
func (h echoHandler) requests(ctx context.Context, obj, old client.Object) []reconcile.Request {
	requests := h.mapFn(ctx, obj)
	if old != nil {
		for _, r := range h.mapFn(ctx, old) {
			if !slices.Contains(requests, r) {
				requests = append(requests, r)
			}
		}
	}
	return requests
}

// self maps an add-on's event to its own request.
func self(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
}
