package ssa

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestSealerTransform(t *testing.T) {
	sealer := NewSealer([]byte(strings.Repeat("k", sealKeyBytes)))
	configMaps := schema.GroupKind{Kind: "ConfigMap"}
	ofX := InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "a", Name: "x"})
	ofY := InstanceLabels("CoreDNS", types.NamespacedName{Namespace: "a", Name: "y"})
	// sealed returns a ConfigMap name of x's, sealed as kaddons' apply seals it, with
	// labels then set to labels.
	sealed := func(name string, labels map[string]string) *corev1.ConfigMap {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("a")
		u.SetName(name)
		u.SetLabels(ofX)
		sealer.sealObject(u)
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Labels: labels, UID: "u1",
			ResourceVersion: "7", Annotations: u.GetAnnotations(),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kaddons"}}},
			Data: map[string]string{"Corefile": strings.Repeat("x", 1<<20)}}
	}
	forged := sealed("other", ofX)
	forged.Annotations = sealed("coredns", ofX).Annotations
	for _, tc := range []struct {
		name     string
		sealer   *Sealer
		gk       schema.GroupKind
		in       *corev1.ConfigMap
		wantKept bool
	}{
		{name: "sealed by kaddons", sealer: sealer, gk: configMaps, in: sealed("coredns", ofX), wantKept: true},
		{name: "labels without a seal", sealer: sealer, gk: configMaps, in: func() *corev1.ConfigMap {
			c := sealed("coredns", ofX)
			c.Annotations = nil
			return c
		}()},
		{name: "relabelled to another add-on", sealer: sealer, gk: configMaps, in: sealed("coredns", ofY)},
		{name: "a seal copied onto another object", sealer: sealer, gk: configMaps, in: forged},
		{name: "a seal of another kind", sealer: sealer, gk: schema.GroupKind{Kind: "Secret"}, in: sealed("coredns", ofX)},
		{name: "a seal under another key", sealer: NewSealer([]byte(strings.Repeat("o", sealKeyBytes))), gk: configMaps,
			in: sealed("coredns", ofX)},
		{name: "no sealer trusts the labels", gk: configMaps, in: sealed("coredns", ofX), wantKept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.sealer.Transform(tc.gk)(tc.in.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			got, ok := out.(*corev1.ConfigMap)
			if !ok {
				t.Fatalf("the transform returned a %T, want the informer's own type", out)
			}
			if len(got.ManagedFields) != 0 {
				t.Error("managed fields are kept")
			}
			if tc.wantKept {
				if len(got.Data["Corefile"]) != 1<<20 || Unsealed(got) {
					t.Errorf("a sealed object lost its content or is marked unsealed: %d bytes, %v", len(got.Data["Corefile"]), got.Annotations)
				}
				return
			}
			if len(got.Data) != 0 || !Unsealed(got) {
				t.Errorf("an unsealed object is cached with %d data keys, marked unsealed %v", len(got.Data), Unsealed(got))
			}
			if got.Name != tc.in.Name || got.Namespace != tc.in.Namespace || got.UID != tc.in.UID ||
				got.ResourceVersion != tc.in.ResourceVersion || got.Labels[LabelName] != tc.in.Labels[LabelName] {
				t.Errorf("the stub lost the object's identity: %+v", got.ObjectMeta)
			}
		})
	}

	t.Run("an unstructured object becomes an unstructured stub", func(t *testing.T) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apps/v1")
		u.SetKind("Deployment")
		u.SetNamespace("a")
		u.SetName("coredns")
		u.SetLabels(ofX)
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
		out, _ := sealer.Transform(schema.GroupKind{Group: "apps", Kind: "Deployment"})(u)
		stub := out.(*unstructured.Unstructured)
		if _, found, _ := unstructured.NestedFieldNoCopy(stub.Object, "spec"); found || !Unsealed(stub) || stub.GetKind() != "Deployment" {
			t.Errorf("stub = %v", stub.Object)
		}
	})
	t.Run("a typed object keeps its type", func(t *testing.T) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "coredns", Labels: ofX}}
		out, _ := sealer.Transform(schema.GroupKind{Group: "apps", Kind: "Deployment"})(d)
		if _, ok := out.(*appsv1.Deployment); !ok {
			t.Errorf("the stub is a %T", out)
		}
	})
}

func TestLoadSealer(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	first, err := LoadSealer(context.Background(), c, "kaddons-system")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadSealer(context.Background(), c, "kaddons-system")
	if err != nil {
		t.Fatal(err)
	}
	gk := schema.GroupKind{Kind: "ConfigMap"}
	if first.seal(gk, "a", "b", nil) != again.seal(gk, "a", "b", nil) {
		t.Error("a second start made a new key instead of reading the Secret")
	}
	secret := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "kaddons-system", Name: SealKeySecret}, secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.Data["key"]) != sealKeyBytes {
		t.Errorf("the key is %d bytes, want %d", len(secret.Data["key"]), sealKeyBytes)
	}
	secret.Data["key"] = []byte("short")
	if err := c.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSealer(context.Background(), c, "kaddons-system"); err == nil || !strings.Contains(err.Error(), "no seal key") {
		t.Errorf("a short key: %v, want an error", err)
	}
}

func TestLoadSealerWithoutItsNamespace(t *testing.T) {
	// The fake client refuses a create in a namespace that does not exist only when told:
	// a client whose creates answer NotFound stands for the API server.
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewNotFound(corev1.Resource("namespaces"), "kaddons-system")
		},
	}).Build()
	sealer, err := LoadSealer(context.Background(), c, "kaddons-system")
	if !errors.Is(err, ErrSealKeyNotStored) || sealer == nil {
		t.Fatalf("LoadSealer = %v, %v; want a Sealer and ErrSealKeyNotStored", sealer, err)
	}
}
