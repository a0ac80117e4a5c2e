package sources

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"
)

// The bundle format follows the Manifest Bundle KEP of sig-cluster-lifecycle's addons
// project: labels `<namespace>.mediatype.<version>`, `<namespace>.bundle.manifests.<version>`
// and `<namespace>.bundle.metadata.<version>` on the image, and the same keys in
// metadata/annotations.yaml, which wins on conflict. kaddons' namespace is kaddons.dev.
const (
	// LabelNamespace is the namespace of every kaddons bundle key.
	LabelNamespace = "kaddons.dev"
	// LabelMediaType names the bundle's content; MediaTypeChannels for a kaddons tree.
	LabelMediaType = LabelNamespace + ".mediatype.v1"
	// LabelManifests is the folder of the bundle that holds the channels tree.
	LabelManifests = LabelNamespace + ".bundle.manifests.v1"
	// LabelMetadata is the folder of the bundle that holds annotations.yaml.
	LabelMetadata = LabelNamespace + ".bundle.metadata.v1"
	// LabelOperatorID is the id of the operator the bundle is meant for.
	LabelOperatorID = LabelNamespace + ".operator.id.v1"
	// LabelMinOperatorVersion is the oldest operator version that can apply the bundle.
	LabelMinOperatorVersion = LabelNamespace + ".operator.min-version.v1"
	// LabelKubernetesVersions is the semver range of the cluster versions it supports.
	LabelKubernetesVersions = LabelNamespace + ".kubernetes.versions.v1"

	// MediaTypeChannels is the mediatype of a kaddons channels tree: channel files at the
	// top of the manifests folder, packages/<addon>/<version>/ below.
	MediaTypeChannels = "kaddons-channels-v1"

	// DefaultManifestsDir and DefaultMetadataDir are the folders a bundle built by kaddons
	// uses (the KEP's layout).
	DefaultManifestsDir = "manifests/"
	DefaultMetadataDir  = "metadata/"

	// AnnotationsFile is the name of the metadata file in the metadata folder.
	AnnotationsFile = "annotations.yaml"
	// PackageMetadataFile is the per-version metadata file of a package:
	// packages/<addon>/<version>/metadata.yaml.
	PackageMetadataFile = "metadata.yaml"

	// DefaultOperatorID is the id of an operator whose configuration sets none.
	DefaultOperatorID = "kaddons"
)

// maxMetadataBytes bounds annotations.yaml and a package's metadata.yaml.
const maxMetadataBytes = 64 << 10

// operatorIDPattern is what an operator id may look like: a DNS label-like name.
var operatorIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// bundleKeys are the keys a bundle's labels and annotations.yaml may carry.
var bundleKeys = map[string]bool{
	LabelMediaType: true, LabelManifests: true, LabelMetadata: true,
	LabelOperatorID: true, LabelMinOperatorVersion: true, LabelKubernetesVersions: true,
}

// packageKeys are the keys a package's metadata.yaml may carry: only its constraints.
var packageKeys = map[string]bool{
	LabelOperatorID: true, LabelMinOperatorVersion: true, LabelKubernetesVersions: true,
}

// Bundle is what a bundle's labels and metadata file say, merged: where its manifests
// and metadata are, and its Metadata.
type Bundle struct {
	// ManifestsDir is the slash-separated folder, relative to the bundle's root, that
	// holds the channels tree; "." for the root.
	ManifestsDir string
	// MetadataDir is the folder that holds annotations.yaml.
	MetadataDir string
	// Metadata is the bundle's mediatype and constraints.
	Metadata Metadata
}

// annotationsDocument is metadata/annotations.yaml.
type annotationsDocument struct {
	Annotations map[string]string `json:"annotations"`
}

// ParseAnnotations decodes an annotations.yaml strictly: a document with one
// `annotations:` map; unknown top-level fields and unknown kaddons.dev keys are errors;
// keys of other namespaces (another tool's) are ignored.
func ParseAnnotations(data []byte) (map[string]string, error) {
	if len(data) > maxMetadataBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxMetadataBytes)
	}
	var doc annotationsDocument
	if err := yaml.UnmarshalStrict(trimBOM(data), &doc); err != nil {
		return nil, err
	}
	if doc.Annotations == nil {
		return nil, errors.New("no annotations: map")
	}
	return ownKeys(doc.Annotations, bundleKeys)
}

// ownKeys returns the kaddons.dev keys of m, or an error naming an unknown one.
func ownKeys(m map[string]string, allowed map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range sortedKeys(m) {
		if !strings.HasPrefix(k, LabelNamespace+".") {
			continue
		}
		if !allowed[k] {
			return nil, fmt.Errorf("unknown key %q (known: %s)", k, strings.Join(sortedKeys(allowed), ", "))
		}
		out[k] = m[k]
	}
	return out, nil
}

