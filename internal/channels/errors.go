package channels

import (
	"fmt"

	"github.com/kaddons/kaddons/internal/channels/packageerr"
)

// Error is a resolve or render failure caused by the add-on's spec or the channel content,
// not by the cluster (packageerr.Error, which the Helm chart renderer returns too). Its
// Reason is the condition reason the engine reports; retrying cannot help until the spec
// or the channels change.
type Error = packageerr.Error

// errorf builds an Error with a formatted message.
func errorf(reason string, cause error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Err: cause}
}

// ReasonOf returns the condition reason carried by err, or ReasonRenderFailed when err
// is not a channels Error.
func ReasonOf(err error) string { return packageerr.ReasonOf(err) }
