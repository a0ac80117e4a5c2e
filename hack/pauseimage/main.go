// Command pauseimage wraps a static pause binary (Kubernetes' build/pause/linux/pause.c,
// compiled by hack/node.sh) into a single-platform image, the sandbox image of a real
// node's containerd. It writes a docker-archive tarball, which `ctr images import` names
// after the image reference given here. Like hack/image, it needs no container engine and
// pulls nothing; the image is the one upstream's build/pause/Dockerfile makes: /pause on
// an empty base, user 65535:65535, entrypoint /pause.
//
// Usage (hack/node.sh runs it):
//
//	go run ./hack/pauseimage -binary pause -ref registry.k8s.io/pause:3.10.2 -out pause.tar
//
// Timestamps come from SOURCE_DATE_EPOCH (default 0): the same binary gives the same
// image.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The user of upstream's pause image.
const user = "65535:65535"

func main() {
	binary := flag.String("binary", "", "The static pause binary.")
	ref := flag.String("ref", "registry.k8s.io/pause:3.10.2", "The image reference the archive names.")
	out := flag.String("out", "", "The docker-archive tarball to write.")
	platform := flag.String("platform", "linux/amd64", "The image's platform.")
	flag.Parse()
	if *binary == "" || *out == "" {
		fail(fmt.Errorf("-binary and -out are required"))
	}
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s))
		}
		created = time.Unix(sec, 0).UTC()
	}
	p, err := v1.ParsePlatform(*platform)
	if err != nil {
		fail(err)
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		fail(err)
	}
	img, err := pauseImage(data, *p, created)
	if err != nil {
		fail(err)
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		fail(fmt.Errorf("image reference %q: %w", *ref, err))
	}
	if err := tarball.WriteToFile(*out+".tmp", tag, img); err != nil {
		fail(err)
	}
	if err := os.Rename(*out+".tmp", *out); err != nil {
		fail(err)
	}
	digest, err := img.Digest()
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "pauseimage: wrote %s (%s, manifest %s)\n", *out, tag, digest)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "pauseimage: %v\n", err)
	os.Exit(1)
}

// pauseImage is an image of one layer holding binary as /pause.
func pauseImage(binary []byte, p v1.Platform, created time.Time) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(binary)),
		Typeflag: tar.TypeReg, ModTime: created, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "kaddons hack/pauseimage: /pause"}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: created}
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Config = v1.Config{User: user, Entrypoint: []string{"/pause"}, WorkingDir: "/"}
	return mutate.ConfigFile(img, cfg)
}
