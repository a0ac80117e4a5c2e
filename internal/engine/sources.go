package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/sources"
)

// SourceRefField is the field index on every add-on kind that maps an AddonSource's name
// to the add-ons whose spec.sourceRef names it.
const SourceRefField = "spec.sourceRef"

// SourceArtifact is the current artifact of one AddonSource, as add-ons use it.
type SourceArtifact struct {
	// Name is the AddonSource's name.
	Name string
	// Revision and Digest identify the artifact (sources.Artifact).
	Revision string
	Digest   string
	// Metadata is the bundle's metadata, checked before anything is applied (pre-flight).
	Metadata sources.Metadata
	// Channels resolves and renders the artifact's packages. One Source exists per
	// digest, shared by every add-on and every AddonSource with that digest, so a package
	// is built once per revision.
	Catalog *channels.Catalog
	// Trust is what the AddonSource says about whom its packages are applied as.
	Trust SourceTrust
}

// SourceTrust is what an AddonSource's spec says about trusting its packages.
type SourceTrust struct {
	// ServiceAccount is the ServiceAccount, in the operator's namespace, that the packages
	// are applied as for add-ons that would otherwise be applied as the operator; zero
	// when the source names none.
	ServiceAccount types.NamespacedName
	// AsOperator applies them with the operator's own identity (spec.applyAsOperator).
	AsOperator bool
	// Pinned is true when what the source serves cannot change without its spec changing
	// or without a valid signature: an OCI bundle pinned by digest or with a required
	// signature, an HTTPS archive (always pinned by its digest), a git commit, or a
	// directory on the operator's own file system.
	Pinned bool
}

// TrustOf reads what src's spec says about trusting its packages; serviceAccounts live
// in namespace, the operator's own.
func TrustOf(src *addonsv1alpha1.AddonSource, namespace string) SourceTrust {
	t := SourceTrust{AsOperator: src.Spec.ApplyAsOperator}
	if src.Spec.ServiceAccountName != "" {
		t.ServiceAccount = types.NamespacedName{Namespace: namespace, Name: src.Spec.ServiceAccountName}
	}
	switch spec := src.Spec; {
	case spec.OCI != nil:
		verified := spec.OCI.Verify != nil && (spec.OCI.Verify.Required == nil || *spec.OCI.Verify.Required)
		t.Pinned = spec.OCI.Digest != "" || strings.Contains(spec.OCI.URL, "@sha256:") || verified
	case spec.Git != nil:
		t.Pinned = spec.Git.Ref != nil && spec.Git.Ref.Commit != ""
	case spec.HTTPS != nil, spec.Directory != nil:
		t.Pinned = true
	}
	return t
}

// sourceIdentity decides whom an add-on in a trusted namespace is applied as when its
// packages come from the AddonSource artifact and it names no ServiceAccount of its own (needIdentity):
// the source's ServiceAccount, or the operator when the source says so. It returns a
// refusal message when the source is not pinned, or names no identity when one is needed.
func sourceIdentity(artifact SourceArtifact, addon addonsv1alpha1.Addon, needIdentity bool) (sa types.NamespacedName, refusal string) {
	switch t := artifact.Trust; {
	case !t.Pinned:
		return sa, fmt.Sprintf("AddonSource %s is used by an add-on in trusted namespace %s, so what it serves must be "+
			"pinned by digest or verified by signature: set spec.oci.digest (or a url @sha256:), spec.oci.verify with "+
			"required signatures, or spec.git.ref.commit", artifact.Name, addon.GetNamespace())
	case !needIdentity:
		return sa, ""
	case t.ServiceAccount.Name != "":
		return t.ServiceAccount, ""
	case t.AsOperator:
		return sa, ""
	}
	return sa, fmt.Sprintf("AddonSource %s names no identity to apply its packages as for add-ons in trusted namespace %s: "+
		"set its spec.serviceAccountName (a ServiceAccount of the operator's namespace) or, for a source as trusted as "+
		"the operator's own image, spec.applyAsOperator", artifact.Name, addon.GetNamespace())
}

// ArtifactRegistry holds the current artifact of every AddonSource. The AddonSource
// controller puts each artifact it fetched and verified here; add-ons that name the
// source in spec.sourceRef resolve their packages from it. An artifact stays until a
// newer one replaces it or the AddonSource is deleted: a source that cannot be fetched
// any more keeps serving the last good artifact. It is safe for concurrent use.
type ArtifactRegistry struct {
	defaultChannel string

	mu       sync.Mutex
	current  map[string]SourceArtifact
	problems map[string]string
	byDigest map[string]*channels.Catalog
	subs     []*sourceSubscriber
}

