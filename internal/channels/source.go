// Package channels resolves add-on versions from channel files and renders the matching
// packages with kustomize.
//
// A source is a directory laid out as
//
//	<dir>/<channel>                                  a channel file, e.g. stable
//	<dir>/packages/<addon>/<version>/kustomization.yaml  and the manifests it lists
//
// Channel files and rendered packages are cached: a channel file is parsed again only when
// its size or modification time changes, and a package is built again only when one of its
// files changes.
package channels

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// DefaultChannel is the channel used when neither the add-on nor the operator names one.
const DefaultChannel = "stable"

// validName matches versions and channel names: no path separators, no "..", no spaces.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$`)

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

// Source resolves and renders packages from a channels directory. It is safe for
// concurrent use.
type Source struct {
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

// NewSource returns a Source reading dir. defaultChannel applies to add-ons that name
// neither a version nor a channel; empty means DefaultChannel.
func NewSource(dir, defaultChannel string) *Source {
	if defaultChannel == "" {
		defaultChannel = DefaultChannel
	}
	return &Source{
		dir:            dir,
		defaultChannel: defaultChannel,
		channels:       map[string]cachedChannel{},
		renders:        map[string]cachedRender{},
	}
}

// DefaultChannel returns the channel of add-ons that name neither a version nor a channel.
func (s *Source) DefaultChannel() string { return s.defaultChannel }

// Dir returns the channels directory.
func (s *Source) Dir() string { return s.dir }

// Resolve picks the package for addon: spec.version wins, otherwise the version the
// channel (or the default channel) lists.
func (s *Source) Resolve(addon string, spec addonv1alpha1.CommonSpec) (Resolved, error) {
	if spec.Version != "" {
		if !validName.MatchString(spec.Version) || strings.Contains(spec.Version, "..") {
			return Resolved{}, errorf(addonsv1alpha1.ReasonInvalidVersion, nil,
				"version %q is not a valid version: use letters, digits, '.', '+', '_' or '-'", spec.Version)
		}
		if err := s.checkPackage(addon, spec.Version); err != nil {
			return Resolved{}, err
		}
		return Resolved{Addon: addon, Version: spec.Version}, nil
	}

	name := spec.Channel
	if name == "" {
		name = s.defaultChannel
	}
	if !validName.MatchString(name) || strings.Contains(name, "..") || name == "packages" {
		return Resolved{}, errorf(addonsv1alpha1.ReasonChannelNotFound, nil, "channel %q is not a valid channel name", name)
	}
	ch, err := s.channel(name)
	if err != nil {
		return Resolved{}, err
	}
	for _, e := range ch.Manifests {
		if e.Name == addon {
			if err := s.checkPackage(addon, e.Version); err != nil {
				return Resolved{}, err
			}
			return Resolved{Addon: addon, Version: e.Version, Channel: name}, nil
		}
	}
	return Resolved{}, errorf(addonsv1alpha1.ReasonChannelNotFound, nil, "channel %q does not list %s", name, addon)
}

// channel returns the parsed channel file, reading it again only when it changed on disk.
func (s *Source) channel(name string) (*Channel, error) {
	path := filepath.Join(s.dir, name)
	info, err := os.Stat(path)
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

	data, err := os.ReadFile(path)
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
// name or version are errors, because KDP matches unnamed entries to every add-on.
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
		case e.Version == "":
			return nil, fmt.Errorf("manifests[%d] (%s) has no version", i, e.Name)
		case seen[e.Name]:
			return nil, fmt.Errorf("manifests[%d] lists %s a second time", i, e.Name)
		}
		seen[e.Name] = true
	}
	return ch, nil
}

// Channels lists the channel files in the source directory.
func (s *Source) Channels() []string {
	entries, _ := os.ReadDir(s.dir)
	var names []string
	for _, e := range entries {
		if !e.IsDir() && validName.MatchString(e.Name()) && !strings.HasSuffix(e.Name(), ".md") {
			names = append(names, e.Name())
		}
	}
	return names
}

// Versions lists the package versions available for addon, sorted.
func (s *Source) Versions(addon string) []string {
	entries, _ := os.ReadDir(filepath.Join(s.dir, "packages", addon))
	var versions []string
	for _, e := range entries {
		if e.IsDir() {
			versions = append(versions, e.Name())
		}
	}
	sort.Strings(versions)
	return versions
}

// checkPackage reports VersionNotFound when addon has no package at version.
func (s *Source) checkPackage(addon, version string) error {
	if _, err := os.Stat(filepath.Join(s.packageDir(addon, version), "kustomization.yaml")); err != nil {
		available := s.Versions(addon)
		return errorf(addonsv1alpha1.ReasonVersionNotFound, nil, "%s has no version %q (available: %s)",
			addon, version, strings.Join(available, ", "))
	}
	return nil
}

func (s *Source) packageDir(addon, version string) string {
	return filepath.Join(s.dir, "packages", addon, version)
}

// Render builds the package of r with kustomize and returns the YAML stream. The result is
// cached until a file of the package changes.
func (s *Source) Render(r Resolved) (string, error) {
	dir := s.packageDir(r.Addon, r.Version)
	fp, err := fingerprint(dir)
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonVersionNotFound, err, "%s has no version %q", r.Addon, r.Version)
	}
	key := r.Addon + "/" + r.Version

	s.mu.Lock()
	cached, ok := s.renders[key]
	s.mu.Unlock()
	if ok && cached.fingerprint == fp {
		return cached.manifest, nil
	}

	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "building package %s", key)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "encoding package %s", key)
	}
	s.mu.Lock()
	s.renders[key] = cachedRender{fingerprint: fp, manifest: string(out)}
	s.mu.Unlock()
	return string(out), nil
}

// fingerprint summarises the names, sizes and modification times of the files in dir.
func fingerprint(dir string) (string, error) {
	var parts []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("%s:%d:%d", path, info.Size(), info.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.Sort(parts)
	return strings.Join(parts, ";"), nil
}

// ManifestController adapts a Source to KDP's ManifestController extension point.
type ManifestController struct {
	// Source resolves and renders packages.
	Source *Source
}

type resolvedKey struct{}

// WithResolved returns a context that makes ManifestController render r instead of
// resolving the add-on's spec again; the engine uses it to roll back to a healthy version.
func WithResolved(ctx context.Context, r Resolved) context.Context {
	return context.WithValue(ctx, resolvedKey{}, r)
}

// ResolveManifest resolves the add-on's package (or takes the one WithResolved put in
// ctx) and returns its rendered manifest, keyed by the package path.
func (m ManifestController) ResolveManifest(ctx context.Context, object runtime.Object) (map[string]string, error) {
	obj, ok := object.(addonv1alpha1.CommonObject)
	if !ok {
		return nil, fmt.Errorf("%T does not implement CommonObject", object)
	}
	resolved, ok := ctx.Value(resolvedKey{}).(Resolved)
	if !ok || resolved.Addon != obj.ComponentName() {
		var err error
		if resolved, err = m.Source.Resolve(obj.ComponentName(), obj.CommonSpec()); err != nil {
			return nil, err
		}
	}
	manifest, err := m.Source.Render(resolved)
	if err != nil {
		return nil, err
	}
	return map[string]string{filepath.Join(resolved.Addon, resolved.Version, "manifest.yaml"): manifest}, nil
}
