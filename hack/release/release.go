package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/sigstore/sigstore/pkg/signature"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

const (
	// DefaultImageRepository is where the project publishes the manager image.
	DefaultImageRepository = "ghcr.io/kaddons/kaddons"
	// DefaultDownloadURL is where the project publishes a release's files.
	DefaultDownloadURL = "https://github.com/kaddons/kaddons/releases/download/{version}"

	// InstallerFile is the installer, pinned to the image digest.
	InstallerFile = "install.yaml"
	// KrewManifestFile is the krew plugin manifest (`kubectl krew install --manifest`).
	KrewManifestFile = "kaddons.yaml"
	// ChecksumsFile lists the sha256 of every other file, as sha256sum prints it.
	ChecksumsFile = "checksums.txt"
	// SignatureFile is the base64 signature of ChecksumsFile, cosign's blob format.
	SignatureFile = ChecksumsFile + ".sig"

	// pluginName is the plugin's name for kubectl and krew.
	pluginName = "kaddons"
	// pluginBinary is the plugin's executable; kubectl finds it on PATH.
	pluginBinary = "kubectl-kaddons"
	// completionScript completes `kubectl kaddons` (kubectl 1.26 and later run it).
	completionScript = "kubectl_complete-kaddons"

	// containerdNameAnnotation names an image of an OCI archive for `ctr images import`.
	containerdNameAnnotation = "io.containerd.image.name"
	// refNameAnnotation is the OCI layout's tag of an image.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// DefaultPluginPlatforms are the platforms the kubectl plugin is released for.
var DefaultPluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// releaseVersion is a release's version: semver with a leading v, as the tags are.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// BuildOptions describe one release.
type BuildOptions struct {
	Version         string
	Revision        string
	Dir             string // the release's folder; replaced
	ImageRepository string
	ImagePlatforms  []string
	PluginPlatforms []string
	DownloadURL     string
	Tags            string
	Kubectl         string
	Signer          signature.Signer
}

// ImageArchiveFile is the name of the image's OCI layout tarball for version.
func ImageArchiveFile(version string) string { return "kaddons-image-" + version + ".oci.tar" }

// ChartFile is the name of the chart package for version (the chart's version drops the v).
func ChartFile(version string) string { return "kaddons-" + strings.TrimPrefix(version, "v") + ".tgz" }

// PluginArchiveFile is the name of the plugin's archive for version and platform os/arch.
func PluginArchiveFile(version, platform string) string {
	return pluginBinary + "_" + version + "_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"
}

// Build writes the release o describes into o.Dir.
func Build(ctx context.Context, o BuildOptions) error {
	if !releaseVersion.MatchString(o.Version) {
		return fmt.Errorf("version %q is not a release version (vMAJOR.MINOR.PATCH[-PRERELEASE]): make release VERSION=v0.1.0", o.Version)
	}
	if len(o.ImagePlatforms) == 0 || len(o.PluginPlatforms) == 0 {
		return fmt.Errorf("a release needs at least one image platform and one plugin platform")
	}
	created, err := ociimage.SourceDateEpoch()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kaddons-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck
	if err := os.RemoveAll(o.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	start := time.Now()

	digest, err := buildImage(ctx, o, tmp)
	if err != nil {
		return err
	}
	image := o.ImageRepository + ":" + o.Version + "@" + digest
	logf("image %s", image)

	rendered, err := runOutput(ctx, nil, o.Kubectl, "kustomize", "config/default")
	if err != nil {
		return err
	}
	rendered = bytes.ReplaceAll(rendered, []byte("image: controller:latest"), []byte("image: "+image))
	installer, err := runOutput(ctx, rendered, "go", "run", "./hack/helmgen", "-installer")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, InstallerFile), installer, 0o644); err != nil {
		return err
	}
	if err := buildChart(ctx, o, rendered, tmp); err != nil {
		return err
	}
	archives := map[string]string{}
	for _, p := range o.PluginPlatforms {
		file, err := buildPlugin(ctx, o, p, tmp, created)
		if err != nil {
			return err
		}
		archives[p] = file
	}
	manifest, err := krewManifest(o, archives)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, KrewManifestFile), manifest, 0o644); err != nil {
		return err
	}
	if err := writeChecksums(o.Dir, o.Signer); err != nil {
		return err
	}
	logf("wrote the release %s into %s in %s", o.Version, o.Dir, time.Since(start).Round(time.Second))
	return nil
}

