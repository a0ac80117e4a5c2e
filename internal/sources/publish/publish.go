// Package publish builds, pushes and signs kaddons bundles: a channels tree packed as a
// single-layer OCI image in the Manifest Bundle format that internal/sources fetches,
// signed in cosign's key-based format. kubectl-kaddons bundle uses it; so do the tests.
package publish

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/sources"
)

// BuildOptions set the bundle's constraints; a field left empty keeps the value of the
// tree's own metadata/annotations.yaml, if any.
type BuildOptions struct {
	OperatorID         string
	MinOperatorVersion string
	KubernetesVersions string
	// Limits are the caps the operator extracts with (sources.DefaultLimits when zero): a
	// bundle over them is refused here rather than by every operator that pulls it.
	Limits sources.Limits
}

// Build packs the bundle rooted at dir into an image. dir is read as a directory source
// is: a channels tree (channel files, packages/<addon>/<version>/), optionally with a
// metadata/annotations.yaml that may move the tree to another folder. Every channel file
// must parse and list packages that exist, and every package must render with kustomize
// and carry valid metadata. The image has one layer, holding manifests/ (the tree) and
// metadata/annotations.yaml, and the same keys as labels on its configuration. It is
// reproducible: the same tree and options give the same digest.
func Build(dir string, opts BuildOptions) (v1.Image, sources.Bundle, error) {
	bundle, tree, err := sources.ReadBundle(dir, nil, false)
	if err != nil {
		return nil, sources.Bundle{}, err
	}
	if opts.OperatorID != "" {
		bundle.Metadata.OperatorID = opts.OperatorID
	}
	if opts.MinOperatorVersion != "" {
		bundle.Metadata.MinOperatorVersion = opts.MinOperatorVersion
	}
	if opts.KubernetesVersions != "" {
		bundle.Metadata.KubernetesVersions = opts.KubernetesVersions
	}
	if err := bundle.Metadata.Validate(); err != nil {
		return nil, sources.Bundle{}, err
	}
	if err := ValidateTree(tree); err != nil {
		return nil, sources.Bundle{}, err
	}
	// The metadata folder of a tree at the bundle's root is not part of the tree.
	var skip string
	if bundle.ManifestsDir == "." {
		skip = bundle.MetadataDir
	}
	bundle.ManifestsDir = strings.TrimSuffix(sources.DefaultManifestsDir, "/")
	bundle.MetadataDir = strings.TrimSuffix(sources.DefaultMetadataDir, "/")
	keys := bundle.Annotations()
	annotations, err := sources.MarshalAnnotations(keys)
	if err != nil {
		return nil, sources.Bundle{}, err
	}
	layerTar, err := packTree(tree, skip, annotations, opts.Limits)
	if err != nil {
		return nil, sources.Bundle{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, sources.Bundle{}, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, sources.Bundle{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, sources.Bundle{}, err
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Labels = keys
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, sources.Bundle{}, err
	}
	return img, bundle, nil
}

// ValidateTree checks a channels tree: every channel file parses and lists packages that
// exist; every package renders with kustomize and has valid metadata.
func ValidateTree(tree string) error {
	src := channels.NewCatalog(tree, "")
	names := src.Channels()
	if len(names) == 0 {
		return fmt.Errorf("%s has no channel file", tree)
	}
	for _, ch := range names {
		data, err := os.ReadFile(filepath.Join(tree, ch))
		if err != nil {
			return err
		}
		parsed, err := channels.ParseChannel(data)
		if err != nil {
			return fmt.Errorf("channel %s: %w", ch, err)
		}
		for _, e := range parsed.Manifests {
			if _, err := os.Stat(filepath.Join(tree, "packages", e.Name, e.Version, "kustomization.yaml")); err != nil {
				return fmt.Errorf("channel %s lists %s %s, which has no package", ch, e.Name, e.Version)
			}
		}
	}
	addons, err := os.ReadDir(filepath.Join(tree, "packages"))
	if err != nil {
		return fmt.Errorf("%s has no packages folder: %w", tree, err)
	}
	for _, a := range addons {
		if !a.IsDir() {
			continue
		}
		for _, v := range src.Versions(a.Name()) {
			if _, err := sources.ReadPackageMetadata(os.DirFS(tree), a.Name(), v); err != nil {
				return err
			}
			if _, err := src.Render(channels.Resolved{Addon: a.Name(), Version: v}); err != nil {
				return fmt.Errorf("package %s %s: %w", a.Name(), v, err)
			}
		}
	}
	return nil
}

// treeEntry is a folder or regular file of a tree.
type treeEntry struct {
	name string // slash-separated, relative to the tree
	dir  bool
	path string // on disk, for a file
}

// listTree lists the folders and regular files of tree, leaving out the folder skip and
// .git folders, and refuses symbolic links and special files.
func listTree(tree, skip string) ([]treeEntry, error) {
	var entries []treeEntry
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(tree, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == skip || d.Name() == ".git") {
			return filepath.SkipDir
		}
		switch {
		case d.IsDir():
			entries = append(entries, treeEntry{name: rel, dir: true})
		case d.Type().IsRegular():
			entries = append(entries, treeEntry{name: rel, path: p})
		default:
			return fmt.Errorf("%s is a symbolic link or a special file; a bundle holds folders and regular files only", rel)
		}
		return nil
	})
	return entries, err
}

