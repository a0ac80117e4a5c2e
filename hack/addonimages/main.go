// Command addonimages builds the images of the add-ons that a real node (hack/node.sh)
// runs, without a container engine and without pulling anything, as an air-gapped cluster
// gets them: each program is compiled from the Go module proxy (static, -trimpath, in a
// throwaway module under the cache), the root file systems that need system tools
// (iptables, conntrack, ipset) are unpacked from Debian packages, and each image is
// written as a docker archive that `ctr -n k8s.io images import` names with exactly the
// reference the package's manifest uses. linux/amd64 only.
//
// Usage:
//
//	go run ./hack/addonimages build [NAME[:TAG]...]   build what is not cached (default: every image)
//	go run ./hack/addonimages list [NAME[:TAG]...]    print "REFERENCE ARCHIVE" of each image
//	go run ./hack/addonimages recipes                 print each image and how it differs from upstream's
//
// Images are cached under $KADDONS_IMAGES_CACHE (default ~/.cache/kaddons/images), one
// folder per image and version, with a key of everything the image is made of (program
// versions, Debian package versions, recipe): a second run builds nothing. Timestamps come
// from SOURCE_DATE_EPOCH (default 0).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// recipeRevision changes whenever the way images are assembled changes, so that cached
// images are rebuilt.
const recipeRevision = "1"

var platform = v1.Platform{OS: "linux", Architecture: "amd64"}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	b, err := newBuilder()
	if err != nil {
		fail(err)
	}
	all, err := recipes(b)
	if err != nil {
		fail(err)
	}
	selected, err := selectRecipes(all, os.Args[2:])
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "build":
		start := time.Now()
		for _, r := range selected {
			if err := b.build(r); err != nil {
				fail(fmt.Errorf("%s: %w", r.ref, err))
			}
		}
		b.logf("%d image(s) ready in %s", len(selected), time.Since(start).Round(time.Second))
	case "list":
		for _, r := range selected {
			fmt.Printf("%s %s\n", r.ref, b.archive(r))
		}
	case "recipes":
		for _, r := range selected {
			fmt.Printf("%s\n    %s\n", r.ref, r.note)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: addonimages build|list|recipes [NAME[:TAG]...]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "addonimages: %v\n", err)
	os.Exit(1)
}

// selectRecipes picks the recipes named NAME (every version) or NAME:TAG; all without names.
func selectRecipes(all []recipe, names []string) ([]recipe, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []recipe
	for _, n := range names {
		name, tag, _ := strings.Cut(n, ":")
		found := false
		for _, r := range all {
			if r.name == name && (tag == "" || tag == r.version) {
				out, found = append(out, r), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no image %q (see `addonimages recipes`)", n)
		}
	}
	return out, nil
}

// builder builds images into its cache.
type builder struct {
	root    string // the repository
	cache   string
	created time.Time
}

func newBuilder() (*builder, error) {
	created, err := ociimage.SourceDateEpoch()
	if err != nil {
		return nil, err
	}
	cache := os.Getenv("KADDONS_IMAGES_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, err
		}
		cache = filepath.Join(dir, "kaddons", "images")
	}
	root, err := runCommand(".", nil, "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	return &builder{root: strings.TrimSpace(root), cache: cache, created: created}, nil
}

func (b *builder) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[addonimages] "+format+"\n", args...)
}

func (b *builder) run(dir, name string, args ...string) (string, error) {
	return runCommand(dir, nil, name, args...)
}

// dir is the cache folder of image r; archive its docker archive.
func (b *builder) dir(r recipe) string {
	return filepath.Join(b.cache, r.name, r.version)
}

func (b *builder) archive(r recipe) string { return filepath.Join(b.dir(r), "image.tar") }

// key is a digest of everything image r is made of that can change between runs.
func (b *builder) key(r recipe, debs []deb) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "revision %s\nref %s\nuser %s\nentrypoint %q\nworkdir %s\ncreated %d\nbase %t\nbusybox %t\n",
		recipeRevision, r.ref, r.user, r.entrypoint, r.workdir, b.created.Unix(), r.base, r.busybox)
	for _, p := range r.goPrograms {
		_, _ = fmt.Fprintf(h, "go %s@%s %s -> %s %q\n", p.module, p.version, p.pkg, p.dest, p.ldflags)
	}
	for _, d := range debs {
		_, _ = fmt.Fprintf(h, "deb %s %s\n", d.name, d.version)
	}
	links := make([]string, 0, len(r.links))
	for k, v := range r.links {
		links = append(links, k+" -> "+v)
	}
	sort.Strings(links)
	_, _ = fmt.Fprintf(h, "links %q\ncapabilities %q\n", links, r.capabilities)
	return hex.EncodeToString(h.Sum(nil))
}