// buildImage builds the manager image (hack/image) into an OCI layout, names it for
// containerd's import, writes it as the release's tarball and returns its index digest.
func buildImage(ctx context.Context, o BuildOptions, tmp string) (string, error) {
	dir := filepath.Join(tmp, "image")
	if _, err := runOutput(ctx, nil, "go", "run", "./hack/image", "-image", "oci:"+dir+":"+o.Version,
		"-platforms", strings.Join(o.ImagePlatforms, ","), "-tags", o.Tags,
		"-version", o.Version, "-revision", o.Revision); err != nil {
		return "", err
	}
	index, err := readLayoutIndex(dir)
	if err != nil {
		return "", err
	}
	if len(index.Manifests) != 1 {
		return "", fmt.Errorf("the image layout holds %d entries, want the one image index", len(index.Manifests))
	}
	index.Manifests[0].Annotations[containerdNameAnnotation] = o.ImageRepository + ":" + o.Version
	data, err := json.Marshal(index)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), data, 0o644); err != nil {
		return "", err
	}
	if err := tarFolder(dir, filepath.Join(o.Dir, ImageArchiveFile(o.Version))); err != nil {
		return "", err
	}
	return index.Manifests[0].Digest.String(), nil
}

// readLayoutIndex reads the index.json of an OCI layout folder.
func readLayoutIndex(dir string) (*v1.IndexManifest, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	for i := range m.Manifests {
		if m.Manifests[i].Annotations == nil {
			m.Manifests[i].Annotations = map[string]string{}
		}
	}
	return m, nil
}

// buildChart writes the chart (hack/helmgen) of the rendered configuration, versioned
// as the release, and packages it as Helm does.
func buildChart(ctx context.Context, o BuildOptions, rendered []byte, tmp string) error {
	dir := filepath.Join(tmp, "chart", "kaddons")
	if _, err := runOutput(ctx, rendered, "go", "run", "./hack/helmgen", "-out", dir,
		"-chart-version", strings.TrimPrefix(o.Version, "v")); err != nil {
		return err
	}
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return fmt.Errorf("loading the chart: %w", err)
	}
	if err := ch.Validate(); err != nil {
		return fmt.Errorf("the chart: %w", err)
	}
	written, err := chartutil.Save(ch, o.Dir)
	if err != nil {
		return fmt.Errorf("packaging the chart: %w", err)
	}
	if filepath.Base(written) != ChartFile(o.Version) {
		return fmt.Errorf("helm packaged the chart as %s, want %s", filepath.Base(written), ChartFile(o.Version))
	}
	return nil
}

// buildPlugin compiles the kubectl plugin for platform (os/arch), stamped with the
// release's version, and archives it with its completion script. It returns the
// archive's name.
func buildPlugin(ctx context.Context, o BuildOptions, platform string, tmp string, created time.Time) (string, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return "", fmt.Errorf("plugin platform %q: want os/arch, such as darwin/arm64", platform)
	}
	binary := filepath.Join(tmp, "plugin", goos+"_"+goarch, pluginBinary)
	const pkg = "github.com/kaddons/kaddons/internal/version"
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Revision=%s", pkg, o.Version, pkg, o.Revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", binary, "./cmd/kubectl-kaddons")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stderr = os.Stderr
	logf("compiling the plugin for %s", platform)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compiling the plugin for %s: %w", platform, err)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	completion, err := os.ReadFile(filepath.Join("cmd", "kubectl-kaddons", completionScript))
	if err != nil {
		return "", err
	}
	name := PluginArchiveFile(o.Version, platform)
	data, err := tarGz(created, []archiveFile{{pluginBinary, bin}, {completionScript, completion}})
	if err != nil {
		return "", err
	}
	return name, os.WriteFile(filepath.Join(o.Dir, name), data, 0o644)
}

