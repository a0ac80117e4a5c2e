package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Impersonator builds clients that act as a ServiceAccount, so that the API server's
// RBAC (its escalation checks on roles and bindings included) decides what an add-on
// outside the trusted namespaces may write. The clients share the operator's connections;
// each request carries the Impersonate-User header of the ServiceAccount, and the API
// server adds the ServiceAccount's groups.
type Impersonator struct {
	base   http.RoundTripper
	config *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu      sync.Mutex
	clients map[types.NamespacedName]client.Client
}

// maxImpersonatedClients bounds the clients an Impersonator keeps; beyond it the cache
// starts afresh (building a client costs no request).
const maxImpersonatedClients = 512

// NewImpersonator returns an Impersonator on cfg's server, sharing httpClient's
// connections.
func NewImpersonator(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, mapper meta.RESTMapper) *Impersonator {
	return &Impersonator{base: httpClient.Transport, config: rest.CopyConfig(cfg), scheme: scheme, mapper: mapper,
		clients: map[types.NamespacedName]client.Client{}}
}

// ClientFor returns a client that acts as the ServiceAccount sa. It reads from the API
// server directly, never through a cache.
func (im *Impersonator) ClientFor(sa types.NamespacedName) (client.Client, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if c, ok := im.clients[sa]; ok {
		return c, nil
	}
	rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{
		UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
	}, im.base)
	c, err := client.New(im.config, client.Options{HTTPClient: &http.Client{Transport: rt}, Scheme: im.scheme, Mapper: im.mapper})
	if err != nil {
		return nil, fmt.Errorf("building a client for ServiceAccount %s: %w", sa, err)
	}
	if len(im.clients) >= maxImpersonatedClients {
		clear(im.clients)
	}
	im.clients[sa] = c
	return c, nil
}

// identity is whom a reconcile acts as on the add-on's children: the operator itself, or
// a ServiceAccount of the add-on's namespace.
type identity struct {
	// serviceAccount is the impersonated ServiceAccount; zero for the operator's own.
	serviceAccount types.NamespacedName
	// applier writes, prunes and deletes as this identity; it still reads the shared cache.
	applier *applier
	// live reads from the API server as this identity.
	live client.Reader
}

// impersonating reports whether the identity is a ServiceAccount.
func (id identity) impersonating() bool { return id.serviceAccount.Name != "" }

// describe names the identity in messages.
func (id identity) describe() string {
	if !id.impersonating() {
		return "the operator"
	}
	return "ServiceAccount " + id.serviceAccount.String()
}

// identityFor decides whom the add-on's objects are written as. An add-on that names
// spec.serviceAccountName is applied as that ServiceAccount of its namespace; one in an
// untrusted namespace as the configuration's default ServiceAccount; one in a trusted
// namespace as the operator, or, when its packages come from an AddonSource, as the
// identity that source names. It returns a refusal message when an untrusted add-on has
// no ServiceAccount to act as, or when a trusted one uses a source that is not pinned or
// names no identity.
func (r *Reconciler) identityFor(addon addonsv1alpha1.Addon, tenancy *Tenancy, source SourceArtifact) (identity, string, error) {
	name := addon.GetAddonSpec().ServiceAccountName
	trusted := tenancy.Trusts(addon.GetNamespace())
	if name == "" && !trusted {
		name = tenancy.DefaultServiceAccountName
		if name == "" {
			return identity{}, fmt.Sprintf("namespace %s is not trusted by the operator, so the add-on is applied as a "+
				"ServiceAccount of it: set spec.serviceAccountName (or the configuration's "+
				"runtime.tenancy.defaultServiceAccountName), or add the namespace to the trusted namespaces",
				addon.GetNamespace()), nil
		}
	}
	sa := types.NamespacedName{Namespace: addon.GetNamespace(), Name: name}
	if trusted && source.Name != "" {
		// A source's packages get what the source was granted, not the operator's power:
		// whoever can change what it serves would otherwise write anything the operator may.
		fromSource, refusal := sourceIdentity(source, addon, name == "")
		if refusal != "" {
			return identity{}, refusal, nil
		}
		if name == "" {
			sa = fromSource
		}
	}
	if sa.Name == "" {
		return identity{applier: r.applier, live: r.reader}, "", nil
	}
	if r.impersonator == nil {
		return identity{}, "", errors.New("this operator cannot impersonate ServiceAccounts (no Impersonator)")
	}
	c, err := r.impersonator.ClientFor(sa)
	if err != nil {
		return identity{}, "", err
	}
	id := identity{serviceAccount: sa, live: c}
	id.applier = &applier{cache: r.client, client: c, reader: c, checkAccess: true, echoes: r.echoes, as: id.describe(),
		sealer: r.opts.Sealer}
	return id, "", nil
}