// packTree writes the tree as a tar: its files under manifests/ (leaving out skip and
// .git folders) and annotations as metadata/annotations.yaml, sorted, with zero times and
// owners, within limits. Symbolic links and special files are refused, as the operator
// would refuse them.
func packTree(tree, skip string, annotations []byte, limits sources.Limits) ([]byte, error) {
	if limits == (sources.Limits{}) {
		limits = sources.DefaultLimits
	}
	entries, err := listTree(tree, skip)
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var total int64
	header := func(entry string, dir bool, size int64) *tar.Header {
		h := &tar.Header{Name: entry, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if dir {
			h.Name, h.Mode, h.Typeflag, h.Size = entry+"/", 0o755, tar.TypeDir, 0
		}
		return h
	}
	manifests := strings.TrimSuffix(sources.DefaultManifestsDir, "/")
	metadata := strings.TrimSuffix(sources.DefaultMetadataDir, "/")
	write := func(entry string, dir bool, data []byte) error {
		if depth := strings.Count(entry, "/") + 1; depth > limits.MaxDepth {
			return fmt.Errorf("%s is %d folders deep, more than the operator's cap of %d", entry, depth, limits.MaxDepth)
		}
		total += int64(len(data))
		if total > limits.MaxBytes {
			return fmt.Errorf("the tree has more than %d bytes, the operator's cap", limits.MaxBytes)
		}
		if err := tw.WriteHeader(header(entry, dir, int64(len(data)))); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if len(entries)+3 > limits.MaxFiles {
		return nil, fmt.Errorf("the tree has %d entries, more than the operator's cap of %d", len(entries)+3, limits.MaxFiles)
	}
	if err := write(manifests, true, nil); err != nil {
		return nil, err
	}
	for _, e := range entries {
		var data []byte
		if !e.dir {
			if data, err = os.ReadFile(e.path); err != nil {
				return nil, err
			}
		}
		if err := write(path.Join(manifests, e.name), e.dir, data); err != nil {
			return nil, err
		}
	}
	if err := write(metadata, true, nil); err != nil {
		return nil, err
	}
	if err := write(path.Join(metadata, sources.AnnotationsFile), false, annotations); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img to an OCI image layout: a directory, or, when out ends in .tar,
// a tar of that directory (an oci-archive). An existing directory must be empty or a
// layout; the image is added to its index.
func WriteLayout(img v1.Image, out string) error {
	if strings.HasSuffix(out, ".tar") {
		tmp, err := os.MkdirTemp("", "kaddons-bundle-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp) //nolint:errcheck
		if err := WriteLayout(img, tmp); err != nil {
			return err
		}
		return tarDirectory(tmp, out)
	}
	p, err := layout.FromPath(out)
	if err != nil {
		if p, err = layout.Write(out, empty.Index); err != nil {
			return err
		}
	}
	return p.AppendImage(img)
}

func tarDirectory(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, Typeflag: tar.TypeDir})
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RegistryOptions say how to reach a registry.
type RegistryOptions struct {
	// Keychain resolves credentials (authn.DefaultKeychain: the docker config); nil is
	// anonymous.
	Keychain authn.Keychain
	// Insecure allows plain HTTP.
	Insecure bool
	// Transport is the HTTP transport; nil is http.DefaultTransport.
	Transport http.RoundTripper
}

func (o RegistryOptions) parse(ref string) (name.Reference, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	return name.ParseReference(ref, opts...)
}

func (o RegistryOptions) remote(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithUserAgent("kubectl-kaddons")}
	if o.Keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(o.Keychain))
	}
	if o.Transport != nil {
		opts = append(opts, remote.WithTransport(o.Transport))
	}
	return opts
}

