package engine

import (
	"reflect"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"
)

func TestObjectHealth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		object  string
		ready   bool
		message string
	}{
		{
			name: "available Deployment",
			object: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: n, generation: 2}
spec: {replicas: 2}
status:
  observedGeneration: 2
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}`,
			ready: true,
		},
		{
			name: "Deployment short of replicas",
			object: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: n, generation: 2}
spec: {replicas: 2}
status:
  observedGeneration: 2
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 1
  availableReplicas: 1
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}`,
			message: "Available: 1/2",
		},
		{
			name: "Deployment not yet observed",
			object: `apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: n, generation: 3}
spec: {replicas: 2}
status: {observedGeneration: 2}`,
			message: "Deployment generation is 3, but latest observed generation is 2",
		},
		{
			name: "DaemonSet missing a pod",
			object: `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: n, generation: 1}
status: {observedGeneration: 1, desiredNumberScheduled: 3, currentNumberScheduled: 3, updatedNumberScheduled: 3, numberAvailable: 2, numberReady: 2}`,
			message: "Available: 2/3",
		},
		{
			name: "completed Job",
			object: `apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: n, generation: 1}
spec: {completions: 1}
status:
  succeeded: 1
  conditions:
  - {type: Complete, status: "True"}`,
			ready: true,
		},
		{
			name: "established CRD",
			object: `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com, generation: 1}
status:
  conditions:
  - {type: Established, status: "True"}
  - {type: NamesAccepted, status: "True"}`,
			ready: true,
		},
		{
			name: "CRD not established",
			object: `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com, generation: 1}
status:
  conditions:
  - {type: Established, status: "False"}`,
		},
		{
			name: "available APIService",
			object: `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
status:
  conditions:
  - {type: Available, status: "True", reason: Passed}`,
			ready: true,
		},
		{
			name: "unreachable APIService",
			object: `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
status:
  conditions:
  - {type: Available, status: "False", reason: FailedDiscoveryCheck, message: "no response from https://10.0.0.1:443"}`,
			message: "Available=False (FailedDiscoveryCheck: no response from https://10.0.0.1:443)",
		},
		{
			name:    "APIService before its first check",
			object:  "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.k8s.io}",
			message: "Available not reported yet",
		},
		{
			name: "StatefulSet rolled out",
			object: `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: n, generation: 1}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, readyReplicas: 2, currentReplicas: 2, updatedReplicas: 2, availableReplicas: 2}`,
			ready: true,
		},
		{
			name: "PodDisruptionBudget not observed",
			object: `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: p, namespace: n, generation: 1}
spec: {minAvailable: 1}`,
			message: "generation 1 not yet observed by the disruption controller",
		},
		{
			name: "PodDisruptionBudget short of healthy pods",
			object: `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: p, namespace: n, generation: 1}
spec: {minAvailable: 2}
status: {observedGeneration: 1, currentHealthy: 1, desiredHealthy: 2}`,
			message: "Healthy: 1/2",
		},
		{
			name: "healthy PodDisruptionBudget",
			object: `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: p, namespace: n, generation: 1}
spec: {minAvailable: 1}
status: {observedGeneration: 1, currentHealthy: 2, desiredHealthy: 1}`,
			ready: true,
		},
		{
			name:   "ConfigMap",
			object: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: n}",
			ready:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := yaml.YAMLToJSON([]byte(tc.object))
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(data); err != nil {
				t.Fatal(err)
			}
			ready, msg, err := objectHealth(u)
			if err != nil {
				t.Fatal(err)
			}
			if ready != tc.ready {
				t.Fatalf("ready = %v (%q), want %v", ready, msg, tc.ready)
			}
			if !strings.Contains(msg, tc.message) {
				t.Errorf("message %q does not contain %q", msg, tc.message)
			}
		})
	}
}

// TestHealthPassesTheEchoOfAWriteItDidNotSee: when the cache has not caught up with a
// child the apply just wrote, health judges the older copy, so the event of that write
// must reconcile once it comes: after a re-list the informer may send nothing else. When
// the cache has caught up, the event is an echo and is dropped.
func TestHealthPassesTheEchoOfAWriteItDidNotSee(t *testing.T) {
	ref := addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "coredns"}
	for _, tc := range []struct {
		name string
		// wrote is the resource version the write left; the cache holds 999, the fake
		// client's first.
		wrote       string
		wantPassed  bool
		wantMessage string
	}{
		{name: "cache caught up: the event is an echo", wrote: "999", wantMessage: "Deployment ns/coredns: Replicas: 0/1"},
		{name: "cache behind: the event reconciles", wrote: "1000", wantPassed: true,
			wantMessage: "Deployment ns/coredns: " + msgCacheBehind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coredns", Generation: 1}}
			addon.Status.Inventory = addonsv1alpha1.NewInventory([]addonsv1alpha1.ObjectReference{ref})
			cached := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coredns", Generation: 3}}
			r, _ := testReconciler(t, Options{}, addon, cached)
			// The apply's write ended and left resource version tc.wrote.
			wrote := cached.DeepCopy()
			wrote.ResourceVersion = tc.wrote
			r.echoes.Begin(ref.GroupVersionKind().GroupKind(), wrote)
			r.echoes.End(ref.GroupVersionKind().GroupKind(), wrote, nil)

			st := &reconcileState{addon: addon, applied: ssa.Result{Applied: map[addonsv1alpha1.ObjectReference]ssa.Written{ref: {Generation: 3, ResourceVersion: tc.wrote}}}}
			out := r.health(t.Context(), st)
			if !strings.HasPrefix(out.message, tc.wantMessage) {
				t.Fatalf("health says %q, want it to start with %q", out.message, tc.wantMessage)
			}
			passed := false
			r.echoes.sort(ref.GroupVersionKind().GroupKind(), wrote, func() { passed = true })
			if passed != tc.wantPassed {
				t.Fatalf("the event of the write at resource version %s passed: %v, want %v", tc.wrote, passed, tc.wantPassed)
			}
		})
	}
}

