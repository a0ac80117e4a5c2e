package ssa

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestForbiddenError(t *testing.T) {
	deploy := addonsv1alpha1.ObjectReference{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "team-a", Name: "coredns"}
	role := addonsv1alpha1.ObjectReference{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "system:coredns"}
	apiRefusal := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "coredns", errors.New("no"))
	for _, tc := range []struct {
		name       string
		err        *ForbiddenError
		wantPrefix string
		wantParts  []string
		wantAPI    bool
	}{
		{name: "one refusal",
			err:        &ForbiddenError{As: "ServiceAccount team-a/addons", Denied: []AccessRequest{{Verb: verbCreate, Ref: deploy}}},
			wantPrefix: "ServiceAccount team-a/addons may not create ", wantParts: []string{deploy.String()}},
		{name: "every refusal named, in order",
			err: &ForbiddenError{As: "ServiceAccount team-a/addons", Denied: []AccessRequest{
				{Verb: verbPatch, Ref: deploy}, {Verb: verbDelete, Ref: role}}},
			wantPrefix: "ServiceAccount team-a/addons may not patch ",
			wantParts:  []string{"patch " + deploy.String() + ", delete " + role.String()}},
		{name: "the API server's refusal is kept",
			err: &ForbiddenError{As: "ServiceAccount team-a/addons", Denied: []AccessRequest{{Verb: verbCreate, Ref: deploy}},
				Err: apiRefusal},
			wantPrefix: "ServiceAccount team-a/addons may not create ", wantParts: []string{deploy.String()}, wantAPI: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			if !strings.HasPrefix(msg, tc.wantPrefix) || !strings.HasSuffix(msg, "; nothing was written") {
				t.Errorf("message = %q, want it to start with %q and end with %q", msg, tc.wantPrefix, "; nothing was written")
			}
			for _, part := range tc.wantParts {
				if !strings.Contains(msg, part) {
					t.Errorf("message = %q, want it to name %q", msg, part)
				}
			}
			wrapped := fmt.Errorf("applying: %w", tc.err)
			if !IsForbidden(wrapped) || !IsForbidden(errors.Join(errors.New("other"), tc.err)) {
				t.Errorf("IsForbidden misses a wrapped or joined ForbiddenError")
			}
			if got := apierrors.IsForbidden(wrapped); got != tc.wantAPI {
				t.Errorf("the API server's refusal through Unwrap = %v, want %v", got, tc.wantAPI)
			}
		})
	}
	if !IsForbidden(apiRefusal) {
		t.Errorf("IsForbidden misses the API server's 403")
	}
	if IsForbidden(errors.New("connection refused")) || IsForbidden(nil) {
		t.Errorf("IsForbidden takes a non-RBAC error for a refusal")
	}
}