// Push pushes img to ref (a tag, or a repository for a push by digest only) and returns
// the pushed image's reference by digest.
func Push(ctx context.Context, img v1.Image, ref string, opts RegistryOptions) (name.Digest, error) {
	r, err := opts.parse(ref)
	if err != nil {
		return name.Digest{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if pinned, ok := r.(name.Digest); ok && pinned.DigestStr() != d.String() {
		return name.Digest{}, fmt.Errorf("%s names digest %s, the bundle is %s", ref, pinned.DigestStr(), d)
	}
	if err := remote.Write(r, img, opts.remote(ctx)...); err != nil {
		return name.Digest{}, err
	}
	return r.Context().Digest(d.String()), nil
}

// LoadSigner reads a PEM private key: PKCS#8, PKCS#1, SEC 1, or cosign's encrypted format
// (cosign generate-key-pair), decrypted with password.
func LoadSigner(keyPEM, password []byte) (signature.Signer, error) {
	pf := cryptoutils.SkipPassword
	if password != nil {
		pf = cryptoutils.StaticPasswordFunc(password)
	}
	key, err := cryptoutils.UnmarshalPEMToPrivateKey(keyPEM, pf)
	if err != nil {
		return nil, fmt.Errorf("reading the private key: %w", err)
	}
	return signature.LoadSigner(key, crypto.SHA256)
}

// Sign signs the image ref in cosign's key-based format: a simple-signing payload naming
// its digest, signed with signer, stored as a layer of the sha256-<hex>.sig tag of its
// repository with the signature in the dev.cosignproject.cosign/signature annotation.
// Signatures already at the tag are kept. `cosign verify --key <public key>
// --insecure-ignore-tlog` accepts the result.
func Sign(ctx context.Context, ref name.Digest, signer signature.Signer, opts RegistryOptions) error {
	body, err := payload.Cosign{Image: ref}.MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := signer.SignMessage(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	return AppendSignature(ctx, ref, body, base64.StdEncoding.EncodeToString(sig), opts)
}

// AppendSignature adds a payload and its base64 signature to the signatures of ref.
func AppendSignature(ctx context.Context, ref name.Digest, body []byte, sig string, opts RegistryOptions) error {
	tag := sources.SignatureTag(ref.Context(), ref.DigestStr())
	var base v1.Image
	existing, err := remote.Image(tag, opts.remote(ctx)...)
	switch {
	case err == nil:
		base = existing
	case isNotFound(err):
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	default:
		return fmt.Errorf("reading the signatures of %s: %w", ref, err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:       static.NewLayer(body, sources.SimpleSigningMediaType),
		Annotations: map[string]string{sources.SignatureAnnotation: sig},
	})
	if err != nil {
		return err
	}
	return remote.Write(tag, img, opts.remote(ctx)...)
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// ParseDigest parses a reference by digest (repository@sha256:<hex>).
func ParseDigest(ref string, opts RegistryOptions) (name.Digest, error) {
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	return name.NewDigest(ref, nopts...)
}
