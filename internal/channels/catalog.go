// Package channels resolves add-on versions from channel files and renders the matching
// packages: with kustomize, or, for a plain package whose kustomization only lists its
// resource files, without it, to the same objects (see plainResources), or, for a
// package folder with a Chart.yaml, with the Helm SDK (see chart.go and the helm
// package).
//
// A source is a file system (the channels embedded in the manager binary, or a directory
// on disk) laid out as
//
//	<channel>                                  a channel file, e.g. stable
//	packages/<addon>/<version>/kustomization.yaml  and the manifests it lists, or
//	packages/<addon>/<version>/Chart.yaml          a Helm chart
//
// Channel files and rendered packages are cached: a channel file is parsed again only when
// its size or modification time changes, and a package is built again only when one of its
// files changes. Embedded files never change, so each is read once.
//
// A package is built on an in-memory file system that holds only its own files: it
// cannot load another package, the rest of the source, the disk or the network, may not
// contain symbolic links, and is capped in bytes, files and objects (see package.go).
package channels

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// DefaultChannel is the channel used when neither the add-on nor the operator names one.
const DefaultChannel = "stable"

// validName matches channel names: no path separators, no "..", no spaces.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$`)

// validAddon matches an add-on's component name in a channel entry and in packages/: a
// DNS label.
var validAddon = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// versionPattern matches a package version: letters, digits, '.', '+', '_' and '-',
// starting with a letter or digit, at most 128 characters. validVersion also refuses "..".
var versionPattern = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,127}$`)

// validVersion reports whether v can name a package folder: no '/', no "..".
func validVersion(v string) bool {
	return versionPattern.MatchString(v) && !strings.Contains(v, "..")
}

// Channel is the content of a channel file: the versions it recommends, one per add-on.
type Channel struct {
	// Manifests lists one entry per add-on.
	Manifests []Entry `json:"manifests"`
}

// Entry is one add-on version in a channel.
type Entry struct {
	// Name is the add-on's component name, e.g. coredns. It is required.
	Name string `json:"name"`
	// Version is the package version the channel recommends.
	Version string `json:"version"`
}

// Resolved is the package an add-on resolves to.
type Resolved struct {
	// Addon is the add-on's component name.
	Addon string
	// Version is the package version.
	Version string
	// Channel is the channel the version came from; empty when spec.version was set.
	Channel string
}

// Catalog resolves and renders packages from a channels file system. It is safe for
// concurrent use.
type Catalog struct {
	fsys           fs.FS
	name           string
	dir            string
	defaultChannel string

	mu       sync.Mutex
	channels map[string]cachedChannel
	renders  map[string]cachedRender
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

type cachedChannel struct {
	stamp   fileStamp
	channel *Channel
}

type cachedRender struct {
	fingerprint string
	manifest    string
}

// NewCatalog returns a Source reading the directory dir. defaultChannel applies to add-ons
// that name neither a version nor a channel; empty means DefaultChannel. No path, not
// even through a symbolic link, resolves outside dir (see rootFS).
func NewCatalog(dir, defaultChannel string) *Catalog {
	s := NewFSCatalog(rootFS(dir), dir, defaultChannel)
	s.dir = dir
	return s
}

// NewFSCatalog returns a Source reading fsys, whose root holds the channel files and
// packages/. name describes it in logs and errors (a path, or "builtin").
// defaultChannel applies to add-ons that name neither a version nor a channel; empty
// means DefaultChannel.
func NewFSCatalog(fsys fs.FS, name, defaultChannel string) *Catalog {
	if defaultChannel == "" {
		defaultChannel = DefaultChannel
	}
	return &Catalog{
		fsys:           fsys,
		name:           name,
		defaultChannel: defaultChannel,
		channels:       map[string]cachedChannel{},
		renders:        map[string]cachedRender{},
	}
}

// DefaultChannel returns the channel of add-ons that name neither a version nor a channel.
func (s *Catalog) DefaultChannel() string { return s.defaultChannel }

// Dir returns the channels directory, or "" when the source is not a directory on disk.
func (s *Catalog) Dir() string { return s.dir }

// Name describes the source: its directory, or the name NewFSCatalog was given.
func (s *Catalog) Name() string { return s.name }

// FS returns the file system the source reads.
func (s *Catalog) FS() fs.FS { return s.fsys }

// Resolve picks the package for addon: spec.version wins, otherwise the newest version
// the channel (or the default channel) lists. Candidates lists every version the
// channel offers, for a caller that chooses among them.
func (s *Catalog) Resolve(addon string, spec addonv1alpha1.CommonSpec) (Resolved, error) {
	candidates, err := s.Candidates(addon, spec)
	if err != nil {
		return Resolved{}, err
	}
	return candidates[0], nil
}

// Candidates lists the packages addon may resolve to, newest first (CompareVersions):
// the one spec.version pins, otherwise every version the channel (or the default
// channel) lists for it, as a kops channel lists one version per Kubernetes range. Each
// has a package. It never returns an empty list without an error.
func (s *Catalog) Candidates(addon string, spec addonv1alpha1.CommonSpec) ([]Resolved, error) {
	if spec.Version != "" {
		if !validVersion(spec.Version) {
			return nil, errorf(addonsv1alpha1.ReasonInvalidVersion, nil,
				"version %q is not a valid version: use letters, digits, '.', '+', '_' or '-' (no '/', no '..')",
				spec.Version)
		}
		if err := s.checkPackage(addon, spec.Version); err != nil {
			return nil, err
		}
		return []Resolved{{Addon: addon, Version: spec.Version}}, nil
	}

	name := spec.Channel
	if name == "" {
		name = s.defaultChannel
	}
	if !validName.MatchString(name) || strings.Contains(name, "..") || name == "packages" {
		return nil, errorf(addonsv1alpha1.ReasonChannelNotFound, nil, "channel %q is not a valid channel name", name)
	}
	ch, err := s.channel(name)
	if err != nil {
		return nil, err
	}
	var candidates []Resolved
	for _, e := range ch.Manifests {
		if e.Name != addon {
			continue
		}
		if err := s.checkPackage(addon, e.Version); err != nil {
			return nil, err
		}
		candidates = append(candidates, Resolved{Addon: addon, Version: e.Version, Channel: name})
	}
	if len(candidates) == 0 {
		return nil, errorf(addonsv1alpha1.ReasonChannelNotFound, nil, "channel %q does not list %s", name, addon)
	}
	slices.SortStableFunc(candidates, func(a, b Resolved) int { return CompareVersions(b.Version, a.Version) })
	return candidates, nil
}

// CompareVersions orders two package versions: as semantic versions ("v" optional,
// 1.12.1 < 1.14.6 < 1.14.6+kaddons.1 compare by their release parts first) when both are
// one, otherwise a semantic version before any other, and two others as strings. It
// returns -1, 0 or +1, as strings.Compare.
func CompareVersions(a, b string) int {
	va, errA := semver.NewVersion(a)
	vb, errB := semver.NewVersion(b)
	switch {
	case errA == nil && errB == nil:
		if c := va.Compare(vb); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	case errA == nil:
		return 1
	case errB == nil:
		return -1
	}
	return strings.Compare(a, b)
}

// channel returns the parsed channel file, reading it again only when it changed.
func (s *Catalog) channel(name string) (*Channel, error) {
	info, err := fs.Stat(s.fsys, name)
	if err != nil || info.IsDir() {
		return nil, errorf(addonsv1alpha1.ReasonChannelNotFound, nil, "channel %q does not exist (known channels: %s)",
			name, strings.Join(s.Channels(), ", "))
	}
	stamp := fileStamp{size: info.Size(), modTime: info.ModTime()}

	s.mu.Lock()
	cached, ok := s.channels[name]
	s.mu.Unlock()
	if ok && cached.stamp == stamp {
		return cached.channel, nil
	}

	data, err := fs.ReadFile(s.fsys, name)
	if err != nil {
		return nil, fmt.Errorf("reading channel %q: %w", name, err)
	}
	ch, err := ParseChannel(data)
	if err != nil {
		return nil, errorf(addonsv1alpha1.ReasonChannelNotFound, err, "channel %q is not a valid channel file", name)
	}
	s.mu.Lock()
	s.channels[name] = cachedChannel{stamp: stamp, channel: ch}
	s.mu.Unlock()
	return ch, nil
}

// ParseChannel decodes a channel file strictly: unknown fields and entries without a
// name or version are errors, because KDP matches unnamed entries to every add-on. An
// add-on may be listed more than once, with different versions (each package declares
// the Kubernetes versions it supports in its metadata.yaml, and the engine picks the
// newest that supports the cluster), but not twice with the same version. A name
// must be a DNS label and a version letters, digits, '.', '+', '_' and '-' (no '/', no
// ".."), so that an entry can only ever name a package folder of its own add-on.
func ParseChannel(data []byte) (*Channel, error) {
	ch := &Channel{}
	if err := yaml.UnmarshalStrict(data, ch); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, e := range ch.Manifests {
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("manifests[%d] has no name", i)
		case !validAddon.MatchString(e.Name):
			return nil, fmt.Errorf("manifests[%d] has the name %q, which is not a valid add-on name "+
				"(lowercase letters, digits and '-', at most 63)", i, e.Name)
		case e.Version == "":
			return nil, fmt.Errorf("manifests[%d] (%s) has no version", i, e.Name)
		case !validVersion(e.Version):
			return nil, fmt.Errorf("manifests[%d] (%s) has the version %q, which is not a valid version "+
				"(letters, digits, '.', '+', '_' or '-', no '/', no '..')", i, e.Name, e.Version)
		case seen[e.Name+"/"+e.Version]:
			return nil, fmt.Errorf("manifests[%d] lists %s %s a second time", i, e.Name, e.Version)
		}
		seen[e.Name+"/"+e.Version] = true
	}
	return ch, nil
}

// Channels lists the channel files of the source.
func (s *Catalog) Channels() []string {
	entries, _ := fs.ReadDir(s.fsys, ".")
	var names []string
	for _, e := range entries {
		if !e.IsDir() && validName.MatchString(e.Name()) && !strings.HasSuffix(e.Name(), ".md") &&
			!strings.HasSuffix(e.Name(), ".go") {
			names = append(names, e.Name())
		}
	}
	return names
}

// Versions lists the package versions available for addon, sorted.
func (s *Catalog) Versions(addon string) []string {
	if !validAddon.MatchString(addon) {
		return nil
	}
	entries, _ := fs.ReadDir(s.fsys, path.Join("packages", addon))
	var versions []string
	for _, e := range entries {
		if e.IsDir() {
			versions = append(versions, e.Name())
		}
	}
	sort.Strings(versions)
	return versions
}

// checkPackage reports VersionNotFound when addon has no package at version: a folder
// with a kustomization.yaml or a Helm chart's Chart.yaml.
func (s *Catalog) checkPackage(addon, version string) error {
	dir := packageDir(addon, version)
	if !isFile(s.fsys, path.Join(dir, "kustomization.yaml")) && !isFile(s.fsys, path.Join(dir, ChartFile)) {
		available := s.Versions(addon)
		return errorf(addonsv1alpha1.ReasonVersionNotFound, nil, "%s has no version %q (available: %s)",
			addon, version, strings.Join(available, ", "))
	}
	return nil
}

// packageDir is the slash-separated path of a package in the source.
func packageDir(addon, version string) string {
	return path.Join("packages", addon, version)
}

// Render builds the package of r and returns the YAML stream, as RenderPackage does; a
// Helm chart is rendered with its own values, as the release r.Addon in the default
// namespace.
func (s *Catalog) Render(r Resolved) (string, error) {
	return s.RenderPackage(context.Background(), Request{Package: r, ReleaseName: r.Addon, Namespace: "default"})
}

// RenderPackage builds the package of req and returns the YAML stream. The result is
// cached until a file of the package changes (and, for a Helm chart, until the values,
// the release or the cluster's capabilities do). A Helm chart is rendered by renderChart;
// a kustomize package takes no values.
//
// readPackage, checkAliases and checkReferences first refuse symbolic links, references
// outside the package (another version included), packages over the byte and file caps
// and YAML aliases that would expand past MaxAliasNodes; the YAML documents are then
// counted against the object cap that applies. A plain package (a kustomization that
// only lists resource files, see plainResources) is built by renderPlain into what
// kustomize would build, in linear time, and may hold up to MaxPlainPackageObjects
// objects; any other package is built by kustomize on an in-memory copy of
// packages/<addon>/<version>/ alone, on disk or embedded alike, and may hold up to
// MaxPackageObjects.
func (s *Catalog) RenderPackage(ctx context.Context, req Request) (string, error) {
	r := req.Package
	if !validAddon.MatchString(r.Addon) || !validVersion(r.Version) {
		return "", errorf(addonsv1alpha1.ReasonVersionNotFound, nil, "%s has no version %q", r.Addon, r.Version)
	}
	dir := packageDir(r.Addon, r.Version)
	key := r.Addon + "/" + r.Version
	fp, err := fingerprint(s.fsys, dir)
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonVersionNotFound, err, "%s has no version %q", r.Addon, r.Version)
	}

	if isFile(s.fsys, path.Join(dir, ChartFile)) {
		return s.renderChart(ctx, req, dir, key, fp)
	}
	if len(req.UserValues) > 0 {
		return "", errorf(addonsv1alpha1.ReasonValuesInvalid, nil,
			"spec.values is set, but package %s is not a Helm chart and takes no values; use the add-on's typed fields or spec.patches", key)
	}

	s.mu.Lock()
	cached, ok := s.renders[key]
	s.mu.Unlock()
	if ok && cached.fingerprint == fp {
		return cached.manifest, nil
	}

	files, err := readPackage(s.fsys, dir, key)
	if err != nil {
		return "", err
	}
	if err := checkAliases(key, files); err != nil {
		return "", err
	}
	if err := checkReferences(key, files); err != nil {
		return "", err
	}
	plain, isPlain := plainResources(files)
	limit, capOf := MaxPackageObjects, kustomizeCap
	if isPlain {
		limit, capOf = MaxPlainPackageObjects, plainCap
	}
	if n := countDocuments(files); n > limit {
		return "", tooLargef(key, "holds %d YAML documents, more than %d (%s)", n, limit, capOf)
	}
	var objects []*resource.Resource
	if isPlain {
		if objects, err = renderPlain(key, files, plain); err != nil {
			return "", err
		}
	} else {
		mem, err := memoryFS(dir, files)
		if err != nil {
			return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "reading package %s", key)
		}
		resMap, err := krusty.MakeKustomizer(renderOptions()).Run(mem, "/"+dir)
		if err != nil {
			return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "building package %s", key)
		}
		objects = resMap.Resources()
	}
	if n := len(objects); n > limit {
		return "", tooLargef(key, "renders %d objects, more than %d (%s)", n, limit, capOf)
	}
	if err := checkObjects(objects); err != nil {
		return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "package %s renders an object that cannot be applied", key)
	}
	out, err := encodeResources(objects)
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "encoding package %s", key)
	}
	s.mu.Lock()
	s.renders[key] = cachedRender{fingerprint: fp, manifest: string(out)}
	s.mu.Unlock()
	return string(out), nil
}

// entryInfo returns what the entry e of the folder listing at name names: the entry's
// own information (which reading the folder fetched), or, for a symbolic link, what the
// link leads to.
func entryInfo(fsys fs.FS, name string, e fs.DirEntry) (fs.FileInfo, error) {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.Info()
	}
	return fs.Stat(fsys, name)
}

// maxDepth bounds how deep fingerprint descends, which also ends symlink loops.
const maxDepth = 16

// fingerprint summarises the names, types, sizes and modification times of everything
// under dir of fsys. It follows symbolic links to folders (a ConfigMap volume is made of
// them) up to maxDepth levels, and records an entry it cannot read instead of stopping:
// a change to any file, a broken one included, changes the fingerprint, so that fixing a
// package or a channel file is noticed. It fails only when dir itself cannot be opened
// as a folder.
//
// Every reconcile of an add-on pays for it, cached render or not: dir is opened once
// (openDir) and every entry is read relative to it.
func fingerprint(fsys fs.FS, dir string) (string, error) {
	sub, done, err := openDir(fsys, dir)
	if err != nil {
		return "", err
	}
	defer done()
	top, err := fs.ReadDir(sub, ".")
	if err != nil {
		return "", err
	}
	var parts []string
	var walk func(rel string, entries []fs.DirEntry, depth int)
	walk = func(rel string, entries []fs.DirEntry, depth int) {
		for _, e := range entries {
			name := path.Join(rel, e.Name())
			info, err := entryInfo(sub, name, e)
			if err != nil {
				parts = append(parts, fmt.Sprintf("%s:%v:%v", name, e.Type(), err))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s:%v:%v:%d:%d", name, e.Type(), info.Mode(), info.Size(),
				info.ModTime().UnixNano()))
			if !info.IsDir() {
				continue
			}
			if depth+1 > maxDepth {
				parts = append(parts, name+":too deep")
				continue
			}
			children, err := fs.ReadDir(sub, name)
			if err != nil {
				parts = append(parts, name+":"+err.Error())
				continue
			}
			walk(name, children, depth+1)
		}
	}
	walk(".", top, 0)
	slices.Sort(parts)
	return strings.Join(parts, ";"), nil
}