// ParseBundle merges an image's labels with its annotations.yaml (nil when the bundle has
// none; the file wins on conflict) and checks every value: the mediatype is
// MediaTypeChannels, the folders are relative paths inside the bundle, the operator id is
// a name, the minimum version a semantic version, the range a semver constraint.
// requireMediaType says whether a bundle without a mediatype is refused (an image must
// say what it carries; a directory without annotations.yaml is a plain channels tree).
func ParseBundle(labels map[string]string, annotations []byte, requireMediaType bool) (Bundle, error) {
	keys, err := ownKeys(labels, bundleKeys)
	if err != nil {
		return Bundle{}, fmt.Errorf("image labels: %w", err)
	}
	if annotations != nil {
		fromFile, err := ParseAnnotations(annotations)
		if err != nil {
			return Bundle{}, fmt.Errorf("%s: %w", AnnotationsFile, err)
		}
		for k, v := range fromFile {
			keys[k] = v
		}
	}
	b := Bundle{
		ManifestsDir: ".",
		MetadataDir:  strings.TrimSuffix(DefaultMetadataDir, "/"),
		Metadata: Metadata{
			MediaType:          keys[LabelMediaType],
			OperatorID:         keys[LabelOperatorID],
			MinOperatorVersion: keys[LabelMinOperatorVersion],
			KubernetesVersions: keys[LabelKubernetesVersions],
		},
	}
	switch {
	case b.Metadata.MediaType == "" && requireMediaType:
		return Bundle{}, fmt.Errorf("no %s label or annotation: not a kaddons bundle", LabelMediaType)
	case b.Metadata.MediaType == "":
		b.Metadata.MediaType = MediaTypeChannels
	case b.Metadata.MediaType != MediaTypeChannels:
		return Bundle{}, fmt.Errorf("%s is %q, not %q: not a kaddons channels tree", LabelMediaType,
			b.Metadata.MediaType, MediaTypeChannels)
	}
	for key, dir := range map[string]*string{LabelManifests: &b.ManifestsDir, LabelMetadata: &b.MetadataDir} {
		v, ok := keys[key]
		if !ok {
			continue
		}
		clean, err := bundleDir(v)
		if err != nil {
			return Bundle{}, fmt.Errorf("%s: %w", key, err)
		}
		*dir = clean
	}
	if err := b.Metadata.Validate(); err != nil {
		return Bundle{}, err
	}
	return b, nil
}

