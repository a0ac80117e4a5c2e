package sources

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// retryBackoff keeps go-containerregistry's own retries short: the caller retries a
// transient error on its own schedule.
var retryBackoff = remote.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 2}

// parseReference parses an oci source's image reference (an oci:// prefix is allowed);
// plain HTTP (Insecure) is allowed only to a loopback registry, and only with
// InsecureLoopback set as well: the address filter refuses loopback otherwise.
func parseReference(ref string, auth Auth) (name.Reference, error) {
	var opts []name.Option
	if auth.Insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(strings.TrimPrefix(ref, "oci://"), opts...)
	if err != nil {
		return nil, errorf(ReasonInvalidSource, nil, "%q is not an image reference: %s", redactURL(ref), redactURL(err.Error()))
	}
	registry := r.Context().RegistryStr()
	switch {
	case auth.Insecure && !isLoopback(registry):
		return nil, errorf(ReasonInvalidSource, nil,
			"insecure (plain HTTP) is allowed only for a loopback registry, not %s", registry)
	case auth.Insecure && !plainHTTPAllowed(auth, registry):
		return nil, errorf(ReasonInvalidSource, nil,
			"insecure (plain HTTP) to the loopback registry %s needs insecureLoopback as well", registry)
	}
	return r, nil
}

// remoteOptions returns the options of every registry request of a source: its transport
// (CA), its credentials, and a Puller shared by the source's fetches, so that the
// registry's authentication handshake happens once per source.
func (f *fetcher) remoteOptions(ctx context.Context, req Request, id string, ref name.Reference) ([]remote.Option, error) {
	t, err := f.transportFor(req.Auth)
	if err != nil {
		return nil, err
	}
	auth, err := registryAuth(req.Auth, ref.Context().Registry, f.keychain)
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = t
	if !plainHTTPAllowed(req.Auth, ref.Context().RegistryStr()) {
		rt = httpsOnly{t}
	}
	opts := make([]remote.Option, 0, 6)
	opts = append(opts, remote.WithContext(ctx), remote.WithTransport(rt), remote.WithAuth(auth),
		remote.WithUserAgent("kaddons"), remote.WithRetryBackoff(retryBackoff))
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pullers[id]
	if !ok {
		if p, err = remote.NewPuller(opts...); err != nil {
			return nil, errorf(ReasonInvalidSource, err, "registry client")
		}
		f.pullers[id] = p
	}
	return append(opts, remote.Reuse(p)), nil
}

// fetchOCI pulls a bundle image: one HEAD resolves the tag to a manifest digest; a digest
// this source resolved before is not pulled again; a new one is verified (when required),
// pulled, and its single layer extracted.
func (f *fetcher) fetchOCI(ctx context.Context, req Request, id string) (*Artifact, error) {
	ref, err := parseReference(req.URL, req.Auth)
	if err != nil {
		return nil, err
	}
	opts, err := f.remoteOptions(ctx, req, id, ref)
	if err != nil {
		return nil, err
	}
	var digest v1.Hash
	pinned, byDigest := ref.(name.Digest)
	if byDigest {
		if digest, err = v1.NewHash(pinned.DigestStr()); err != nil {
			return nil, errorf(ReasonInvalidSource, err, "%q", redactURL(req.URL))
		}
		if e, ok := f.cache.lookupResolved(id + "@" + digest.String()); ok {
			return f.finish(id, "", ociRevision(ref, digest), e, req.Path, true)
		}
	}
	shown := redactURL(req.URL)
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return nil, registryError(err, "resolving %s", shown)
	}
	if byDigest && desc.Digest != digest {
		return nil, errorf(ReasonDigestMismatch, nil, "the registry answered %s for %s", desc.Digest, shown)
	}
	digest = desc.Digest
	if req.Digest != "" && req.Digest != digest.String() {
		return nil, errorf(ReasonDigestMismatch, nil, "%s is %s, not the pinned %s", shown, digest, req.Digest)
	}
	resolution := id + "@" + digest.String()
	revision := ociRevision(ref, digest)
	if e, ok := f.cache.lookupResolved(resolution); ok {
		return f.finish(id, resolution, revision, e, req.Path, true)
	}
	if desc.MediaType != types.OCIManifestSchema1 && desc.MediaType != types.DockerManifestSchema2 {
		return nil, errorf(ReasonInvalidBundle, nil, "%s is a %s, not an image manifest", shown, desc.MediaType)
	}
	byDigestRef := ref.Context().Digest(digest.String())
	if req.Verify != nil {
		if err := verifySignature(byDigestRef, req.Verify, opts); err != nil {
			return nil, err
		}
	}
	if e, ok := f.cache.lookup(entryKey(KindOCI, digest.String())); ok {
		return f.finish(id, resolution, revision, e, req.Path, true)
	}
	e, err := f.pullBundle(byDigestRef, revision, opts)
	if err != nil {
		return nil, err
	}
	return f.finish(id, resolution, revision, e, req.Path, true)
}