// NewArtifactRegistry returns an empty registry. defaultChannel is the channel of add-ons
// that name neither a version nor a channel, unless the operator's settings name one.
func NewArtifactRegistry(defaultChannel string) *ArtifactRegistry {
	return &ArtifactRegistry{defaultChannel: defaultChannel, current: map[string]SourceArtifact{},
		problems: map[string]string{}, byDigest: map[string]*channels.Catalog{}}
}

// Set makes artifact, and what the AddonSource says about trusting it, the current one of
// the AddonSource name. It reports whether either changed; when one did, every add-on
// that uses the source is reconciled.
func (r *ArtifactRegistry) Set(name string, artifact *sources.Artifact, trust SourceTrust) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.problems, name)
	previous, had := r.current[name]
	if had && previous.Digest == artifact.Digest && previous.Revision == artifact.Revision &&
		previous.Metadata == artifact.Metadata && previous.Trust == trust {
		return false
	}
	src, ok := r.byDigest[artifact.Digest]
	if !ok {
		src = channels.NewCatalog(artifact.Dir, r.defaultChannel)
		r.byDigest[artifact.Digest] = src
	}
	r.current[name] = SourceArtifact{Name: name, Revision: artifact.Revision, Digest: artifact.Digest,
		Metadata: artifact.Metadata, Catalog: src, Trust: trust}
	if had {
		r.release(previous.Digest)
	}
	r.notify(name)
	return true
}

// Fail records why the AddonSource name has no artifact, for the add-ons that wait for
// it. It does nothing when the source has one: add-ons keep using it.
func (r *ArtifactRegistry) Fail(name, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.current[name]; ok {
		return
	}
	problem := reason + ": " + message
	if r.problems[name] == problem {
		return
	}
	r.problems[name] = problem
	r.notify(name)
}

// Remove forgets the AddonSource name (it was deleted). Add-ons that use it stop with
// SourceNotReady; nothing of them is pruned.
func (r *ArtifactRegistry) Remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	previous, had := r.current[name]
	_, failed := r.problems[name]
	delete(r.current, name)
	delete(r.problems, name)
	if had {
		r.release(previous.Digest)
	}
	if had || failed {
		r.notify(name)
	}
}

// Lookup returns the current artifact of the AddonSource name, or an error that says why
// there is none.
func (r *ArtifactRegistry) Lookup(name string) (SourceArtifact, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.current[name]; ok {
		return a, nil
	}
	if problem, ok := r.problems[name]; ok {
		return SourceArtifact{}, fmt.Errorf("AddonSource %s has no artifact: %s", name, problem)
	}
	return SourceArtifact{}, fmt.Errorf("AddonSource %s does not exist or has not been fetched yet", name)
}

// release drops the channels Source of digest when no AddonSource uses it any more.
// The caller holds r.mu.
func (r *ArtifactRegistry) release(digest string) {
	for _, a := range r.current {
		if a.Digest == digest {
			return
		}
	}
	delete(r.byDigest, digest)
}

// sourceSubscriber collects the names of the sources that changed until its controller
// handles them.
type sourceSubscriber struct {
	mu      sync.Mutex
	pending map[string]struct{}
	wake    chan struct{}
}

// notify tells every subscriber that name changed. The caller holds r.mu.
func (r *ArtifactRegistry) notify(name string) {
	for _, s := range r.subs {
		s.mu.Lock()
		s.pending[name] = struct{}{}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is already pending; it will see name
		}
	}
}

// watch returns a controller source that, each time an AddonSource's artifact changes,
// enqueues the requests mapFn returns for its name. No change is lost: names are
// collected until the controller handles them.
func (r *ArtifactRegistry) watch(mapFn func(ctx context.Context, name string) []reconcile.Request) source.Source {
	sub := &sourceSubscriber{pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	r.mu.Lock()
	r.subs = append(r.subs, sub)
	r.mu.Unlock()
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-sub.wake:
				}
				sub.mu.Lock()
				names := sub.pending
				sub.pending = map[string]struct{}{}
				sub.mu.Unlock()
				for name := range names {
					for _, req := range mapFn(ctx, name) {
						q.Add(req)
					}
				}
			}
		}()
		return nil
	})
}

// sourceRefOf is the SourceRefField index function.
func sourceRefOf(obj addonsv1alpha1.Addon) []string {
	if ref := obj.GetAddonSpec().SourceRef; ref != "" {
		return []string{ref}
	}
	return nil
}
