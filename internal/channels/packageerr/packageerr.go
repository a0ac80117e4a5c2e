// Package packageerr holds the error of a package that cannot be rendered because of the
// package or the add-on's spec, not the cluster: the one type the channels catalog and
// its Helm chart renderer (which the catalog imports) both return, and the engine maps to
// a condition reason.
package packageerr

import (
	"errors"
	"fmt"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Error is a resolve or render failure caused by the add-on's spec or the package, not
// by the cluster. Its Reason is the condition reason the engine reports; retrying cannot
// help until the spec or the package changes.
type Error struct {
	// Reason is one of the Reason* constants of the add-on API.
	Reason string
	// Message is the short, user-facing explanation.
	Message string
	// Err is the underlying cause, if any.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the condition reason carried by err, or ReasonRenderFailed when err
// is not an Error.
func ReasonOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return addonsv1alpha1.ReasonRenderFailed
}