func ociRevision(ref name.Reference, digest v1.Hash) string {
	if t, ok := ref.(name.Tag); ok {
		return t.TagStr() + "@" + digest.String()
	}
	return digest.String()
}

// pullBundle pulls the image ref (by digest), checks it is a single-layer bundle within the
// caps, and extracts its layer into the cache; a Helm chart (chartTree) becomes a channels
// tree of one package. The staging folder goes on every path out,
// a layer stream the registry cuts short included.
func (f *fetcher) pullBundle(ref name.Digest, revision string, opts []remote.Option) (*cacheEntry, error) {
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, registryError(err, "pulling %s", ref)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, registryError(err, "reading the manifest of %s", ref)
	}
	if isHelmChart(manifest) {
		st, err := f.cache.newStage()
		if err != nil {
			return nil, err
		}
		defer st.release()
		if err := mkdir(st.path("tree")); err != nil {
			return nil, err
		}
		if err := f.chartTree(img, manifest, ref, st); err != nil {
			return nil, err
		}
		// A chart is made a channels tree here; nothing else labels it one.
		return f.cache.insert(st, entryMeta{Kind: KindOCI, Digest: ref.DigestStr(), Revision: revision,
			Labels: map[string]string{LabelMediaType: MediaTypeChannels}})
	}
	if len(manifest.Layers) != 1 {
		return nil, errorf(ReasonInvalidBundle, nil, "%s has %d layers; a bundle has one, holding its tree", ref, len(manifest.Layers))
	}
	layerDesc := manifest.Layers[0]
	switch layerDesc.MediaType {
	case types.OCILayer, types.OCIUncompressedLayer, types.DockerLayer, types.DockerUncompressedLayer:
	default:
		return nil, errorf(ReasonInvalidBundle, nil, "%s: the layer is a %s, not a tar", ref, layerDesc.MediaType)
	}
	if layerDesc.Size > f.limits.MaxBytes {
		return nil, errorf(ReasonArchiveRefused, nil, "%s: the layer has %d bytes, more than the cap of %d", ref, layerDesc.Size, f.limits.MaxBytes)
	}
	config, err := img.ConfigFile()
	if err != nil {
		return nil, registryError(err, "reading the configuration of %s", ref)
	}
	layer, err := img.LayerByDigest(layerDesc.Digest)
	if err != nil {
		return nil, registryError(err, "reading the layer of %s", ref)
	}
	st, err := f.cache.newStage()
	if err != nil {
		return nil, err
	}
	defer st.release()
	tree := st.path("tree")
	if err := mkdir(tree); err != nil {
		return nil, err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, registryError(err, "pulling the layer of %s", ref)
	}
	defer rc.Close() //nolint:errcheck
	// The reader checks the layer's digest when it reaches the end: read it to the end.
	limited := io.LimitReader(rc, layerDesc.Size+1)
	if err := extractCharged(limited, tree, f.limits, st.charge); err != nil {
		return nil, layerError(err, ref)
	}
	if _, err := io.Copy(io.Discard, limited); err != nil {
		return nil, layerError(err, ref)
	}
	var labels map[string]string
	if config != nil {
		labels = config.Config.Labels
	}
	return f.cache.insert(st, entryMeta{Kind: KindOCI, Digest: ref.DigestStr(), Revision: revision, Labels: labels})
}

