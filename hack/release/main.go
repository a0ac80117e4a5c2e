// Command release writes, pushes and verifies a kaddons release (make release,
// make release-push, make release-verify):
//
//	go run ./hack/release build  -version v0.1.0 -key cosign.key [-out dist/release] ...
//	go run ./hack/release push   -dir dist/release/v0.1.0 -image ghcr.io/kaddons/kaddons -key cosign.key
//	go run ./hack/release verify -dir dist/release/v0.1.0 -key cosign.pub
//
// build writes into OUT/VERSION: the manager image for every image platform as an OCI
// layout tarball, install.yaml pinned to the image's digest, the Helm chart package of
// that version, the kubectl plugin for every plugin platform as a tar.gz, the krew
// manifest, checksums.txt (sha256sum's format) and its signature, checksums.txt.sig, in
// cosign's blob format (`cosign verify-blob --key cosign.pub --signature
// checksums.txt.sig checksums.txt` accepts it). The signing key is a PEM private key,
// cosign's encrypted format included, whose password COSIGN_PASSWORD holds.
//
// push pushes the image of a release to a registry under the release's tag and signs it
// there in cosign's format. verify checks a release folder the way a user or a mirror
// would: the signature, every checksum, and that the installer, the chart and the krew
// manifest name exactly the artifacts beside them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// usage is printed for a missing or unknown subcommand.
const usage = "usage: release build|push|verify [flags] (-h for each one's flags)"

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:])
	case "push":
		return runPush(ctx, args[1:])
	case "verify":
		return runVerify(args[1:])
	default:
		return fmt.Errorf("unknown subcommand %q; %s", args[0], usage)
	}
}

func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var o BuildOptions
	var out, imagePlatforms, pluginPlatforms, key string
	fs.StringVar(&o.Version, "version", "", "The release, vMAJOR.MINOR.PATCH[-PRERELEASE] (required).")
	fs.StringVar(&o.Revision, "revision", "unknown", "The source commit the binaries report.")
	fs.StringVar(&out, "out", "dist/release", "The folder the release's own folder, OUT/VERSION, is written into.")
	fs.StringVar(&o.ImageRepository, "image", DefaultImageRepository, "The image repository the installer and the chart name.")
	fs.StringVar(&imagePlatforms, "image-platforms", "linux/amd64,linux/arm64", "The manager image's platforms, comma-separated.")
	fs.StringVar(&pluginPlatforms, "plugin-platforms", strings.Join(DefaultPluginPlatforms, ","),
		"The kubectl plugin's platforms, comma-separated.")
	fs.StringVar(&o.DownloadURL, "download-url", DefaultDownloadURL,
		"Where the release's files are downloaded from; {version} stands for the version. The krew manifest names it.")
	fs.StringVar(&o.Tags, "tags", "without_exec_applier,without_direct_applier", "Go build tags of the manager.")
	fs.StringVar(&o.Kubectl, "kubectl", "kubectl", "The kubectl whose kustomize renders config/default.")
	fs.StringVar(&key, "key", "", "The signing key, a PEM private key (cosign's encrypted format too, with COSIGN_PASSWORD); required.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if key == "" {
		return errors.New("a release is signed: give the signing key with -key (make release SIGNING_KEY=cosign.key)")
	}
	signer, err := loadSigner(key)
	if err != nil {
		return err
	}
	o.Signer = signer
	o.ImagePlatforms = splitList(imagePlatforms)
	o.PluginPlatforms = splitList(pluginPlatforms)
	o.Dir = filepath.Join(out, o.Version)
	return Build(ctx, o)
}

func runPush(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	var dir, image, key string
	var insecure bool
	fs.StringVar(&dir, "dir", "", "The release folder (OUT/VERSION of build); required.")
	fs.StringVar(&image, "image", DefaultImageRepository, "The repository to push the image to, tagged with the release's version.")
	fs.StringVar(&key, "key", "", "The signing key; required: the pushed image is signed.")
	fs.BoolVar(&insecure, "insecure", false, "Reach the registry over plain HTTP (a registry on loopback).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir == "" || key == "" {
		return errors.New("push needs -dir and -key")
	}
	signer, err := loadSigner(key)
	if err != nil {
		return err
	}
	ref, err := Push(ctx, dir, image, signer, insecure)
	if err != nil {
		return err
	}
	fmt.Println(ref)
	return nil
}

func runVerify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var dir, key string
	fs.StringVar(&dir, "dir", "", "The release folder; required.")
	fs.StringVar(&key, "key", "", "The public key the release is signed with (PEM); required.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir == "" || key == "" {
		return errors.New("verify needs -dir and -key")
	}
	pub, err := os.ReadFile(key)
	if err != nil {
		return err
	}
	r, err := Verify(dir, pub)
	if err != nil {
		return err
	}
	fmt.Printf("verified %s: %d files, image %s\n", dir, len(r.Files), r.Image)
	return nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