// archiveFile is an executable of a plugin archive.
type archiveFile struct {
	name string
	data []byte
}

// tarGz writes files, executable, into a gzip-compressed tar whose every timestamp is
// created, so that one source gives one archive.
func tarGz(created time.Time, files []archiveFile) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(f.data)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// krewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewPlugin struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   krewMetadata `json:"metadata"`
	Spec       krewSpec     `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	Sha256   string       `json:"sha256"`
	Bin      string       `json:"bin"`
	Files    []krewFile   `json:"files"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// krewManifest writes the krew manifest of the plugin archives (platform: file in o.Dir).
func krewManifest(o BuildOptions, archives map[string]string) ([]byte, error) {
	base := strings.TrimSuffix(strings.ReplaceAll(o.DownloadURL, "{version}", o.Version), "/")
	p := krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   krewMetadata{Name: pluginName},
		Spec: krewSpec{
			Version:          o.Version,
			Homepage:         "https://github.com/kaddons/kaddons",
			ShortDescription: "Manage cluster add-ons run by the kaddons operator",
			Description: "Lists, explains and drives the add-ons of the kaddons operator: get, tree, diff, " +
				"render, reconcile, suspend and resume, events, and check before a Kubernetes upgrade.",
		},
	}
	platforms := make([]string, 0, len(archives))
	for platform := range archives {
		platforms = append(platforms, platform)
	}
	slices.Sort(platforms)
	for _, platform := range platforms {
		file := archives[platform]
		sum, err := fileSHA256(filepath.Join(o.Dir, file))
		if err != nil {
			return nil, err
		}
		goos, goarch, _ := strings.Cut(platform, "/")
		p.Spec.Platforms = append(p.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			URI:      base + "/" + file,
			Sha256:   sum,
			Bin:      pluginBinary,
			Files:    []krewFile{{From: pluginBinary, To: "."}, {From: completionScript, To: "."}},
		})
	}
	return yaml.Marshal(p)
}

// writeChecksums lists the sha256 of every file of dir in ChecksumsFile and signs it.
func writeChecksums(dir string, signer signature.Signer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.IsDir() || e.Name() == ChecksumsFile || e.Name() == SignatureFile {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	sums := []byte(b.String())
	if err := os.WriteFile(filepath.Join(dir, ChecksumsFile), sums, 0o644); err != nil {
		return err
	}
	sig, err := signer.SignMessage(bytes.NewReader(sums))
	if err != nil {
		return fmt.Errorf("signing %s: %w", ChecksumsFile, err)
	}
	return os.WriteFile(filepath.Join(dir, SignatureFile), []byte(base64.StdEncoding.EncodeToString(sig)), 0o644)
}

// loadSigner reads a signing key file; COSIGN_PASSWORD decrypts cosign's format.
func loadSigner(path string) (signature.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var password []byte
	if p, ok := os.LookupEnv("COSIGN_PASSWORD"); ok {
		password = []byte(p)
	}
	return publish.LoadSigner(data, password)
}

// fileSHA256 is the hex sha256 of a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close() //nolint:errcheck
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tarFolder writes dir's files into the tar out, in lexical order, without timestamps
// or owners: an OCI layout tarball (an oci-archive).
func tarFolder(dir, out string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(n)))
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
		}
		if err == nil {
			_, err = tw.Write(data)
		}
		if err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// runOutput runs a command from the repository's root with stdin, returning stdout;
// stderr passes through.
func runOutput(ctx context.Context, stdin []byte, command string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, command, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", command, strings.Join(args, " "), err)
	}
	return out, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "release: "+format+"\n", args...)
}
