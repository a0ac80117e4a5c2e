package patches

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

// fuzzManifest is a small package: a typed kind with a strategic-merge schema, a
// cluster-scoped RBAC object and a kind without a Go schema (JSON merge patch).
const fuzzManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
spec:
  replicas: 2
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      containers:
      - name: coredns
        image: registry.k8s.io/coredns/coredns:v1.12.1
        args: [-conf, /etc/coredns/Corefile]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints]
  verbs: [list, watch]
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: kube-system
spec:
  size: 1
`

// FuzzApplyPatches feeds arbitrary spec.patches entries to Apply. A patch is either
// refused with a condition reason (InvalidPatch or PatchTargetNotFound) and leaves the
// objects as they were, or applied: the same objects come out, in the same order, with
// the same kinds, names and namespaces (a patch never renames, moves, adds or removes an
// object), and applying it again to a fresh render gives the same result.
func FuzzApplyPatches(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":3}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"other"},"spec":{"replicas":3}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"template":{"spec":{"containers":[{"name":"coredns","image":"x"}]}}}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":"three"}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system"},"spec":{"template":{"spec":{"hostNetwork":true}}}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:coredns"},"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":null,"extra":{"a":[1,2]}}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nope"}}`,
		`{"kind":"Deployment","metadata":{"name":"coredns"}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","$patch":"delete"}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"template":{"spec":{"containers":[{"$patch":"replace"}]}}}}`,
		`[]`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(seed))
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, patch []byte) {
		apply := func() (*manifest.Objects, *manifest.Objects, error) {
			objects, err := manifest.ParseObjects(ctx, fuzzManifest)
			if err != nil {
				t.Fatalf("parsing the fuzz package: %v", err)
			}
			before, err := manifest.ParseObjects(ctx, fuzzManifest)
			if err != nil {
				t.Fatal(err)
			}
			return objects, before, Apply([]*runtime.RawExtension{{Raw: patch}}, objects)
		}
		objects, before, err := apply()
		if err != nil {
			var ce *channels.Error
			if !errors.As(err, &ce) {
				t.Fatalf("refusal %v carries no condition reason", err)
			}
			if ce.Reason != addonsv1alpha1.ReasonInvalidPatch && ce.Reason != addonsv1alpha1.ReasonPatchTargetNotFound {
				t.Fatalf("refusal reason %s, want InvalidPatch or PatchTargetNotFound: %v", ce.Reason, err)
			}
			if diff := cmp.Diff(yamlOf(t, before), yamlOf(t, objects)); diff != "" {
				t.Fatalf("a refused patch changed the objects (-before +after):\n%s", diff)
			}
			return
		}
		if len(objects.Items) != len(before.Items) {
			t.Fatalf("%d objects after the patch, %d before", len(objects.Items), len(before.Items))
		}
		for i, o := range objects.Items {
			b := before.Items[i]
			if o.GroupVersionKind() != b.GroupVersionKind() || o.GetName() != b.GetName() || o.GetNamespace() != b.GetNamespace() {
				t.Fatalf("object %d became %s %s/%s, was %s %s/%s", i, o.GroupVersionKind(), o.GetNamespace(), o.GetName(),
					b.GroupVersionKind(), b.GetNamespace(), b.GetName())
			}
		}
		again, _, err := apply()
		if err != nil {
			t.Fatalf("the same patch failed the second time: %v", err)
		}
		if diff := cmp.Diff(yamlOf(t, objects), yamlOf(t, again)); diff != "" {
			t.Fatalf("the same patch gave another result (-first +second):\n%s", diff)
		}
	})
}

// yamlOf serialises objects for comparison.
func yamlOf(t *testing.T, objects *manifest.Objects) []string {
	t.Helper()
	out := make([]string, 0, len(objects.Items))
	for _, o := range objects.Items {
		data, err := o.UnstructuredObject().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(data))
	}
	return out
}
