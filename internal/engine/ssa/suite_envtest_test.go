package ssa_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The envtest tests of this package (the *_envtest_test.go files) call Manager.Apply and
// DeleteInStages with real objects against one real kube-apiserver and etcd, one
// namespace per test. The Manager reads through a cache shaped like the operator's: it
// holds only objects with kaddons' managed-by label, and those without a valid seal as
// stubs. The pure unit tests of the package run in the same binary.
var (
	cfg *rest.Config
	// k8sClient reads and writes straight to the API server.
	k8sClient client.Client
	// objectCache is the Manager's label-filtered cache.
	objectCache cache.Cache
	// sealer seals what the tests' Managers write.
	sealer = ssa.NewSealer([]byte("the ssa envtest suite's seal key, 32+ bytes"))
)

// testKind is the kind of add-on the tests' objects belong to.
const testKind = "CoreDNS"

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	enginetest.SetLogger()
	env, c, err := enginetest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	cfg = c
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	scheme := enginetest.Scheme()
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating client: %v\n", err)
		return 1
	}
	// As engine.CacheOptions: only kaddons' objects, unsealed ones as stubs.
	managed := labels.SelectorFromSet(labels.Set{ssa.LabelManagedBy: ssa.ManagedByValue})
	byObject := map[client.Object]cache.ByObject{}
	for _, gvk := range childKinds {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		byObject[u] = cache.ByObject{Label: managed, Transform: sealer.Transform(gvk.GroupKind())}
	}
	objectCache, err = cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject, DefaultLabelSelector: managed,
		DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating the cache: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := objectCache.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "cache: %v\n", err)
		}
	}()
	return m.Run()
}

// childKinds are the kinds the tests apply; the cache watches each, sealed.
var childKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("Namespace"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	rbacv1.SchemeGroupVersion.WithKind("Role"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"},
}

// newManager returns a Manager for the operator's identity, as the engine builds it.
func newManager() *ssa.Manager {
	return &ssa.Manager{Cache: objectCache, Client: k8sClient, Reader: k8sClient, As: "the operator", Sealer: sealer}
}

// owner is the add-on coredns in ns, which the tests' objects belong to.
func owner(ns string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: "coredns"}
}

// request is an Apply of objects for the add-on coredns in ns.
func request(ns string, objects []*unstructured.Unstructured) ssa.Request {
	return ssa.Request{Objects: objects, Kind: testKind, Owner: owner(ns), InputsChanged: true}
}

// variant changes what coreDNSObjects renders, as the test-only packages of
// controllers/testdata/packages did.
type variant struct {
	// noPDB leaves the PodDisruptionBudget out.
	noPDB bool
	// brokenService gives the Service a protocol the API server rejects.
	brokenService bool
	// newSelector changes the Deployment's selector, an immutable field.
	newSelector bool
}

// coreDNSObjects returns the 7 objects of a CoreDNS package in ns (ServiceAccount,
// ConfigMap, Service, ClusterRole, ClusterRoleBinding, Deployment, PodDisruptionBudget),
// carrying the instance labels of the add-on coredns in ns as the engine renders them.
// The cluster-scoped ones are named after ns.
func coreDNSObjects(t *testing.T, ns string, v variant) []*unstructured.Unstructured {
	t.Helper()
	protocol, selector := "UDP", "app.kubernetes.io/name: coredns"
	if v.brokenService {
		protocol = "QUIC"
	}
	if v.newSelector {
		selector += "\n      k8s-app: kube-dns"
	}
	docs := []string{
		`{apiVersion: v1, kind: ServiceAccount, metadata: {name: coredns, namespace: NS}}`,
		`{apiVersion: v1, kind: ConfigMap, metadata: {name: coredns, namespace: NS}, data: {Corefile: ".:53 {\n    forward . /etc/resolv.conf\n}\n"}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: kube-dns, namespace: NS},
		  spec: {selector: {app.kubernetes.io/name: coredns}, ports: [{name: dns, port: 53, protocol: PROTOCOL}]}}`,
		`{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: "system:coredns-NS"},
		  rules: [{apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}]}`,
		`{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, metadata: {name: "system:coredns-NS"},
		  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns-NS"},
		  subjects: [{kind: ServiceAccount, name: coredns, namespace: NS}]}`,
		`apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: NS}
spec:
  replicas: 2
  selector:
    matchLabels:
      SELECTOR
  template:
    metadata:
      labels: {app.kubernetes.io/name: coredns, k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      containers: [{name: coredns, image: "registry.k8s.io/coredns/coredns:v1.12.1"}]`,
		`{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: coredns, namespace: NS},
		  spec: {minAvailable: 1, selector: {matchLabels: {app.kubernetes.io/name: coredns}}}}`,
	}
	if v.noPDB {
		docs = docs[:len(docs)-1]
	}
	r := strings.NewReplacer("NS", ns, "PROTOCOL", protocol, "SELECTOR", selector)
	objects := make([]*unstructured.Unstructured, 0, len(docs))
	for _, doc := range docs {
		objects = append(objects, object(t, ns, r.Replace(doc)))
	}
	return objects
}

// object decodes one YAML object and gives it the instance labels of the add-on coredns
// in ns.
func object(t *testing.T, ns, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	set := u.GetLabels()
	if set == nil {
		set = map[string]string{}
	}
	for k, v := range ssa.InstanceLabels(testKind, owner(ns)) {
		set[k] = v
	}
	u.SetLabels(set)
	return u
}

// refsOf returns the references of objects.
func refsOf(objects []*unstructured.Unstructured) []addonsv1alpha1.ObjectReference {
	refs := make([]addonsv1alpha1.ObjectReference, 0, len(objects))
	for _, o := range objects {
		refs = append(refs, ssa.RefOf(o))
	}
	return refs
}

// liveObject reads one object by reference straight from the API server.
func liveObject(ref addonsv1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GroupVersionKind())
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, u)
	return u, err
}

// withoutKind returns refs without those of kind.
func withoutKind(refs []addonsv1alpha1.ObjectReference, kind string) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, ref := range refs {
		if ref.Kind != kind {
			out = append(out, ref)
		}
	}
	return out
}

// applied applies objects as the add-on coredns in ns, with previous as the last
// inventory, and expects it to succeed.
func applied(t *testing.T, ns string, objects []*unstructured.Unstructured, previous []addonsv1alpha1.ObjectReference) ssa.Result {
	t.Helper()
	req := request(ns, objects)
	req.Previous = previous
	res, err := newManager().Apply(context.Background(), req)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return res
}

// relabelled gives objects the instance labels of the add-on coredns in ns: the add-on
// there renders them into another namespace (spec.targetNamespace).
func relabelled(t *testing.T, objects []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	t.Helper()
	for _, o := range objects {
		set := o.GetLabels()
		for k, v := range ssa.InstanceLabels(testKind, owner(ns)) {
			set[k] = v
		}
		o.SetLabels(set)
	}
	return objects
}
