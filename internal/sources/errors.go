package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The reasons a fetch or a pre-flight check fails. They have the values of the condition
// reasons of the same names in api/v1alpha1/conditions.go.
const (
	// ReasonOperatorMismatch: the bundle names another operator id.
	ReasonOperatorMismatch = "OperatorMismatch"
	// ReasonOperatorTooOld: the bundle needs a newer operator.
	ReasonOperatorTooOld = "OperatorTooOld"
	// ReasonKubernetesVersionUnsupported: the cluster's version is outside the bundle's range.
	ReasonKubernetesVersionUnsupported = "KubernetesVersionUnsupported"
	// ReasonFetchFailed: the source could not be reached or read (network, authentication,
	// a missing tag, branch or file, a refused redirect, a cache with no room left).
	ReasonFetchFailed = "FetchFailed"
	// ReasonVerificationFailed: a required signature is missing or does not verify.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonDigestMismatch: the content is not what its digest pin or its signature says.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonArchiveRefused: an archive or tree breaks the extraction rules (a path outside
	// the tree, a link, a device, a duplicate, a cap on bytes, files or depth), or a git
	// server sends more than the cap of a git fetch.
	ReasonArchiveRefused = "ArchiveRefused"
	// ReasonInvalidBundle: the bundle's labels or metadata are malformed, or it is not a
	// kaddons channels tree.
	ReasonInvalidBundle = "InvalidBundle"
	// ReasonInvalidSource: the request itself is wrong (an unknown kind, a malformed URL or
	// ref, an https source without a digest, credentials the kind cannot use or a URL that
	// carries them, an address the address filter refuses).
	ReasonInvalidSource = "InvalidSource"
)

// Error is a fetch, verification, extraction or pre-flight failure. Reason is one of the
// Reason* constants; Transient says whether retrying the same request may succeed (a
// network error, a server error) or whether the source, its content or its spec must
// change first.
type Error struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Message is the short, user-facing explanation.
	Message string
	// Err is the underlying cause, if any.
	Err error
	// Transient is true when a retry of the same request may succeed.
	Transient bool
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

// ReasonOf returns the Reason of the *Error in err's chain, or ReasonFetchFailed.
func ReasonOf(err error) string {
	var se *Error
	if errors.As(err, &se) {
		return se.Reason
	}
	return ReasonFetchFailed
}

// IsTransient reports whether err may go away when the same request is retried: an *Error
// marked Transient, or, for other errors, a network error or a deadline.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var se *Error
	if errors.As(err, &se) {
		return se.Transient
	}
	return isNetworkError(err)
}

// errorf builds a terminal Error.
func errorf(reason string, cause error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Err: cause}
}

// fetchError builds a FetchFailed Error, transient when cause is a network or server error;
// an address the address filter refused is InvalidSource: the source must change.
func fetchError(cause error, format string, args ...any) *Error {
	var ae *addressError
	if errors.As(cause, &ae) {
		return errorf(ReasonInvalidSource, cause, format, args...)
	}
	e := errorf(ReasonFetchFailed, cause, format, args...)
	e.Transient = isNetworkError(cause)
	return e
}

// isNetworkError reports whether err is a connection failure, a timeout, or an HTTP answer
// that says "try again" (408, 429, 5xx).
func isNetworkError(err error) bool {
	if err == nil {
		return false
	}
	var se *Error
	if errors.As(err, &se) {
		return se.Transient
	}
	var ae *addressError
	if errors.As(err, &ae) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return retryableStatus(te.StatusCode)
	}
	var he *httpStatusError
	if errors.As(err, &he) {
		return retryableStatus(he.code)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &oe) || errors.As(err, &de) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// httpStatusError is an HTTP answer other than 200.
type httpStatusError struct {
	code   int
	status string
}

func (e *httpStatusError) Error() string { return "the server answered " + e.status }
