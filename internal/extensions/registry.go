package extensions

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Registry answers which extensions apply to an add-on at a hook. It reads the
// AddonExtensions from the manager's cache on every question, so an extension that is
// deleted or changed is never called after the cache shows it, and keeps one endpoint
// (its TLS client) per extension generation.
type Registry struct {
	// Extensions reads the AddonExtensions (the manager's cache).
	Extensions client.Reader
	// Namespaces reads the metadata of namespaces, for namespace selectors.
	Namespaces client.Reader
	// Caller makes the calls.
	Caller *Caller

	mu        sync.Mutex
	endpoints map[string]endpointEntry
}

// endpointEntry is the endpoint of one generation of an AddonExtension.
type endpointEntry struct {
	uid        types.UID
	generation int64
	endpoint   *Endpoint
	err        error
}

// Target is an extension that applies to an add-on at a hook.
type Target struct {
	// Name is the AddonExtension's name.
	Name string
	// Endpoint is how to reach it; nil when NotReady says why not.
	Endpoint *Endpoint
	// Ignore is true for failurePolicy Ignore.
	Ignore bool
	// NotReady, when not empty, says why the extension cannot be called: it is not
	// Discovered at its generation, or its spec cannot be used.
	NotReady string
	// Key changes whenever the extension's answers may: its generation and the revision
	// its discovery reported. It is part of the render cache key.
	Key string
}

// For returns the extensions that serve hook for an add-on of kind in namespace, by
// name.
func (r *Registry) For(ctx context.Context, hook hooksv1alpha1.Hook, kind, namespace string) ([]Target, error) {
	if r == nil {
		return nil, nil
	}
	// Read-only: the cache's own objects, not copies (every hook point of every reconcile
	// asks).
	list := &addonsv1alpha1.AddonExtensionList{}
	if err := r.Extensions.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing AddonExtensions: %w", err)
	}
	var nsLabels labels.Set
	var targets []Target
	for i := range list.Items {
		ext := &list.Items[i]
		if !ext.DeletionTimestamp.IsZero() || !slices.Contains(ext.Spec.Hooks, hook) {
			continue
		}
		if len(ext.Spec.Selector.Kinds) > 0 && !slices.Contains(ext.Spec.Selector.Kinds, kind) {
			continue
		}
		target := Target{Name: ext.Name, Ignore: ext.Spec.FailurePolicy == addonsv1alpha1.FailurePolicyIgnore,
			Key: fmt.Sprintf("%s/%d/%s", ext.Name, ext.Generation, ext.Status.Revision)}
		if sel := ext.Spec.Selector.NamespaceSelector; sel != nil {
			selector, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil {
				target.NotReady = fmt.Sprintf("its spec.selector.namespaceSelector does not parse: %v", err)
				targets = append(targets, target)
				continue
			}
			if nsLabels == nil {
				if nsLabels, err = r.namespaceLabels(ctx, namespace); err != nil {
					return nil, err
				}
			}
			if !selector.Matches(nsLabels) {
				continue
			}
		}
		target.Endpoint, target.NotReady = r.endpoint(ext)
		targets = append(targets, target)
	}
	slices.SortFunc(targets, func(a, b Target) int { return strings.Compare(a.Name, b.Name) })
	return targets, nil
}

// namespaceLabels reads the labels of namespace.
func (r *Registry) namespaceLabels(ctx context.Context, namespace string) (labels.Set, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	return labels.Set(ns.GetLabels()), nil
}

// endpoint returns the endpoint of ext, or why it cannot be called.
func (r *Registry) endpoint(ext *addonsv1alpha1.AddonExtension) (*Endpoint, string) {
	if !Discovered(ext) {
		c := meta.FindStatusCondition(ext.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
		if c == nil || c.ObservedGeneration != ext.Generation {
			return nil, "it is not discovered yet"
		}
		return nil, fmt.Sprintf("it is not discovered (%s): %s", c.Reason, c.Message)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	entry, ok := r.endpoints[ext.Name]
	if !ok || entry.uid != ext.UID || entry.generation != ext.Generation {
		if entry.endpoint != nil {
			entry.endpoint.Close()
		}
		endpoint, err := NewEndpoint(ext)
		entry = endpointEntry{uid: ext.UID, generation: ext.Generation, endpoint: endpoint, err: err}
		if r.endpoints == nil {
			r.endpoints = map[string]endpointEntry{}
		}
		r.endpoints[ext.Name] = entry
	}
	if entry.err != nil {
		return nil, entry.err.Error()
	}
	return entry.endpoint, ""
}

// Discovered reports whether ext's discovery answered at its generation and serves every
// hook its spec names.
func Discovered(ext *addonsv1alpha1.AddonExtension) bool {
	c := meta.FindStatusCondition(ext.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == ext.Generation
}