// build builds image r unless the cache has it with the same key.
func (b *builder) build(r recipe) error {
	debs, err := b.resolveDebs(r.debs)
	if err != nil {
		return err
	}
	key := b.key(r, debs)
	keyFile := filepath.Join(b.dir(r), "key")
	if old, err := os.ReadFile(keyFile); err == nil && strings.TrimSpace(string(old)) == key {
		if _, err := os.Stat(b.archive(r)); err == nil {
			b.logf("%s: cached (%s)", r.ref, b.archive(r))
			return nil
		}
	}
	start := time.Now()
	b.logf("%s: building", r.ref)
	layers, err := b.layers(r, debs)
	if err != nil {
		return err
	}
	cfg := v1.Config{
		User:       r.user,
		Entrypoint: r.entrypoint,
		WorkingDir: r.workdir,
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.version":     r.version,
			"org.opencontainers.image.description": "built by kaddons hack/addonimages: " + r.note,
		},
	}
	if r.base {
		cfg.Env = append(cfg.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	img, err := ociimage.Image(platform, b.created, cfg, layers...)
	if err != nil {
		return err
	}
	if err := ociimage.WriteDockerArchive(b.archive(r), r.ref, img); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o644); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	info, err := os.Stat(b.archive(r))
	if err != nil {
		return err
	}
	b.logf("%s: built in %s (%s, %.1f MiB, manifest %s)", r.ref, time.Since(start).Round(time.Second),
		b.archive(r), float64(info.Size())/(1<<20), digest)
	return nil
}

// layers are the layers of r: the root file system (base files, Debian packages, r's own
// files), if any, then the programs.
func (b *builder) layers(r recipe, debs []deb) ([]ociimage.Addendum, error) {
	var layers []ociimage.Addendum
	var rootFiles []ociimage.File //nolint:prealloc // rootFS makes it, when the image has a root file system
	if r.base || len(debs) > 0 || r.files != nil {
		var err error
		if rootFiles, err = b.rootFS(r, debs); err != nil {
			return nil, err
		}
		// Before compiling anything: the root file system alone must be complete.
		if err := checkLinked(rootFiles); err != nil {
			return nil, err
		}
		l, err := ociimage.Layer(b.created, ociimage.Sorted(rootFiles))
		if err != nil {
			return nil, err
		}
		by := "kaddons hack/addonimages: base (users, groups, CA certificates)"
		if len(debs) > 0 {
			names := make([]string, 0, len(debs))
			for _, d := range debs {
				names = append(names, d.name+"="+d.version)
			}
			by = "kaddons hack/addonimages: Debian packages " + strings.Join(names, " ")
		}
		layers = append(layers, ociimage.Addendum{Layer: l, CreatedBy: by})
	}
	programs, err := b.programs(r)
	if err != nil {
		return nil, err
	}
	if err := checkLinked(append(rootFiles, programs...)); err != nil {
		return nil, err
	}
	l, err := ociimage.Layer(b.created, ociimage.Sorted(programs))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(programs))
	for _, p := range programs {
		if !p.Dir {
			names = append(names, p.Name)
		}
	}
	return append(layers, ociimage.Addendum{Layer: l, CreatedBy: "kaddons hack/addonimages: " + strings.Join(names, " ")}), nil
}

// rootFS is the lower layer of r: the base files, the Debian packages and r's own files.
func (b *builder) rootFS(r recipe, debs []deb) ([]ociimage.File, error) {
	var files []ociimage.File
	if r.base {
		certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
		if err != nil {
			return nil, fmt.Errorf("the CA certificates: %w", err)
		}
		files = append(files, baseFiles(certs)...)
	}
	if len(debs) > 0 {
		fs, err := b.unpackDebs(debs)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
		files = append(files, usrMergeLinks()...)
	}
	for name, target := range r.links {
		files = append(files, ociimage.File{Name: name, Symlink: target, Mode: 0o777})
	}
	if r.busybox {
		links, err := b.busyboxLinks(files)
		if err != nil {
			return nil, err
		}
		files = append(files, links...)
	}
	if r.files != nil {
		fs, err := r.files(b)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

// baseFiles are what distroless's static base has that the add-ons use: root, nobody
// (65534) and nonroot (65532), CA certificates, /tmp.
func baseFiles(certs []byte) []ociimage.File {
	return []ociimage.File{
		{Name: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Name: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: certs},
		{Name: "/home/nonroot", Mode: 0o700, Dir: true, UID: 65532, GID: 65532},
		{Name: rootHome, Mode: 0o700, Dir: true},
		{Name: "/tmp", Mode: 0o1777, Dir: true},
	}
}

// programs builds r's programs: the Go ones in a throwaway module per module version, the
// local ones by r.local.
func (b *builder) programs(r recipe) ([]ociimage.File, error) {
	var out []ociimage.File
	byModule := map[string][]goProgram{}
	var order []string
	for _, p := range r.goPrograms {
		k := p.module + "@" + p.version
		if _, ok := byModule[k]; !ok {
			order = append(order, k)
		}
		byModule[k] = append(byModule[k], p)
	}
	for _, k := range order {
		fs, err := b.goBuild(byModule[k])
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	if r.local != nil {
		fs, err := r.local(b)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	for i, f := range out {
		if c, ok := r.capabilities[f.Name]; ok {
			out[i].Xattrs = map[string]string{"security.capability": c}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the recipe has no program")
	}
	return out, nil
}
