// Command image builds the kaddons manager image without a container engine: one static
// manager binary per platform (channels embedded), on a base made here from nothing (no
// image is pulled), with CA certificates, user 65532, entrypoint /manager, OCI labels and
// an SPDX SBOM derived from the binary's build information. It writes a multi-platform
// OCI image index to an OCI layout folder or pushes it to a registry.
//
// Usage (make image runs it):
//
//	go run ./hack/image -image oci:bin/image          # an OCI layout folder
//	go run ./hack/image -image registry.example/kaddons:v0.1.0
//
// Pushing uses the credentials of ~/.docker/config.json, as docker and crane do. The
// image's timestamps come from SOURCE_DATE_EPOCH (default 0), so that the same source and
// toolchain give the same digests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// options are the command line.
type options struct {
	image     string
	platforms string
	tags      string
	pkg       string
	version   string
	revision  string
	source    string
	caCerts   string
	epoch     time.Time
}

func main() {
	var o options
	flag.StringVar(&o.image, "image", "oci:bin/image", "Where the image goes: oci:DIR[:TAG] writes an OCI layout "+
		"folder, anything else is an image reference to push to.")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "The platforms to build, comma-separated.")
	flag.StringVar(&o.tags, "tags", "without_exec_applier,without_direct_applier", "Go build tags of the manager.")
	flag.StringVar(&o.pkg, "package", ".", "The manager's main package.")
	flag.StringVar(&o.version, "version", "dev", "The version the binary reports and the image is labelled with.")
	flag.StringVar(&o.revision, "revision", "unknown", "The source revision (commit).")
	flag.StringVar(&o.source, "source", "https://github.com/kaddons/kaddons", "The source repository URL (label org.opencontainers.image.source).")
	flag.StringVar(&o.caCerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "The CA bundle to install as /etc/ssl/certs/ca-certificates.crt.")
	flag.Parse()
	epoch, err := ociimage.SourceDateEpoch()
	if err != nil {
		fail(err)
	}
	o.epoch = epoch

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	certs, err := os.ReadFile(o.caCerts)
	if err != nil {
		return fmt.Errorf("reading the CA certificates: %w", err)
	}
	platforms, err := parsePlatforms(o.platforms)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kaddons-image-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	meta := metadata{version: o.version, revision: o.revision, source: o.source, created: o.epoch}
	var images []platformImage
	for _, p := range platforms {
		binary := filepath.Join(tmp, "manager-"+p.OS+"-"+p.Architecture)
		stepStart := time.Now()
		if err := buildManager(ctx, o, p, binary); err != nil {
			return err
		}
		img, err := newImage(p, binary, certs, meta)
		if err != nil {
			return fmt.Errorf("assembling the %s image: %w", platformString(p), err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		logf("built %s image %s in %s", platformString(p), digest, time.Since(stepStart).Round(100*time.Millisecond))
		images = append(images, platformImage{platform: p, image: img})
	}
	index := newIndex(images, meta)
	digest, err := index.Digest()
	if err != nil {
		return err
	}

	if dir, tag, ok := ociLayout(o.image); ok {
		if err := writeLayout(dir, tag, index); err != nil {
			return err
		}
		logf("wrote the OCI layout %s (tag %s, index %s) in %s", dir, tag, digest, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	ref, err := name.ParseReference(o.image)
	if err != nil {
		return fmt.Errorf("image %q: %w", o.image, err)
	}
	if err := remote.WriteIndex(ref, index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	logf("pushed %s@%s in %s", ref.Context().Name(), digest, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// parsePlatforms parses os/arch[/variant] values, comma-separated.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", f, err)
		}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", f)
		}
		if p.Architecture == "arm64" && p.Variant == "" {
			p.Variant = "v8"
		}
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, errors.New("no platform to build")
	}
	return out, nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// buildManager compiles a static manager for platform p into out.
func buildManager(ctx context.Context, o options, p v1.Platform, out string) error {
	const pkg = "github.com/kaddons/kaddons/internal/version"
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Revision=%s", pkg, o.version, pkg, o.revision)
	args := []string{"build", "-trimpath", "-tags", o.tags, "-ldflags", ldflags, "-o", out, o.pkg}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	logf("compiling the manager for %s", platformString(p))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (%s): %w", strings.Join(args, " "), platformString(p), err)
	}
	return nil
}

// ociLayout tells whether image names an OCI layout folder, oci:DIR[:TAG].
func ociLayout(image string) (dir, tag string, ok bool) {
	rest, ok := strings.CutPrefix(image, "oci:")
	if !ok {
		return "", "", false
	}
	dir, tag = rest, "latest"
	if i := strings.LastIndex(rest, ":"); i > 0 && !strings.Contains(rest[i+1:], "/") {
		dir, tag = rest[:i], rest[i+1:]
	}
	return dir, tag, true
}

// writeLayout writes index into a fresh OCI layout at dir, named tag. An existing layout
// there is replaced; any other non-empty folder is left alone.
func writeLayout(dir, tag string, index v1.ImageIndex) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s is not empty and not an OCI layout; refusing to replace it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the OCI layout %s: %w", dir, err)
	}
	return p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	}))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "image: "+format+"\n", args...)
}