// bundleDir checks a folder named by a label: relative, inside the bundle, slash-separated.
func bundleDir(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty")
	}
	if strings.HasPrefix(v, "/") || strings.Contains(v, `\`) {
		return "", fmt.Errorf("%q is not a relative path", v)
	}
	clean := path.Clean(v)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%q leaves the bundle", v)
	}
	return clean, nil
}

// Validate checks the metadata's values: an operator id that is a name, a minimum
// operator version that is a semantic version, a Kubernetes range that is a semver
// constraint.
func (m Metadata) Validate() error {
	if m.OperatorID != "" && !operatorIDPattern.MatchString(m.OperatorID) {
		return fmt.Errorf("%s: %q is not a valid operator id (lower-case letters, digits, '.' and '-')",
			LabelOperatorID, m.OperatorID)
	}
	if m.MinOperatorVersion != "" {
		if _, err := semver.StrictNewVersion(strings.TrimPrefix(m.MinOperatorVersion, "v")); err != nil {
			return fmt.Errorf("%s: %q is not a semantic version: %w", LabelMinOperatorVersion, m.MinOperatorVersion, err)
		}
	}
	if m.KubernetesVersions != "" {
		if _, err := semver.NewConstraint(m.KubernetesVersions); err != nil {
			return fmt.Errorf("%s: %q is not a version range: %w", LabelKubernetesVersions, m.KubernetesVersions, err)
		}
	}
	return nil
}

// Annotations returns the metadata as bundle keys (empty values left out), for labels
// and annotations.yaml.
func (b Bundle) Annotations() map[string]string {
	out := map[string]string{
		LabelMediaType: b.Metadata.MediaType,
		LabelManifests: dirLabel(b.ManifestsDir),
		LabelMetadata:  dirLabel(b.MetadataDir),
	}
	for k, v := range map[string]string{
		LabelOperatorID:         b.Metadata.OperatorID,
		LabelMinOperatorVersion: b.Metadata.MinOperatorVersion,
		LabelKubernetesVersions: b.Metadata.KubernetesVersions,
	} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

func dirLabel(dir string) string {
	if dir == "." || dir == "" {
		return "./"
	}
	return strings.TrimSuffix(dir, "/") + "/"
}

// MarshalAnnotations renders keys as an annotations.yaml.
func MarshalAnnotations(keys map[string]string) ([]byte, error) {
	return yaml.Marshal(annotationsDocument{Annotations: keys})
}

// ReadBundle reads the bundle rooted at root (a directory on disk): its
// <metadata>/annotations.yaml merged over labels, with the folders checked to exist and to
// be real directories inside root. It returns the bundle and the directory of its
// channels tree.
func ReadBundle(root string, labels map[string]string, requireMediaType bool) (Bundle, string, error) {
	metadataDir := strings.TrimSuffix(DefaultMetadataDir, "/")
	if v, ok := labels[LabelMetadata]; ok {
		d, err := bundleDir(v)
		if err != nil {
			return Bundle{}, "", errorf(ReasonInvalidBundle, err, "image label %s", LabelMetadata)
		}
		metadataDir = d
	}
	annotations, err := readSmallFile(root, path.Join(metadataDir, AnnotationsFile))
	if err != nil {
		return Bundle{}, "", errorf(ReasonInvalidBundle, err, "reading %s", path.Join(metadataDir, AnnotationsFile))
	}
	b, err := ParseBundle(labels, annotations, requireMediaType)
	if err != nil {
		return Bundle{}, "", errorf(ReasonInvalidBundle, err, "the bundle's metadata is invalid")
	}
	dir := filepath.Join(root, filepath.FromSlash(b.ManifestsDir))
	info, err := os.Lstat(dir)
	if err != nil || !info.IsDir() {
		return Bundle{}, "", errorf(ReasonInvalidBundle, err, "the bundle has no manifests folder %q", b.ManifestsDir)
	}
	return b, dir, nil
}

// readSmallFile reads name under root, refusing symlinks and files over
// maxMetadataBytes; a missing file returns nil and no error.
func readSmallFile(root, name string) ([]byte, error) {
	p := filepath.Join(root, filepath.FromSlash(name))
	info, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if info.Size() > maxMetadataBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxMetadataBytes)
	}
	return os.ReadFile(p)
}

// ReadPackageMetadata reads the constraints of one package version of a channels tree:
// packages/<addon>/<version>/metadata.yaml, with the same `annotations:` map as a bundle's
// annotations.yaml but only the operator id, minimum operator version and Kubernetes
// range keys. A package without the file has no constraints (a zero Metadata). The engine
// checks them with Check after the bundle's own.
func ReadPackageMetadata(fsys fs.FS, addon, version string) (Metadata, error) {
	if !fs.ValidPath(addon) || !fs.ValidPath(version) || strings.Contains(addon, "/") || strings.Contains(version, "/") {
		return Metadata{}, errorf(ReasonInvalidBundle, nil, "%s %s is not a valid package name", addon, version)
	}
	name := path.Join("packages", addon, version, PackageMetadataFile)
	info, err := fs.Stat(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return Metadata{}, nil
	}
	if err != nil {
		return Metadata{}, errorf(ReasonInvalidBundle, err, "reading %s", name)
	}
	if !info.Mode().IsRegular() || info.Size() > maxMetadataBytes {
		return Metadata{}, errorf(ReasonInvalidBundle, nil, "%s is not a regular file of at most %d bytes", name, maxMetadataBytes)
	}
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return Metadata{}, errorf(ReasonInvalidBundle, err, "reading %s", name)
	}
	m, err := ParsePackageMetadata(data)
	if err != nil {
		return Metadata{}, errorf(ReasonInvalidBundle, err, "%s is invalid", name)
	}
	return m, nil
}

// ParsePackageMetadata decodes a package's metadata.yaml strictly.
func ParsePackageMetadata(data []byte) (Metadata, error) {
	var doc annotationsDocument
	if err := yaml.UnmarshalStrict(trimBOM(data), &doc); err != nil {
		return Metadata{}, err
	}
	if doc.Annotations == nil {
		return Metadata{}, errors.New("no annotations: map")
	}
	keys, err := ownKeys(doc.Annotations, packageKeys)
	if err != nil {
		return Metadata{}, err
	}
	m := Metadata{
		OperatorID:         keys[LabelOperatorID],
		MinOperatorVersion: keys[LabelMinOperatorVersion],
		KubernetesVersions: keys[LabelKubernetesVersions],
	}
	return m, m.Validate()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// trimBOM drops a UTF-8 byte order mark, which some editors write.
func trimBOM(b []byte) []byte { return bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) }
