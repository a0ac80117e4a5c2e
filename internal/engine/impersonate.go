package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
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
	// manager writes, prunes and deletes as this identity; it still reads the shared cache.
	manager *ssa.Manager
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
		return identity{manager: r.manager, live: r.reader}, "", nil
	}
	if r.impersonator == nil {
		return identity{}, "", errors.New("this operator cannot impersonate ServiceAccounts (no Impersonator)")
	}
	c, err := r.impersonator.ClientFor(sa)
	if err != nil {
		return identity{}, "", err
	}
	id := identity{serviceAccount: sa, live: c}
	id.manager = &ssa.Manager{Cache: r.client, Client: c, Reader: c, CheckAccess: true, Tracker: r.echoes, As: id.describe(),
		Sealer: r.opts.Sealer}
	return id, "", nil
}

// actingAs returns the reconcile's identity: the operator's until impersonate ran.
func (r *Reconciler) actingAs(st *reconcileState) identity {
	if st.identity.manager == nil {
		return identity{manager: r.manager, live: r.reader}
	}
	return st.identity
}

// impersonate is the phase that decides whom the rest of the reconcile acts as.
func (r *Reconciler) impersonate(_ context.Context, st *reconcileState) outcome {
	id, refusal, err := r.identityFor(st.addon, st.settings.Tenancy, st.artifact)
	switch {
	case err != nil:
		return failed(addonsv1alpha1.ReasonForbidden, err)
	case refusal != "" && st.artifact.Name != "" && st.settings.Tenancy.Trusts(st.addon.GetNamespace()):
		return refused(addonsv1alpha1.ReasonSourceNotTrusted, refusal)
	case refusal != "":
		return refused(addonsv1alpha1.ReasonNotPermitted, refusal)
	}
	st.identity = id
	return proceed()
}

// forbiddenRetry is how often an add-on refused by RBAC looks again: an admin may grant
// its ServiceAccount what it lacks.
const forbiddenRetry = time.Minute
