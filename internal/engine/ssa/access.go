package ssa

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// The verbs an apply needs, as RBAC names them.
const (
	verbGet    = "get"
	verbCreate = "create"
	verbPatch  = "patch"
	verbDelete = "delete"
)

// AccessRequest is one verb on one object, as a SelfSubjectAccessReview asks it.
type AccessRequest struct {
	Verb string
	Ref  addonsv1alpha1.ObjectReference
}

// ForbiddenError lists the writes the impersonated ServiceAccount may not make; nothing
// was written.
type ForbiddenError struct {
	// As names the identity.
	As     string
	Denied []AccessRequest
	// Err is the API server's refusal, when a request rather than a review found it.
	Err error
}

func (e *ForbiddenError) Error() string {
	parts := make([]string, 0, len(e.Denied))
	for _, d := range e.Denied {
		parts = append(parts, d.Verb+" "+d.Ref.String())
	}
	return fmt.Sprintf("%s may not %s; nothing was written", e.As, strings.Join(parts, ", "))
}

func (e *ForbiddenError) Unwrap() error { return e.Err }

// checkWrites asks the API server, as the Manager's identity, whether it may make every
// write of an apply: patch for each object the cache holds, get and create for the others
// (kaddons reads an object it did not create before it writes it), delete for each one
// the inventory lists and the package no longer renders. It runs only for impersonated
// applies, before anything is read or written, so that a refusal leaves everything as it
// is and names every write refused. The API server still checks each write itself, its
// escalation checks on roles and bindings included.
func (m *Manager) checkWrites(ctx context.Context, req Request) error {
	var denied []AccessRequest
	rendered := make([]addonsv1alpha1.ObjectReference, 0, len(req.Objects))
	for _, u := range req.Objects {
		ref := RefOf(u)
		rendered = append(rendered, ref)
		verbs := []string{verbCreate, verbGet}
		cached := &unstructured.Unstructured{}
		cached.SetGroupVersionKind(ref.GroupVersionKind())
		if err := m.Cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, cached); err == nil {
			verbs = []string{verbPatch}
		}
		for _, verb := range verbs {
			ok, err := m.allowed(ctx, AccessRequest{Verb: verb, Ref: ref})
			if err != nil {
				return err
			}
			if !ok {
				denied = append(denied, AccessRequest{Verb: verb, Ref: ref})
				break
			}
		}
	}
	for _, ref := range StaleObjects(req.Previous, rendered) {
		ok, err := m.allowed(ctx, AccessRequest{Verb: verbDelete, Ref: ref})
		if err != nil {
			return err
		}
		if !ok {
			denied = append(denied, AccessRequest{Verb: verbDelete, Ref: ref})
		}
	}
	if len(denied) > 0 {
		return &ForbiddenError{As: m.As, Denied: denied}
	}
	return nil
}

// allowed asks the API server whether the Manager's identity may make ask.
func (m *Manager) allowed(ctx context.Context, ask AccessRequest) (bool, error) {
	mapping, err := m.Client.RESTMapper().RESTMapping(ask.Ref.GroupVersionKind().GroupKind(), ask.Ref.Version)
	if meta.IsNoMatchError(err) {
		// A kind the package's own CRD defines: the write itself will say.
		return true, nil
	}
	if err != nil {
		return false, err
	}
	attrs := &authorizationv1.ResourceAttributes{Verb: ask.Verb, Group: ask.Ref.Group, Resource: mapping.Resource.Resource,
		Namespace: ask.Ref.Namespace}
	if ask.Verb != verbCreate {
		attrs.Name = ask.Ref.Name
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
	if err := m.Client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("asking whether it may %s %s: %w", ask.Verb, ask.Ref, err)
	}
	return review.Status.Allowed, nil
}

// IsForbidden reports whether err is an RBAC refusal, checked beforehand or by the API
// server (errors.As searches joined errors too).
func IsForbidden(err error) bool {
	return errorIs[*ForbiddenError](err) || apierrors.IsForbidden(err)
}
