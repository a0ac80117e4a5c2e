package ssa

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotations of the seal. The instance labels say which add-on owns a child, but anyone
// who may create a ConfigMap can write them: the seal says that kaddons wrote the object.
const (
	// AnnotationSeal holds the seal kaddons puts on every object it applies: an HMAC, under
	// a key only the operator reads, of the object's kind, namespace and name and of the
	// add-on its instance labels name. A copy on another object, or on the same object
	// relabelled to another add-on, does not verify.
	AnnotationSeal = "addons.kaddons.dev/seal"
	// AnnotationUnsealed marks, in the operator's memory only, a cached object that carries
	// kaddons' labels without a valid seal: the cache holds its metadata alone.
	AnnotationUnsealed = "addons.kaddons.dev/unsealed"
)

// SealKeySecret is the Secret, in the operator's namespace, that holds the seal key (key
// "key"). The operator creates it on its first start; replicas share it. Deleting it makes
// the next start create a new key: every child then looks unsealed until its next apply,
// which the plan makes at once for the children in an inventory (their cached stubs differ
// from what the package renders).
const SealKeySecret = "kaddons-seal"

// ErrSealKeyNotStored is what LoadSealer returns, with a usable Sealer, when the
// operator's namespace does not exist (a manager run outside the cluster): the key lives
// in memory only, and after a restart every child is sealed again by one apply.
var ErrSealKeyNotStored = errors.New("the seal key is kept in memory only")

// sealKeyBytes is the size of a generated seal key.
const sealKeyBytes = 32

// Sealer seals the objects kaddons writes and tells them from objects that only carry
// kaddons' labels. A nil Sealer seals nothing and trusts every label, as kaddons did
// before seals existed; tools that only render use it.
type Sealer struct {
	key []byte
}

// NewSealer returns a Sealer with key.
func NewSealer(key []byte) *Sealer {
	return &Sealer{key: append([]byte(nil), key...)}
}

// LoadSealer reads the seal key from the Secret SealKeySecret in namespace, creating the
// Secret with a new random key when there is none. c must read past any cache. When
// namespace does not exist it returns a Sealer with a key of its own and
// ErrSealKeyNotStored.
func LoadSealer(ctx context.Context, c client.Client, namespace string) (*Sealer, error) {
	key := types.NamespacedName{Namespace: namespace, Name: SealKeySecret}
	for range 3 {
		secret := &corev1.Secret{}
		err := c.Get(ctx, key, secret)
		switch {
		case err == nil && len(secret.Data["key"]) >= sealKeyBytes:
			return NewSealer(secret.Data["key"]), nil
		case err == nil:
			return nil, fmt.Errorf("secret %s holds no seal key of %d bytes or more under key", key, sealKeyBytes)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the seal key %s: %w", key, err)
		}
		generated := make([]byte, sealKeyBytes)
		if _, err := rand.Read(generated); err != nil {
			return nil, err
		}
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: SealKeySecret,
			Labels: map[string]string{"app.kubernetes.io/name": "kaddons"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"key": generated}}
		switch err := c.Create(ctx, secret); {
		case err == nil:
			return NewSealer(generated), nil
		case apierrors.IsNotFound(err):
			return NewSealer(generated), fmt.Errorf("%w: namespace %s does not exist", ErrSealKeyNotStored, namespace)
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating the seal key %s: %w", key, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("reading the seal key %s: it keeps changing", key)
}

// seal returns the seal of the object of gk at namespace/name whose instance labels are
// labels.
func (s *Sealer) seal(gk schema.GroupKind, namespace, name string, labels map[string]string) string {
	mac := hmac.New(sha256.New, s.key)
	for _, part := range []string{gk.Group, gk.Kind, namespace, name, labels[LabelKind], labels[LabelNamespace], labels[LabelName]} {
		// Each part is length-prefixed, so no two tuples give the same input.
		_, _ = fmt.Fprintf(mac, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// sealObject puts the seal on u, an object about to be applied.
func (s *Sealer) sealObject(u *unstructured.Unstructured) {
	if s == nil {
		return
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationSeal] = s.seal(u.GroupVersionKind().GroupKind(), u.GetNamespace(), u.GetName(), u.GetLabels())
	u.SetAnnotations(annotations)
}

// verify reports whether obj, of gk, carries a valid seal.
func (s *Sealer) verify(gk schema.GroupKind, obj metav1.Object) bool {
	got := obj.GetAnnotations()[AnnotationSeal]
	want := s.seal(gk, obj.GetNamespace(), obj.GetName(), obj.GetLabels())
	return got != "" && hmac.Equal([]byte(got), []byte(want))
}

// Unsealed reports whether a cached object carries kaddons' labels without a valid seal:
// the cache's transform marked it. A nil Sealer marks nothing.
func Unsealed(obj metav1.Object) bool {
	_, ok := obj.GetAnnotations()[AnnotationUnsealed]
	return ok
}

// Transform returns the cache transform of the children of kind gk. An object with a
// valid seal is cached as it is (managed fields stripped); any other object, whatever
// labels it carries, is cached as a stub: its kind, name, namespace, labels, UID, resource
// version, generation and deletion timestamp, marked unsealed. So an object kaddons did
// not write costs the operator a few hundred bytes, however large it is, and never passes
// for one of its children: the watches map it to no add-on unless that add-on's inventory
// lists it, and apply treats it as unmanaged unless the inventory lists it (an object
// kaddons wrote before seals existed, sealed again by its next apply).
func (s *Sealer) Transform(gk schema.GroupKind) toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, err := meta.Accessor(in)
		if err != nil {
			// A tombstone (DeletedFinalStateUnknown) or something else: as it is.
			return in, nil
		}
		obj.SetManagedFields(nil)
		if s == nil || s.verify(gk, obj) {
			if _, ok := obj.GetAnnotations()[AnnotationUnsealed]; ok {
				annotations := obj.GetAnnotations()
				delete(annotations, AnnotationUnsealed)
				obj.SetAnnotations(annotations)
			}
			return in, nil
		}
		return stubOf(in, obj), nil
	}
}

// stubOf returns an object of in's type that holds only obj's identifying metadata,
// marked unsealed.
func stubOf(in any, obj metav1.Object) any {
	var stub metav1.Object
	if u, ok := in.(*unstructured.Unstructured); ok {
		s := &unstructured.Unstructured{}
		s.SetGroupVersionKind(u.GroupVersionKind())
		stub = s
	} else {
		stub = reflect.New(reflect.TypeOf(in).Elem()).Interface().(metav1.Object)
		if typed, ok := in.(interface{ GetObjectKind() schema.ObjectKind }); ok {
			if r, ok := stub.(interface{ GetObjectKind() schema.ObjectKind }); ok {
				r.GetObjectKind().SetGroupVersionKind(typed.GetObjectKind().GroupVersionKind())
			}
		}
	}
	stub.SetNamespace(obj.GetNamespace())
	stub.SetName(obj.GetName())
	stub.SetUID(obj.GetUID())
	stub.SetResourceVersion(obj.GetResourceVersion())
	stub.SetGeneration(obj.GetGeneration())
	stub.SetDeletionTimestamp(obj.GetDeletionTimestamp())
	stub.SetLabels(obj.GetLabels())
	stub.SetAnnotations(map[string]string{AnnotationUnsealed: ""})
	return stub
}
