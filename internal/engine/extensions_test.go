package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

const renderedPackage = `apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
spec:
  template:
    spec:
      containers:
      - name: coredns
        image: coredns:1.12.1
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
`

// TestCheckRendered covers what a Render extension may return: every object it was
// given, in its namespace, and added objects of the add-on's child kinds with no
// namespace.
func TestCheckRendered(t *testing.T) {
	r := &Reconciler{gvk: addonsv1alpha1.GroupVersion.WithKind("CoreDNS"), def: Definition{Children: []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("ConfigMap"), appsv1.SchemeGroupVersion.WithKind("Deployment"),
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
		corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	}}}
	for _, tc := range []struct {
		name    string
		change  func(objects []map[string]any) []map[string]any
		wantErr string
		want    int
	}{
		{name: "unchanged", change: func(o []map[string]any) []map[string]any { return o }, want: 3},
		{name: "reordered and changed", want: 3, change: func(o []map[string]any) []map[string]any {
			o[1]["metadata"].(map[string]any)["labels"] = map[string]any{"platform": "yes"}
			return []map[string]any{o[2], o[1], o[0]}
		}},
		{name: "adds a child kind without a namespace", want: 4, change: func(o []map[string]any) []map[string]any {
			return append(o, map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "extra"}})
		}},
		{name: "adds a kind the add-on may not have", wantErr: "adds Secret token, a kind the CoreDNS add-on may not have",
			change: func(o []map[string]any) []map[string]any {
				return append(o, map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "token"}})
			}},
		{name: "adds an object with a namespace", wantErr: "adds ServiceAccount default/extra, which names a namespace",
			change: func(o []map[string]any) []map[string]any {
				return append(o, map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
					"metadata": map[string]any{"name": "extra", "namespace": "default"}})
			}},
		{name: "moves an object", wantErr: `moves Deployment coredns from namespace "kube-system" to "default"`,
			change: func(o []map[string]any) []map[string]any {
				o[1]["metadata"].(map[string]any)["namespace"] = "default"
				return o
			}},
		{name: "gives a namespace to a cluster-scoped object", wantErr: `sets the namespace of ClusterRole system:coredns to "kube-system"`,
			change: func(o []map[string]any) []map[string]any {
				o[2]["metadata"].(map[string]any)["namespace"] = "kube-system"
				return o
			}},
		{name: "removes a namespace", wantErr: `removes the namespace "kube-system" of ConfigMap coredns`,
			change: func(o []map[string]any) []map[string]any {
				delete(o[0]["metadata"].(map[string]any), "namespace")
				return o
			}},
		{name: "drops an object", wantErr: "leaves out ConfigMap kube-system/coredns",
			change: func(o []map[string]any) []map[string]any { return o[1:] }},
		{name: "renames an object", wantErr: "adds Deployment kube-system/dns, which names a namespace",
			change: func(o []map[string]any) []map[string]any {
				o[1]["metadata"].(map[string]any)["name"] = "dns"
				return o
			}},
		{name: "holds an object twice", wantErr: "holds ConfigMap kube-system/coredns twice",
			change: func(o []map[string]any) []map[string]any { return append(o, o[0]) }},
		{name: "lacks a kind", wantErr: "object 3 of the answer lacks an apiVersion, a kind or a name",
			change: func(o []map[string]any) []map[string]any {
				return append(o, map[string]any{"metadata": map[string]any{"name": "x"}})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given, err := parseObjects(context.Background(), renderedPackage)
			if err != nil {
				t.Fatal(err)
			}
			maps := make([]map[string]any, 0, len(given.Items))
			for _, o := range given.Items {
				data, err := o.JSON()
				if err != nil {
					t.Fatal(err)
				}
				m := map[string]any{}
				if err := json.Unmarshal(data, &m); err != nil {
					t.Fatal(err)
				}
				maps = append(maps, m)
			}
			var returned []runtime.RawExtension
			for _, m := range tc.change(maps) {
				data, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				returned = append(returned, runtime.RawExtension{Raw: data})
			}
			items, err := r.checkRendered(given, returned)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != tc.want {
				t.Errorf("%d objects, want %d", len(items), tc.want)
			}
		})
	}
}
