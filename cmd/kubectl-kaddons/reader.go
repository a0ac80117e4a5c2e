package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// memoryReader is a client.Reader over objects held in memory: the input's add-ons and
// what they rendered to, so that an add-on following another one in the same input (a
// NodeLocalDNS following a CoreDNS) reads it as the operator would read it from its cache.
// Everything else is not found.
type memoryReader struct {
	mu      sync.RWMutex
	objects map[memoryKey]map[string]any
}

type memoryKey struct {
	gk              schema.GroupKind
	namespace, name string
}

func newMemoryReader() *memoryReader {
	return &memoryReader{objects: map[memoryKey]map[string]any{}}
}

// add stores a copy of obj.
func (m *memoryReader) add(obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(content)}
	u.SetGroupVersionKind(gvk)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[memoryKey{gk: gvk.GroupKind(), namespace: obj.GetNamespace(), name: obj.GetName()}] = u.Object
	return nil
}

// Get implements client.Reader.
func (m *memoryReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return err
	}
	m.mu.RLock()
	content, ok := m.objects[memoryKey{gk: gvk.GroupKind(), namespace: key.Namespace, name: key.Name}]
	m.mu.RUnlock()
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, key.Name)
	}
	return into(content, gvk, obj)
}

// List implements client.Reader for a namespace and a label selector.
func (m *memoryReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	listOpts := (&client.ListOptions{}).ApplyOptions(opts)
	gvk, err := apiutil.GVKForObject(list, scheme)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	m.mu.RLock()
	var items []runtime.Object
	for key, content := range m.objects {
		if key.gk != gvk.GroupKind() || (listOpts.Namespace != "" && key.namespace != listOpts.Namespace) {
			continue
		}
		u := &unstructured.Unstructured{Object: content}
		if listOpts.LabelSelector != nil && !listOpts.LabelSelector.Matches(labelSet(u.GetLabels())) {
			continue
		}
		var item client.Object = &unstructured.Unstructured{}
		if _, isUnstructured := list.(*unstructured.UnstructuredList); !isUnstructured {
			typed, err := scheme.New(gvk)
			if err != nil {
				m.mu.RUnlock()
				return err
			}
			item = typed.(client.Object)
		}
		if err := into(content, gvk, item); err != nil {
			m.mu.RUnlock()
			return err
		}
		items = append(items, item)
	}
	m.mu.RUnlock()
	return meta.SetList(list, items)
}

type labelSet map[string]string

func (l labelSet) Has(key string) bool   { _, ok := l[key]; return ok }
func (l labelSet) Get(key string) string { return l[key] }
func (l labelSet) Lookup(key string) (string, bool) {
	v, ok := l[key]
	return v, ok
}

// into copies content, an object of kind gvk, into obj.
func into(content map[string]any, gvk schema.GroupVersionKind, obj client.Object) error {
	content = runtime.DeepCopyJSON(content)
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetUnstructuredContent(content)
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, obj); err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// layeredReader reads the add-on kinds from the input first and the cluster second, and
// every other kind from the cluster first and the input second: the cluster knows what it
// allocated (a Service's cluster IP), the input says what the add-ons will be.
type layeredReader struct {
	input, cluster client.Reader
}

func (l layeredReader) order(obj runtime.Object) []client.Reader {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err == nil && gvk.Group == addonGroup {
		return []client.Reader{l.input, l.cluster}
	}
	return []client.Reader{l.cluster, l.input}
}

// Get implements client.Reader.
func (l layeredReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	var err error
	for _, r := range l.order(obj) {
		if err = r.Get(ctx, key, obj, opts...); !apierrors.IsNotFound(err) {
			return err
		}
	}
	return err
}

// List implements client.Reader from the first reader that holds any item.
func (l layeredReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	for _, r := range l.order(list) {
		if err := r.List(ctx, list, opts...); err != nil && !meta.IsNoMatchError(err) {
			return err
		}
		if meta.LenList(list) > 0 {
			return nil
		}
	}
	return nil
}

// managedReader reads like the operator's cache: only objects that carry kaddons'
// managed-by label exist, apart from the add-ons themselves.
type managedReader struct {
	client.Reader
}

// Get implements client.Reader.
func (r managedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return err
	}
	if gvk.Group != addonGroup && obj.GetLabels()[ssa.LabelManagedBy] != ssa.ManagedByValue {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, key.Name)
	}
	return nil
}

// List implements client.Reader with the managed-by label added to the selector.
func (r managedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, scheme)
	if err != nil {
		return err
	}
	if gvk.Group != addonGroup {
		opts = append(opts, client.MatchingLabels{ssa.LabelManagedBy: ssa.ManagedByValue})
	}
	return r.Reader.List(ctx, list, opts...)
}

// errReadOnly is what a write through readOnlyClient returns: rendering never writes.
var errReadOnly = errors.New("kubectl kaddons does not write to the cluster while rendering")

// readOnlyClient is the client.Client the engine is built with for rendering: it reads
// through its Reader and refuses every write.
type readOnlyClient struct {
	client.Reader
	mapper meta.RESTMapper
}

var _ client.Client = readOnlyClient{}

func (readOnlyClient) Create(context.Context, client.Object, ...client.CreateOption) error {
	return errReadOnly
}

func (readOnlyClient) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	return errReadOnly
}

func (readOnlyClient) Update(context.Context, client.Object, ...client.UpdateOption) error {
	return errReadOnly
}

func (readOnlyClient) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errReadOnly
}

func (readOnlyClient) Apply(context.Context, runtime.ApplyConfiguration, ...client.ApplyOption) error {
	return errReadOnly
}

func (readOnlyClient) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errReadOnly
}

func (readOnlyClient) Status() client.SubResourceWriter { return readOnlySubResource{} }

func (readOnlyClient) SubResource(string) client.SubResourceClient { return readOnlySubResource{} }

func (readOnlyClient) Scheme() *runtime.Scheme { return scheme }

func (c readOnlyClient) RESTMapper() meta.RESTMapper { return c.mapper }

func (c readOnlyClient) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, scheme)
}

func (c readOnlyClient) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return false, err
	}
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// readOnlySubResource refuses every subresource request.
type readOnlySubResource struct{}

func (readOnlySubResource) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	return errReadOnly
}

func (readOnlySubResource) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return errReadOnly
}

func (readOnlySubResource) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return errReadOnly
}

func (readOnlySubResource) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errReadOnly
}

func (readOnlySubResource) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return errReadOnly
}
