package ssa

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// AdoptionError reports rendered objects that exist without kaddons' ownership.
type AdoptionError struct {
	Refs []addonsv1alpha1.ObjectReference
}

func (e *AdoptionError) Error() string {
	names := make([]string, 0, len(e.Refs))
	for _, ref := range e.Refs {
		names = append(names, ref.String())
	}
	return fmt.Sprintf("%s already exist%s and kaddons did not create %s; nothing was changed. "+
		"Set spec.adopt: IfUnmanaged to take %s over, or remove %s",
		strings.Join(names, ", "), map[bool]string{true: "s", false: ""}[len(names) == 1], them(len(names)),
		them(len(names)), them(len(names)))
}

// them is "it" or "them".
func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// ConflictError reports a rendered object that another add-on owns.
type ConflictError struct {
	Ref   addonsv1alpha1.ObjectReference
	Owner string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s already exists and belongs to %s; kaddons does not take it over", e.Ref, e.Owner)
}

// ModeError reports a child with an unknown addons.kaddons.dev/mode annotation.
type ModeError struct {
	Ref  addonsv1alpha1.ObjectReference
	Mode string
}

func (e *ModeError) Error() string {
	return fmt.Sprintf("%s has annotation %s=%q; use %q or %q", e.Ref, addonsv1alpha1.AnnotationMode, e.Mode,
		addonsv1alpha1.ModeEnsureExists, addonsv1alpha1.ModeIgnore)
}

// PruneError reports objects that left the manifests but could not be deleted.
type PruneError struct{ Err error }

func (e *PruneError) Error() string { return e.Err.Error() }

func (e *PruneError) Unwrap() error { return e.Err }

// WriteError reports a write (or a read it needs) that the API server refused.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }

func (e *WriteError) Unwrap() error { return e.Err }

// errorIs reports whether err wraps an error of type T.
func errorIs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// ObjectTooLargeError reports an object the API server or etcd refused for its size.
type ObjectTooLargeError struct {
	Ref addonsv1alpha1.ObjectReference
	Err error
}

func (e *ObjectTooLargeError) Error() string {
	return fmt.Sprintf("%s is too large for the API server (%v); make it smaller in the package or split it", e.Ref, e.Err)
}

func (e *ObjectTooLargeError) Unwrap() error { return e.Err }

// tooLarge reports whether err says that a request or object exceeds a size limit: the
// API server's 413, etcd's "request is too large" (a 500), or a validation error on the
// total size of an object's data (a ConfigMap or Secret over 1 MiB).
func tooLarge(err error) bool {
	if apierrors.IsRequestEntityTooLargeError(err) || strings.Contains(err.Error(), "request is too large") ||
		// The API server's etcd client refuses to send more than 2 MiB (gRPC's
		// ResourceExhausted), which the API server answers with a 500.
		strings.Contains(err.Error(), "trying to send message larger than max") {
		return true
	}
	var apiStatus apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &apiStatus) || apiStatus.Status().Details == nil {
		return false
	}
	for _, c := range apiStatus.Status().Details.Causes {
		// The whole object's size is reported on the empty path ("[]" once formatted); the
		// 256 KiB cap on all of an object's annotations on metadata.annotations.
		if c.Type == metav1.CauseType(field.ErrorTypeTooLong) && (c.Field == "" || c.Field == "[]" || c.Field == "metadata.annotations") {
			return true
		}
	}
	return false
}

// ImmutableError reports an apply refused because it changes immutable fields.
type ImmutableError struct {
	Ref    addonsv1alpha1.ObjectReference
	Fields string
	Err    error
}

func (e *ImmutableError) Error() string {
	return fmt.Sprintf("the new manifest changes %s, which cannot be changed in place; "+
		"set spec.upgrade.recreateOnImmutable to let kaddons delete and re-create %s", e.Fields, e.Ref)
}

func (e *ImmutableError) Unwrap() error { return e.Err }

// immutableFields returns the fields an Invalid error says are immutable, or "".
func immutableFields(err error) string {
	var apiStatus apierrors.APIStatus
	if err == nil || !apierrors.IsInvalid(err) || !errors.As(err, &apiStatus) {
		return ""
	}
	var fields []string
	if details := apiStatus.Status().Details; details != nil {
		for _, c := range details.Causes {
			if strings.Contains(c.Message, "immutable") {
				fields = append(fields, c.Field)
			}
		}
	}
	if len(fields) == 0 && strings.Contains(err.Error(), "field is immutable") {
		fields = append(fields, "an immutable field")
	}
	return strings.Join(fields, ", ")
}
