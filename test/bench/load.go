package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createConcurrency bounds the bench's parallel creates.
const createConcurrency = 8

// parallel runs fn for 0..n-1 on createConcurrency workers and returns the first error.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range createConcurrency {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return first
}

// addonRef names add-on i of a run.
func addonRef(i int) (namespace, name string) {
	return fmt.Sprintf("bench-%04d", i), fmt.Sprintf("dns-%04d", i)
}

// appliedTracker watches the add-ons of one kind and records when each first reports
// the applied version for its generation.
type appliedTracker struct {
	mu      sync.Mutex
	applied map[string]time.Time
	want    int
	done    chan struct{}
	stop    context.CancelFunc
}

// trackApplied starts watching im's add-ons; it is done when want of them are applied.
func trackApplied(ctx context.Context, c *cluster, im impl, want int) (*appliedTracker, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &appliedTracker{applied: map[string]time.Time{}, want: want, done: make(chan struct{}), stop: cancel}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.dynamic, 0)
	informer := factory.ForResource(im.gvr).Informer()
	observe := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && im.applied(u) {
			t.record(u.GetNamespace() + "/" + u.GetName())
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching %s: %w", im.gvr.Resource, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watching %s: the cache did not sync", im.gvr.Resource)
	}
	return t, nil
}

// record notes the first time key is seen applied.
func (t *appliedTracker) record(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.applied[key]; seen {
		return
	}
	t.applied[key] = time.Now()
	if len(t.applied) == t.want {
		close(t.done)
	}
}

// wait blocks until every add-on is applied.
func (t *appliedTracker) wait(ctx context.Context) error {
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		return fmt.Errorf("%d of %d add-ons applied: %w", len(t.applied), t.want, ctx.Err())
	}
}

// appliedAt returns when key was first seen applied.
func (t *appliedTracker) appliedAt(key string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied[key]
}

// createResult is the timing of one create phase.
type createResult struct {
	// wall runs from the first create until the last add-on is applied.
	wall time.Duration
	// created runs from the first create until the last one returned: the bench's share.
	created time.Duration
	// latencies run from each add-on's create to it being applied, sorted.
	latencies []time.Duration
}

// percentile returns the p-th percentile (0-100) of the sorted latencies.
func (r createResult) percentile(p int) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := (len(r.latencies)*p + 99) / 100
	return r.latencies[max(i-1, 0)]
}

// createAddons creates n namespaces with one add-on each and waits until all are applied.
func createAddons(ctx context.Context, c *cluster, im impl, n int) (createResult, error) {
	tracker, err := trackApplied(ctx, c, im, n)
	if err != nil {
		return createResult{}, err
	}
	defer tracker.stop()
	created := make([]time.Time, n)
	start := time.Now()
	err = parallel(ctx, n, func(ctx context.Context, i int) error {
		ns, name := addonRef(i)
		if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		if err := c.client.Create(ctx, im.newAddon(ns, name)); err != nil {
			return fmt.Errorf("creating %s %s/%s: %w", im.kind, ns, name, err)
		}
		created[i] = time.Now()
		return nil
	})
	if err != nil {
		return createResult{}, err
	}
	if err := tracker.wait(ctx); err != nil {
		return createResult{}, err
	}
	res := createResult{}
	var last time.Time
	for i := range n {
		ns, name := addonRef(i)
		at := tracker.appliedAt(ns + "/" + name)
		if at.After(last) {
			last = at
		}
		res.latencies = append(res.latencies, max(at.Sub(created[i]), 0))
	}
	sort.Slice(res.latencies, func(a, b int) bool { return res.latencies[a] < res.latencies[b] })
	res.wall = last.Sub(start)
	res.created = slices.MaxFunc(created, time.Time.Compare).Sub(start)
	return res, nil
}

// touchAddons changes an annotation on each of the n add-ons: a change that passes
// every operator's event filter but leaves the spec, and so the desired state, alone
// (for Flux, the annotation that requests a reconcile).
func touchAddons(ctx context.Context, c *cluster, im impl, n int, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, im.touchKey(), value)
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		ns, name := addonRef(i)
		u := im.newAddon(ns, name)
		if err := c.client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			return fmt.Errorf("touching %s %s/%s: %w", im.kind, ns, name, err)
		}
		return nil
	})
}

// Unrelated objects are spread over this many namespaces.
const unrelatedNamespaces = 10

// createUnrelated creates n objects that no operator manages, half Deployments and
// half ConfigMaps, carrying none of the operators' labels.
func createUnrelated(ctx context.Context, c *cluster, n int) error {
	for i := range unrelatedNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%d", i)}}
		if err := c.client.Create(ctx, ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		meta := metav1.ObjectMeta{
			Namespace: fmt.Sprintf("unrelated-%d", i%unrelatedNamespaces),
			Name:      fmt.Sprintf("unrelated-%05d", i),
			Labels:    map[string]string{"unrelated": "true"},
		}
		var obj client.Object
		if i%2 == 0 {
			obj = unrelatedDeployment(meta)
		} else {
			obj = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"config": fmt.Sprintf("value-%d", i)}}
		}
		if err := c.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating unrelated object %s/%s: %w", meta.Namespace, meta.Name, err)
		}
		return nil
	})
}

// unrelatedDeployment is a small Deployment of about the size of a typical workload.
func unrelatedDeployment(meta metav1.ObjectMeta) *appsv1.Deployment {
	labels := map[string]string{"app": meta.Name}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "app",
					Image: "registry.k8s.io/pause:3.10",
					Env:   []corev1.EnvVar{{Name: "INSTANCE", Value: meta.Name}},
				}}},
			},
		},
	}
}
