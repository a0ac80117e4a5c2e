package channels

import (
	"errors"
	"fmt"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Error is a resolve or render failure caused by the add-on's spec or the channel content,
// not by the cluster. Its Reason is the condition reason the engine reports; retrying
// cannot help until the spec or the channels change.
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

// errorf builds an Error with a formatted message.
func errorf(reason string, cause error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Err: cause}
}

// ReasonOf returns the condition reason carried by err, or ReasonRenderFailed when err
// is not a channels Error.
func ReasonOf(err error) string {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return addonsv1alpha1.ReasonRenderFailed
}