// layerError reports a layer whose content does not match its digest as DigestMismatch.
func layerError(err error, ref name.Digest) error {
	if strings.Contains(err.Error(), "error verifying") || strings.Contains(err.Error(), "digest") {
		return errorf(ReasonDigestMismatch, err, "%s: the layer does not match its digest", ref)
	}
	return errorOf(err, "pulling the layer of %s", ref)
}

// registryError classifies a registry failure: a missing manifest or a refused login is a
// FetchFailed that needs a change; a server or network error is transient.
func registryError(err error, format string, args ...any) error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	e := fetchError(err, format, args...)
	var te *transport.Error
	if errors.As(err, &te) {
		e.Transient = retryableStatus(te.StatusCode)
	}
	return e
}

// registryAuth returns the credentials for registry: the request's username and password,
// else its docker config's entry for the registry, else the keychain, else anonymous.
func registryAuth(a Auth, registry name.Registry, keychain authn.Keychain) (authn.Authenticator, error) {
	if a.Username != "" || a.Password != "" {
		return &authn.Basic{Username: a.Username, Password: a.Password}, nil
	}
	if len(a.DockerConfigJSON) > 0 {
		cfg, err := dockerConfigAuth(a.DockerConfigJSON, registry.RegistryStr())
		if err != nil {
			return nil, errorf(ReasonInvalidSource, err, "the pull secret")
		}
		if cfg != nil {
			return authn.FromConfig(*cfg), nil
		}
		return authn.Anonymous, nil
	}
	if keychain != nil {
		auth, err := keychain.Resolve(registry)
		if err != nil {
			return nil, errorf(ReasonInvalidSource, err, "registry credentials for %s", registry)
		}
		return auth, nil
	}
	return authn.Anonymous, nil
}

// dockerConfig is a .dockerconfigjson.
type dockerConfig struct {
	Auths map[string]struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// dockerConfigAuth returns the entry of a .dockerconfigjson for registry (keys may be a
// host, a host:port, or a URL such as https://index.docker.io/v1/), or nil.
func dockerConfigAuth(data []byte, registry string) (*authn.AuthConfig, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("not a .dockerconfigjson: %w", err)
	}
	want := normalizeRegistry(registry)
	for key, e := range cfg.Auths {
		if normalizeRegistry(key) != want {
			continue
		}
		out := &authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken,
			RegistryToken: e.RegistryToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("the auth of %s is not base64: %w", key, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("the auth of %s is not user:password", key)
			}
			out.Username, out.Password = user, pass
		}
		return out, nil
	}
	return nil, nil
}

func normalizeRegistry(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	switch key {
	case "docker.io", "registry-1.docker.io", "index.docker.io":
		return name.DefaultRegistry
	}
	return key
}

// notFound reports whether err is a registry's 404.
func notFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// httpsOnly refuses plain HTTP. go-containerregistry falls back to HTTP for registries
// on private and loopback addresses; a source that is not allowed plain HTTP (insecure
// and insecureLoopback, to a loopback registry) never does.
type httpsOnly struct{ next http.RoundTripper }

func (h httpsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != schemeHTTPS {
		return nil, fmt.Errorf("refusing plain HTTP to %s: the source is not marked insecure (and insecureLoopback, for a loopback registry)", r.URL.Host)
	}
	return h.next.RoundTrip(r)
}
