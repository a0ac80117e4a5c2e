package channels

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// watcher polls a directory source for changes and tells its subscribers.
type watcher struct {
	once        sync.Once
	mu          sync.Mutex
	subscribers []chan event.GenericEvent
}

// watchers holds one watcher per Source.
var watchers sync.Map

// Changes returns a channel that receives an event after any file of a directory source
// changes (checked every interval), so that an add-on stalled on a broken channel file or
// package is reconciled again once the file is fixed, without a spec change. A source
// read from an embedded file system never changes: Changes returns nil for it.
func (s *Catalog) Changes(interval time.Duration) <-chan event.GenericEvent {
	if s.dir == "" {
		return nil
	}
	v, _ := watchers.LoadOrStore(s, &watcher{})
	w := v.(*watcher)
	ch := make(chan event.GenericEvent, 1)
	w.mu.Lock()
	w.subscribers = append(w.subscribers, ch)
	w.mu.Unlock()
	w.once.Do(func() { go w.poll(s, interval) })
	return ch
}

// poll compares the fingerprint of the whole source every interval, for as long as the
// process runs, and notifies every subscriber when it moved.
func (w *watcher) poll(s *Catalog, interval time.Duration) {
	last := sourceFingerprint(s)
	for range time.Tick(interval) {
		now := sourceFingerprint(s)
		if now == last {
			continue
		}
		last = now
		w.mu.Lock()
		for _, ch := range w.subscribers {
			// A pending notification already covers this change.
			select {
			case ch <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}:
			default:
			}
		}
		w.mu.Unlock()
	}
}

// sourceFingerprint is the fingerprint of the whole source, or the error that kept it
// from being read: a source that cannot be read, or can again, has changed.
func sourceFingerprint(s *Catalog) string {
	fp, err := fingerprint(s.fsys, ".")
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return fp
}
