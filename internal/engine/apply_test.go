package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// TestApplyOutcome checks the failure table: every typed error of the apply library,
// wrapped as the library wraps it, maps to its condition class and reason, terminal or
// retried.
func TestApplyOutcome(t *testing.T) {
	ref := addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "a", Name: "coredns"}
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "coredns", errors.New("no"))
	for _, tc := range []struct {
		name       string
		err        error
		class      conditionClass
		reason     string
		terminal   bool
		retryAfter time.Duration
	}{
		{"another add-on owns it", &ssa.ConflictError{Ref: ref, Owner: "coredns a/other"},
			classStalled, addonsv1alpha1.ReasonOwnershipConflict, true, 0},
		{"an unknown mode", &ssa.ModeError{Ref: ref, Mode: "sometimes"}, classStalled, addonsv1alpha1.ReasonInvalidMode, true, 0},
		{"an immutable field", &ssa.ImmutableError{Ref: ref, Fields: "spec.selector"},
			classFailed, addonsv1alpha1.ReasonImmutableField, true, 0},
		{"a prune that failed", &ssa.PruneError{Err: errors.New("deleting: timeout")}, classFailed, addonsv1alpha1.ReasonPruneFailed, false, 0},
		{"an object too large", &ssa.ObjectTooLargeError{Ref: ref, Err: errors.New("too large")},
			classStalled, addonsv1alpha1.ReasonObjectTooLarge, true, 0},
		{"an inventory too large", &inventoryTooLargeError{what: "9000 objects"},
			classStalled, addonsv1alpha1.ReasonInventoryTooLarge, true, 0},
		{"objects to adopt", &ssa.AdoptionError{Refs: []addonsv1alpha1.ObjectReference{ref}},
			classStalled, addonsv1alpha1.ReasonAdoptionRequired, false, adoptionRetry},
		{"a review that refused", &ssa.ForbiddenError{As: "ServiceAccount a/x", Denied: []ssa.AccessRequest{{Verb: "create", Ref: ref}}},
			classStalled, addonsv1alpha1.ReasonForbidden, false, forbiddenRetry},
		{"the API server's 403", refused, classStalled, addonsv1alpha1.ReasonForbidden, false, forbiddenRetry},
		{"anything else", &ssa.WriteError{Err: errors.New("connection refused")}, classFailed, addonsv1alpha1.ReasonApplyFailed, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := applyOutcome(fmt.Errorf("applying %s: %w", ref, tc.err))
			if !out.stop || out.class != tc.class || out.reason != tc.reason || out.terminal != tc.terminal ||
				out.requeueAfter != tc.retryAfter {
				t.Fatalf("outcome = %+v, want class %v, reason %s, terminal %v, retry after %v", out, tc.class, tc.reason,
					tc.terminal, tc.retryAfter)
			}
			if !strings.Contains(out.message, tc.err.Error()) {
				t.Errorf("message %q does not carry the error %q", out.message, tc.err)
			}
			if (tc.retryAfter == 0) != (out.err != nil) {
				t.Errorf("err = %v: a retried-later outcome returns no error, every other one does", out.err)
			}
		})
	}
}
