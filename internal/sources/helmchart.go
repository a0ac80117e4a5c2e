package sources

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of a Helm chart in an OCI registry, as `helm push` writes it: the config
// is the chart's metadata (Chart.yaml as JSON), the content layer the chart's .tgz, and
// an optional layer its provenance file.
const (
	HelmChartConfigMediaType     types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartContentMediaType    types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	HelmChartProvenanceMediaType types.MediaType = "application/vnd.cncf.helm.chart.provenance.v1.prov"
)

// chartName and chartVersion are what a chart's name and version must look like to name
// a package folder and a channel entry: a DNS label, and letters, digits, '.', '+', '_'
// and '-' without "..", as the channels catalog requires.
var (
	chartName    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	chartVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,127}$`)
)

// isHelmChart reports whether the manifest is a Helm chart's.
func isHelmChart(m *v1.Manifest) bool { return m.Config.MediaType == HelmChartConfigMediaType }

// chartMeta is what chartTree reads of a chart's metadata.
type chartMeta struct{ Name, Version string }

// chartTree lays out the Helm chart of the image ref (an OCI artifact as `helm push`
// writes it, pulled by digest, its signature already checked) as a channels tree of one
// package: packages/<name>/<version>/ holds the chart, and a channel file "stable" lists
// that version, so that a Package names it by spec.package and the source by
// spec.sourceRef. The chart's archive is checked against its digest before anything of
// it is extracted, then extracted as a bundle's layer is (the same caps, no link or path
// out of the tree); it must hold one folder, named after the chart.
func (f *fetcher) chartTree(img v1.Image, m *v1.Manifest, ref name.Digest, st *stage) error {
	meta, err := readChartMeta(img, ref)
	if err != nil {
		return err
	}
	data, err := f.chartArchive(img, m, ref)
	if err != nil {
		return err
	}
	unpacked := st.path("chart")
	if err := mkdir(unpacked); err != nil {
		return err
	}
	if err := extractCharged(bytes.NewReader(data), unpacked, f.limits, st.charge); err != nil {
		return err
	}
	return layOutChart(unpacked, st.path("tree"), meta, ref)
}

// readChartMeta reads the chart's name and version from the image's configuration and
// checks that they can name a package folder and a channel entry.
func readChartMeta(img v1.Image, ref name.Digest) (chartMeta, error) {
	raw, err := img.RawConfigFile()
	if err != nil {
		return chartMeta{}, registryError(err, "reading the chart metadata of %s", ref)
	}
	var meta chartMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return chartMeta{}, errorf(ReasonInvalidBundle, err, "%s: the chart metadata is not JSON", ref)
	}
	if !chartName.MatchString(meta.Name) || !chartVersion.MatchString(meta.Version) || strings.Contains(meta.Version, "..") {
		return chartMeta{}, errorf(ReasonInvalidBundle, nil, "%s: chart %q version %q cannot name a package "+
			"(a DNS label, and a version of letters, digits, '.', '+', '_' and '-')", ref, meta.Name, meta.Version)
	}
	return meta, nil
}

// chartArchive returns the chart's .tgz, read whole (a chart is at most the cap on a
// bundle) and checked against its digest.
func (f *fetcher) chartArchive(img v1.Image, m *v1.Manifest, ref name.Digest) ([]byte, error) {
	var content *v1.Descriptor
	for i, l := range m.Layers {
		switch l.MediaType {
		case HelmChartContentMediaType:
			if content != nil {
				return nil, errorf(ReasonInvalidBundle, nil, "%s has two chart layers", ref)
			}
			content = &m.Layers[i]
		case HelmChartProvenanceMediaType:
		default:
			return nil, errorf(ReasonInvalidBundle, nil, "%s: a Helm chart with a layer of type %s", ref, l.MediaType)
		}
	}
	if content == nil {
		return nil, errorf(ReasonInvalidBundle, nil, "%s is a Helm chart without its %s layer", ref, HelmChartContentMediaType)
	}
	if content.Size > f.limits.MaxBytes {
		return nil, errorf(ReasonArchiveRefused, nil, "%s: the chart has %d bytes, more than the cap of %d", ref, content.Size, f.limits.MaxBytes)
	}
	layer, err := img.LayerByDigest(content.Digest)
	if err != nil {
		return nil, registryError(err, "reading the chart of %s", ref)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, registryError(err, "pulling the chart of %s", ref)
	}
	defer rc.Close() //nolint:errcheck
	data, err := io.ReadAll(io.LimitReader(rc, content.Size+1))
	if err != nil {
		return nil, layerError(err, ref)
	}
	if sum := sha256.Sum256(data); int64(len(data)) != content.Size || "sha256:"+hex.EncodeToString(sum[:]) != content.Digest.String() {
		return nil, errorf(ReasonDigestMismatch, nil, "%s: the chart does not match its digest %s", ref, content.Digest)
	}
	return data, nil
}

// layOutChart moves the chart folder extracted into unpacked to
// tree/packages/<name>/<version>/ and writes the channel file tree/stable that lists it.
func layOutChart(unpacked, tree string, meta chartMeta, ref name.Digest) error {
	entries, err := os.ReadDir(unpacked)
	if err != nil {
		return errorf(ReasonFetchFailed, err, "reading the chart of %s", ref)
	}
	if len(entries) != 1 || entries[0].Name() != meta.Name || !entries[0].IsDir() {
		return errorf(ReasonInvalidBundle, nil, "%s: the chart's archive must hold one folder, %s/", ref, meta.Name)
	}
	pkg := filepath.Join(tree, "packages", meta.Name)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	if err := os.Rename(filepath.Join(unpacked, meta.Name), filepath.Join(pkg, meta.Version)); err != nil {
		return errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	channel := fmt.Sprintf("# The Helm chart %s, pulled by digest.\nmanifests:\n- name: %s\n  version: %s\n", ref, meta.Name, meta.Version)
	if err := os.WriteFile(filepath.Join(tree, "stable"), []byte(channel), 0o644); err != nil {
		return errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	return nil
}
