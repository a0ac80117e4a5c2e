package ssa

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestObjectTooLarge(t *testing.T) {
	ref := addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: "huge"}
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "the API server's 413", err: apierrors.NewRequestEntityTooLargeError("limit is 3145728"), want: true},
		{name: "etcd's limit", err: apierrors.NewInternalError(errors.New("etcdserver: request is too large")), want: true},
		{name: "a ConfigMap over 1 MiB", err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "huge",
			field.ErrorList{field.TooLong(field.NewPath(""), "", 1048576)}), want: true},
		{name: "the 2 MiB the API server sends etcd", err: apierrors.NewInternalError(errors.New(
			"rpc error: code = ResourceExhausted desc = trying to send message larger than max (2097540 vs. 2097152)")), want: true},
		{name: "annotations over 256 KiB", err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "huge",
			field.ErrorList{field.TooLong(field.NewPath("metadata", "annotations"), "", 262144)}), want: true},
		{name: "a name too long is another error", err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "huge",
			field.ErrorList{field.TooLong(field.NewPath("metadata", "name"), "", 253)})},
		{name: "a conflict", err: apierrors.NewConflict(gr, "huge", errors.New("changed"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tooLarge(tc.err); got != tc.want {
				t.Fatalf("tooLarge(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if !tc.want {
				return
			}
			err := fmt.Errorf("applying %s: %w", ref, &ObjectTooLargeError{Ref: ref, Err: tc.err})
			if !strings.Contains(err.Error(), ref.String()) || !errors.Is(err, tc.err) {
				t.Errorf("error %q does not name %s or does not wrap the API server's", err, ref)
			}
		})
	}
}
