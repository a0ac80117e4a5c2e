package engine

import (
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Settings are the operator-wide settings every add-on reconcile reads: the part of the
// operator's configuration that may change while it runs.
type Settings struct {
	// DefaultChannel is the channel of add-ons that name neither a version nor a channel.
	// Empty leaves it to the channels Source's own default.
	DefaultChannel string
	// RegistryMirror replaces the registry of every rendered image, for example
	// "mirror.example.com/k8s": registry.k8s.io/coredns/coredns:v1.12.1 becomes
	// mirror.example.com/k8s/coredns/coredns:v1.12.1. Empty leaves images alone.
	RegistryMirror string
	// PausedKinds lists the add-on kinds (such as CoreDNS) that are not reconciled.
	PausedKinds []string
	// ResyncInterval re-runs every add-on's reconcile this often, on top of the events
	// that trigger it. Zero turns it off.
	ResyncInterval time.Duration
	// Tenancy says which add-ons are applied as a ServiceAccount of their namespace. Nil
	// applies every add-on with the operator's own identity, for tools that only render
	// and for tests of other features; the manager always sets it.
	Tenancy *Tenancy
}

// Tenancy says whose permissions apply an add-on's objects.
type Tenancy struct {
	// TrustedNamespaces are the namespaces whose add-ons are applied with the operator's
	// own identity, unless they name a ServiceAccount.
	TrustedNamespaces []string
	// DefaultServiceAccountName is impersonated for add-ons outside TrustedNamespaces that
	// name no ServiceAccount; empty refuses them.
	DefaultServiceAccountName string
}

// TrustAll in TrustedNamespaces trusts every namespace: a single-tenant cluster's choice,
// where only cluster admins may create add-ons.
const TrustAll = "*"

// Trusts reports whether add-ons in namespace are applied with the operator's identity
// when they name no ServiceAccount. A nil Tenancy trusts every namespace.
func (t *Tenancy) Trusts(namespace string) bool {
	return t == nil || slices.Contains(t.TrustedNamespaces, namespace) || slices.Contains(t.TrustedNamespaces, TrustAll)
}

// clone returns a copy of t that shares no memory with it.
func (t *Tenancy) clone() *Tenancy {
	if t == nil {
		return nil
	}
	return &Tenancy{TrustedNamespaces: slices.Clone(t.TrustedNamespaces), DefaultServiceAccountName: t.DefaultServiceAccountName}
}

// SettingsStore holds the current Settings. Each reconcile takes one snapshot, so a
// change never applies half-way through a reconcile.
type SettingsStore struct {
	current atomic.Pointer[Settings]

	mu          sync.Mutex
	subscribers []chan event.GenericEvent
}

// NewSettingsStore returns a store holding s.
func NewSettingsStore(s Settings) *SettingsStore {
	store := &SettingsStore{}
	store.Store(s)
	return store
}

// Load returns the current settings. A nil store has the zero Settings.
func (s *SettingsStore) Load() Settings {
	if s == nil {
		return Settings{}
	}
	if p := s.current.Load(); p != nil {
		return *p
	}
	return Settings{}
}

// Store replaces the settings. When they changed, every subscriber (each add-on
// controller) is told, so that every add-on is reconciled with the new settings.
func (s *SettingsStore) Store(settings Settings) {
	settings.PausedKinds = slices.Clone(settings.PausedKinds)
	settings.Tenancy = settings.Tenancy.clone()
	previous := s.current.Swap(&settings)
	if previous != nil && reflect.DeepEqual(*previous, settings) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subscribers {
		// A pending notification already covers this change: the add-ons are listed
		// when it is handled.
		select {
		case ch <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}:
		default:
		}
	}
}

// subscribe returns a channel that receives an event after the settings change.
func (s *SettingsStore) subscribe() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribers = append(s.subscribers, ch)
	return ch
}

// kindPaused reports whether the settings pause kind.
func (s Settings) kindPaused(kind string) bool {
	return slices.Contains(s.PausedKinds, kind)
}
