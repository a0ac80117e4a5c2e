package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"

	"github.com/kaddons/kaddons/internal/sources/publish"
)

// Verified is what Verify read from a release folder.
type Verified struct {
	Version string
	// Image is the manager image the installer and the chart name, repository:version@digest.
	Image string
	// Files are the files checksums.txt lists, every one checked.
	Files []string
}

// imageLine is an image reference of a manifest.
var imageLine = regexp.MustCompile(`(?m)^\s+image:\s*"?([^"\s]+)"?\s*$`)

// Verify checks the release folder dir against the public key it was signed with: the
// signature of checksums.txt, the checksum of every file and that no file is unlisted,
// that the image tarball's index is the digest the installer and the chart pin, that the
// chart and the krew manifest carry the release's version, and that the krew manifest's
// checksums are those of the plugin archives beside it.
func Verify(dir string, publicKeyPEM []byte) (Verified, error) {
	var v Verified
	verifier, err := loadVerifier(publicKeyPEM)
	if err != nil {
		return v, err
	}
	sums, err := os.ReadFile(filepath.Join(dir, ChecksumsFile))
	if err != nil {
		return v, err
	}
	sig, err := os.ReadFile(filepath.Join(dir, SignatureFile))
	if err != nil {
		return v, err
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil {
		return v, fmt.Errorf("%s is not base64: %w", SignatureFile, err)
	}
	if err := verifier.VerifySignature(bytes.NewReader(raw), bytes.NewReader(sums)); err != nil {
		return v, fmt.Errorf("%s does not verify with the key: %w", SignatureFile, err)
	}
	listed, err := checkSums(dir, sums)
	if err != nil {
		return v, err
	}
	v.Files = listed

	krew, err := readKrewManifest(filepath.Join(dir, KrewManifestFile))
	if err != nil {
		return v, err
	}
	v.Version = krew.Spec.Version
	if !releaseVersion.MatchString(v.Version) {
		return v, fmt.Errorf("%s: version %q is not a release version", KrewManifestFile, v.Version)
	}
	for _, want := range []string{InstallerFile, KrewManifestFile, ImageArchiveFile(v.Version), ChartFile(v.Version)} {
		if !slices.Contains(listed, want) {
			return v, fmt.Errorf("the release has no %s", want)
		}
	}
	if err := checkKrew(dir, krew, v.Version, listed); err != nil {
		return v, err
	}

	repository, digest, err := imageArchiveDigest(filepath.Join(dir, ImageArchiveFile(v.Version)), v.Version)
	if err != nil {
		return v, err
	}
	v.Image = repository + ":" + v.Version + "@" + digest
	installer, err := os.ReadFile(filepath.Join(dir, InstallerFile))
	if err != nil {
		return v, err
	}
	images := imageLine.FindAllSubmatch(installer, -1)
	if len(images) == 0 {
		return v, fmt.Errorf("%s names no image", InstallerFile)
	}
	for _, m := range images {
		if string(m[1]) != v.Image {
			return v, fmt.Errorf("%s runs the image %s, want the release's %s", InstallerFile, m[1], v.Image)
		}
	}
	return v, checkChart(filepath.Join(dir, ChartFile(v.Version)), v.Version, repository, digest)
}

// checkKrew checks that the krew manifest names, for each platform, the plugin archive of
// version beside it in dir (one of listed) with that archive's sha256.
func checkKrew(dir string, krew krewPlugin, version string, listed []string) error {
	if len(krew.Spec.Platforms) == 0 {
		return fmt.Errorf("%s lists no platform", KrewManifestFile)
	}
	for _, p := range krew.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		file := path.Base(p.URI)
		if file != PluginArchiveFile(version, platform) {
			return fmt.Errorf("%s: %s's archive is %s, want %s", KrewManifestFile, platform, file, PluginArchiveFile(version, platform))
		}
		if !slices.Contains(listed, file) {
			return fmt.Errorf("%s: %s is not in the release", KrewManifestFile, file)
		}
		sum, err := fileSHA256(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		if p.Sha256 != sum {
			return fmt.Errorf("%s: %s's sha256 is %s, the file's %s", KrewManifestFile, file, p.Sha256, sum)
		}
	}
	return nil
}

// loadVerifier reads a PEM public key.
func loadVerifier(publicKeyPEM []byte) (signature.Verifier, error) {
	key, err := cryptoutils.UnmarshalPEMToPublicKey(publicKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the public key: %w", err)
	}
	return signature.LoadVerifier(key, crypto.SHA256)
}

// checkSums checks each line of a checksums file against the file it names in dir, and
// that dir holds no other file. It returns the names listed.
func checkSums(dir string, sums []byte) ([]string, error) {
	var listed []string
	s := bufio.NewScanner(bytes.NewReader(sums))
	for s.Scan() {
		sum, file, ok := strings.Cut(s.Text(), "  ")
		if !ok || file == "" || strings.ContainsAny(file, `/\`) {
			return nil, fmt.Errorf("%s: malformed line %q", ChecksumsFile, s.Text())
		}
		got, err := fileSHA256(filepath.Join(dir, file))
		if err != nil {
			return nil, fmt.Errorf("%s lists %s: %w", ChecksumsFile, file, err)
		}
		if got != sum {
			return nil, fmt.Errorf("%s: sha256 %s, but %s lists %s", file, got, ChecksumsFile, sum)
		}
		listed = append(listed, file)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() != ChecksumsFile && e.Name() != SignatureFile && !slices.Contains(listed, e.Name()) {
			return nil, fmt.Errorf("%s is in the release folder but not in %s: it is not signed", e.Name(), ChecksumsFile)
		}
	}
	return listed, nil
}

// readKrewManifest reads a krew plugin manifest.
func readKrewManifest(file string) (krewPlugin, error) {
	var p krewPlugin
	data, err := os.ReadFile(file)
	if err != nil {
		return p, err
	}
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	if p.Kind != "Plugin" || p.Metadata.Name != pluginName {
		return p, fmt.Errorf("%s is not the krew manifest of the %s plugin", filepath.Base(file), pluginName)
	}
	return p, nil
}

// imageArchiveDigest reads an OCI layout tarball holding one image index named
// repository:version and returns the repository and the index digest, after checking
// that every blob of the index is there and matches its digest.
func imageArchiveDigest(archive, version string) (repository, digest string, err error) {
	tmp, err := os.MkdirTemp("", "kaddons-release-image-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck
	if err := untar(archive, tmp); err != nil {
		return "", "", err
	}
	index, err := readLayoutIndex(tmp)
	if err != nil {
		return "", "", err
	}
	if len(index.Manifests) != 1 {
		return "", "", fmt.Errorf("%s holds %d entries, want one image index", filepath.Base(archive), len(index.Manifests))
	}
	d := index.Manifests[0]
	named := d.Annotations[containerdNameAnnotation]
	repository, tag, ok := strings.Cut(named, ":"+version)
	if !ok || tag != "" || d.Annotations[refNameAnnotation] != version {
		return "", "", fmt.Errorf("%s names its image %q (tag %q), want REPOSITORY:%s", filepath.Base(archive), named,
			d.Annotations[refNameAnnotation], version)
	}
	p, err := layout.FromPath(tmp)
	if err != nil {
		return "", "", err
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return "", "", err
	}
	if err := checkIndex(ii, d.Digest); err != nil {
		return "", "", fmt.Errorf("%s: %w", filepath.Base(archive), err)
	}
	return repository, d.Digest.String(), nil
}

// checkIndex reads the index with digest d and every image and layer it names, failing
// on any blob whose content is not its digest.
func checkIndex(ii v1.ImageIndex, d v1.Hash) error {
	idx, err := ii.ImageIndex(d)
	if err != nil {
		return err
	}
	if got, err := idx.Digest(); err != nil || got != d {
		return fmt.Errorf("the index %s reads as %s (%v)", d, got, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) == 0 {
		return errors.New("the image index lists no image")
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		if got, err := img.Digest(); err != nil || got != desc.Digest {
			return fmt.Errorf("the image %s reads as %s (%v)", desc.Digest, got, err)
		}
		config, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		configName, err := img.ConfigName()
		if err != nil {
			return err
		}
		if got, _, err := v1.SHA256(bytes.NewReader(config)); err != nil || got != configName {
			return fmt.Errorf("the config of %s holds %s, want %s (%v)", desc.Digest, got, configName, err)
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			want, err := l.Digest()
			if err != nil {
				return err
			}
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			got, _, err := v1.SHA256(rc)
			_ = rc.Close()
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("layer %s of %s holds %s", want, desc.Platform, got)
			}
		}
	}
	return nil
}

// checkChart checks a packaged chart's version, appVersion and image values.
func checkChart(file, version, repository, digest string) error {
	ch, err := loader.LoadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	if ch.Metadata.Version != strings.TrimPrefix(version, "v") || ch.Metadata.AppVersion != version {
		return fmt.Errorf("%s: version %s, appVersion %s; want %s and %s", filepath.Base(file), ch.Metadata.Version,
			ch.Metadata.AppVersion, strings.TrimPrefix(version, "v"), version)
	}
	manager, _ := ch.Values["manager"].(map[string]any)
	image, _ := manager["image"].(map[string]any)
	if image["repository"] != repository || image["tag"] != version || image["digest"] != digest {
		return fmt.Errorf("%s: the image values are %v, want repository %s, tag %s, digest %s", filepath.Base(file), image,
			repository, version, digest)
	}
	return nil
}

// untar extracts the regular files of a tar into dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", filepath.Base(archive), err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		clean := path.Clean(h.Name)
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%s: entry %q leaves the archive", filepath.Base(archive), h.Name)
		}
		out := filepath.Join(dir, filepath.FromSlash(clean))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		w, err := os.Create(out)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, tr) //nolint:gosec // an image tarball's blobs are as large as the image
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// Push verifies the release folder dir with the signer's public key, pushes its image
// index to repository:version and signs it there in cosign's format. It returns the
// pushed reference by digest.
func Push(ctx context.Context, dir, repository string, signer signature.Signer, insecure bool) (string, error) {
	pub, err := signer.PublicKey()
	if err != nil {
		return "", err
	}
	pem, err := cryptoutils.MarshalPublicKeyToPEM(pub)
	if err != nil {
		return "", err
	}
	v, err := Verify(dir, pem)
	if err != nil {
		return "", fmt.Errorf("the release does not verify with the signing key: %w", err)
	}
	tmp, err := os.MkdirTemp("", "kaddons-release-push-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck
	if err := untar(filepath.Join(dir, ImageArchiveFile(v.Version)), tmp); err != nil {
		return "", err
	}
	index, err := readLayoutIndex(tmp)
	if err != nil {
		return "", err
	}
	p, err := layout.FromPath(tmp)
	if err != nil {
		return "", err
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	idx, err := ii.ImageIndex(index.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	tag, err := name.NewTag(repository+":"+v.Version, nopts...)
	if err != nil {
		return "", err
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", tag, err)
	}
	ref := tag.Context().Digest(index.Manifests[0].Digest.String())
	if err := publish.Sign(ctx, ref, signer, publish.RegistryOptions{Insecure: insecure, Keychain: authn.DefaultKeychain}); err != nil {
		return "", fmt.Errorf("signing %s: %w", ref, err)
	}
	return ref.String(), nil
}