// actingAs returns the reconcile's identity: the operator's until impersonate ran.
func (r *Reconciler) actingAs(st *reconcileState) identity {
	if st.identity.applier == nil {
		return identity{applier: r.applier, live: r.reader}
	}
	return st.identity
}

// impersonate is the phase that decides whom the rest of the reconcile acts as.
func (r *Reconciler) impersonate(_ context.Context, st *reconcileState) outcome {
	id, refusal, err := r.identityFor(st.addon, st.settings.Tenancy, st.source)
	switch {
	case err != nil:
		return failed(addonsv1alpha1.ReasonForbidden, err)
	case refusal != "" && st.source.Name != "" && st.settings.Tenancy.Trusts(st.addon.GetNamespace()):
		return refused(addonsv1alpha1.ReasonSourceNotTrusted, refusal)
	case refusal != "":
		return refused(addonsv1alpha1.ReasonNotPermitted, refusal)
	}
	st.identity = id
	return proceed()
}

// The verbs an apply needs, as RBAC names them.
const (
	verbGet    = "get"
	verbCreate = "create"
	verbPatch  = "patch"
	verbDelete = "delete"
)

// forbiddenRetry is how often an add-on refused by RBAC looks again: an admin may grant
// its ServiceAccount what it lacks.
const forbiddenRetry = time.Minute

// accessRequest is one verb on one object, as a SelfSubjectAccessReview asks it.
type accessRequest struct {
	verb string
	ref  addonsv1alpha1.ObjectReference
}

// forbiddenError lists the writes the impersonated ServiceAccount may not make; nothing
// was written.
type forbiddenError struct {
	as     string
	denied []accessRequest
	// err is the API server's refusal, when a request rather than a review found it.
	err error
}

func (e *forbiddenError) Error() string {
	parts := make([]string, 0, len(e.denied))
	for _, d := range e.denied {
		parts = append(parts, d.verb+" "+d.ref.String())
	}
	return fmt.Sprintf("%s may not %s; nothing was written", e.as, strings.Join(parts, ", "))
}

func (e *forbiddenError) Unwrap() error { return e.err }

// checkWrites asks the API server, as the applier's identity, whether it may make every
// write of an apply: patch for each object the cache holds, get and create for the others
// (kaddons reads an object it did not create before it writes it), delete for each one
// the inventory lists and the package no longer renders. It runs only for impersonated
// applies, before anything is read or written, so that a refusal leaves everything as it
// is and names every write refused. The API server still checks each write itself, its
// escalation checks on roles and bindings included.
func (a *applier) checkWrites(ctx context.Context, req applyRequest) error {
	var denied []accessRequest
	rendered := make([]addonsv1alpha1.ObjectReference, 0, len(req.objects))
	for _, u := range req.objects {
		ref := refOf(u)
		rendered = append(rendered, ref)
		verbs := []string{verbCreate, verbGet}
		cached := &unstructured.Unstructured{}
		cached.SetGroupVersionKind(ref.GroupVersionKind())
		if err := a.cache.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, cached); err == nil {
			verbs = []string{verbPatch}
		}
		for _, verb := range verbs {
			ok, err := a.allowed(ctx, accessRequest{verb: verb, ref: ref})
			if err != nil {
				return err
			}
			if !ok {
				denied = append(denied, accessRequest{verb: verb, ref: ref})
				break
			}
		}
	}
	for _, ref := range staleObjects(req.previous, rendered) {
		ok, err := a.allowed(ctx, accessRequest{verb: verbDelete, ref: ref})
		if err != nil {
			return err
		}
		if !ok {
			denied = append(denied, accessRequest{verb: verbDelete, ref: ref})
		}
	}
	if len(denied) > 0 {
		return &forbiddenError{as: a.as, denied: denied}
	}
	return nil
}

// allowed asks the API server whether the applier's identity may make ask.
func (a *applier) allowed(ctx context.Context, ask accessRequest) (bool, error) {
	mapping, err := a.client.RESTMapper().RESTMapping(ask.ref.GroupVersionKind().GroupKind(), ask.ref.Version)
	if meta.IsNoMatchError(err) {
		// A kind the package's own CRD defines: the write itself will say.
		return true, nil
	}
	if err != nil {
		return false, err
	}
	attrs := &authorizationv1.ResourceAttributes{Verb: ask.verb, Group: ask.ref.Group, Resource: mapping.Resource.Resource,
		Namespace: ask.ref.Namespace}
	if ask.verb != verbCreate {
		attrs.Name = ask.ref.Name
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
	if err := a.client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("asking whether it may %s %s: %w", ask.verb, ask.ref, err)
	}
	return review.Status.Allowed, nil
}

// isForbidden reports whether err is an RBAC refusal, checked beforehand or by the API
// server (errors.As searches joined errors too).
func isForbidden(err error) bool {
	return errorIs[*forbiddenError](err) || apierrors.IsForbidden(err)
}