// TestStatuslessHealthMatchesKstatus: for every built-in kind whose Go type has no status,
// statuslessHealth says what kstatus (through objectHealth) says of the same object, live
// or being deleted; the kinds that have a status go to kstatus.
func TestStatuslessHealthMatchesKstatus(t *testing.T) {
	seen := map[string]bool{}
	for gvk := range clientgoscheme.Scheme.AllKnownTypes() {
		typed, ok := newStatusless(gvk)
		if !ok {
			continue
		}
		seen[gvk.Kind] = true
		for _, deleting := range []bool{false, true} {
			obj := typed.DeepCopyObject().(client.Object)
			obj.SetName("x")
			obj.SetNamespace("n")
			obj.SetGeneration(3)
			if deleting {
				now := metav1.Now()
				obj.SetDeletionTimestamp(&now)
				obj.SetFinalizers([]string{"example.com/hold"})
			}
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatalf("%s: %v", gvk, err)
			}
			u := &unstructured.Unstructured{Object: content}
			u.SetGroupVersionKind(gvk)
			wantReady, wantMsg, err := objectHealth(u)
			if err != nil {
				t.Fatalf("%s: kstatus: %v", gvk, err)
			}
			ready, msg := statuslessHealth(obj)
			if ready != wantReady || msg != wantMsg {
				t.Errorf("%s (being deleted: %v): statuslessHealth = %v %q, kstatus = %v %q", gvk, deleting, ready, msg, wantReady, wantMsg)
			}
		}
	}
	for _, kind := range []string{"ConfigMap", "Secret", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if !seen[kind] {
			t.Errorf("%s is not read as a kind without status", kind)
		}
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Service"}, {Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, {Version: "v1", Kind: "Namespace"},
		{Group: "addons.kaddons.dev", Version: "v1alpha1", Kind: "CoreDNS"},
	} {
		if _, ok := newStatusless(gvk); ok {
			t.Errorf("%s is read as a kind without status", gvk)
		}
	}
}

// TestCheckHealth: the children's health, read from a client, whether their kind has a
// status or not.
func TestCheckHealth(t *testing.T) {
	ref := func(group, kind, name string) addonsv1alpha1.ObjectReference {
		return addonsv1alpha1.ObjectReference{Group: group, Version: "v1", Kind: kind, Namespace: "n", Name: name}
	}
	terminating := metav1.Now()
	objects := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "n"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "going", Namespace: "n",
			DeletionTimestamp: &terminating, Finalizers: []string{"example.com/hold"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "n", Generation: 1}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "n", Generation: 1},
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1}},
	}
	c := fake.NewClientBuilder().WithObjects(objects...).Build()
	cases := []struct {
		name     string
		refs     []addonsv1alpha1.ObjectReference
		applied  map[addonsv1alpha1.ObjectReference]ssa.Written
		notReady []string
	}{
		{name: "a live ConfigMap is ready", refs: []addonsv1alpha1.ObjectReference{ref("", "ConfigMap", "live")}},
		{name: "a ConfigMap being deleted is not",
			refs:     []addonsv1alpha1.ObjectReference{ref("", "ConfigMap", "going")},
			notReady: []string{"ConfigMap n/going: Resource scheduled for deletion"}},
		{name: "a missing ServiceAccount",
			refs:     []addonsv1alpha1.ObjectReference{ref("", "ServiceAccount", "none")},
			notReady: []string{"ServiceAccount n/none: not found"}},
		{name: "a cached ServiceAccount older than the write",
			refs:     []addonsv1alpha1.ObjectReference{ref("", "ServiceAccount", "old")},
			applied:  map[addonsv1alpha1.ObjectReference]ssa.Written{ref("", "ServiceAccount", "old"): {Generation: 1, ResourceVersion: "1000"}},
			notReady: []string{"ServiceAccount n/old: " + msgCacheBehind}},
		{name: "a cached ConfigMap at the write's resource version is judged",
			refs:    []addonsv1alpha1.ObjectReference{ref("", "ConfigMap", "live")},
			applied: map[addonsv1alpha1.ObjectReference]ssa.Written{ref("", "ConfigMap", "live"): {ResourceVersion: "999"}}},
		{name: "a Deployment short of replicas goes through kstatus",
			refs:     []addonsv1alpha1.ObjectReference{ref("", "ConfigMap", "live"), ref("apps", "Deployment", "d")},
			notReady: []string{"Deployment n/d: Available: 1/2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := checkHealth(t.Context(), c, tc.refs, tc.applied)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h.notReady, tc.notReady) {
				t.Fatalf("not ready = %q, want %q", h.notReady, tc.notReady)
			}
		})
	}
}
