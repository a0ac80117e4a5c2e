package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultCacheBytes bounds the cache when Options.MaxCacheBytes is not set.
const DefaultCacheBytes = 1 << 30

// cache holds extracted trees on disk, one folder per content digest:
//
//	<dir>/artifacts/<kind>-<hex>/tree/        the extracted tree
//	<dir>/artifacts/<kind>-<hex>/entry.json   its digest, revision and image labels
//	<dir>/tmp/                                staging folders of fetches under way
//
// A tree is written to a staging folder and renamed into place once complete, so that a
// folder under artifacts/ is always whole. The cache keeps at most maxBytes of trees,
// evicting the least recently used first, but never the current revision of a source.
type cache struct {
	dir      string
	maxBytes int64

	mu       sync.Mutex
	entries  map[string]*cacheEntry
	current  map[string]string // source identity -> entry key: never evicted
	resolved map[string]string // source identity + revision -> entry key
	last     map[string]*Artifact
}

type cacheEntry struct {
	key      string
	size     int64
	lastUsed time.Time
	meta     entryMeta
}

// entryMeta is entry.json.
type entryMeta struct {
	Kind     Kind              `json:"kind"`
	Digest   string            `json:"digest"`
	Revision string            `json:"revision"`
	Labels   map[string]string `json:"labels,omitempty"`
}

func newCache(dir string, maxBytes int64) (*cache, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	c := &cache{dir: dir, maxBytes: maxBytes, entries: map[string]*cacheEntry{}, current: map[string]string{},
		resolved: map[string]string{}, last: map[string]*Artifact{}}
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	for _, d := range []string{"tmp", "artifacts"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	// Trees of an earlier run are kept: a restart pulls no digest it already has.
	list, err := os.ReadDir(filepath.Join(dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	for _, e := range list {
		entryDir := filepath.Join(dir, "artifacts", e.Name())
		data, err := os.ReadFile(filepath.Join(entryDir, "entry.json"))
		var meta entryMeta
		if err != nil || json.Unmarshal(data, &meta) != nil || entryKey(meta.Kind, meta.Digest) != e.Name() {
			_ = os.RemoveAll(entryDir)
			continue
		}
		size, _ := dirSize(filepath.Join(entryDir, "tree"))
		info, _ := e.Info()
		used := time.Now()
		if info != nil {
			used = info.ModTime()
		}
		c.entries[e.Name()] = &cacheEntry{key: e.Name(), size: size, lastUsed: used, meta: meta}
	}
	return c, nil
}

// entryKey names the folder of a digest: "oci-<hex>" for "sha256:<hex>".
func entryKey(kind Kind, digest string) string {
	_, hex, _ := cutDigest(digest)
	return string(kind) + "-" + hex
}

func (c *cache) treeDir(key string) string { return filepath.Join(c.dir, "artifacts", key, "tree") }

// staging returns a new empty folder for a fetch under way.
func (c *cache) staging() (string, error) {
	return os.MkdirTemp(filepath.Join(c.dir, "tmp"), "fetch-")
}

// lookup returns the entry of key, marking it used.
func (c *cache) lookup(key string) (*cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if ok {
		e.lastUsed = time.Now()
	}
	return e, ok
}

// lookupResolved returns the entry a source's revision resolved to before.
func (c *cache) lookupResolved(resolution string) (*cacheEntry, bool) {
	c.mu.Lock()
	key, ok := c.resolved[resolution]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	return c.lookup(key)
}

// insert moves the finished tree in staging/tree into the cache under meta's digest; when
// the digest is cached already (another source had it) the staging copy is dropped.
func (c *cache) insert(staging string, meta entryMeta) (*cacheEntry, error) {
	defer os.RemoveAll(staging) //nolint:errcheck
	key := entryKey(meta.Kind, meta.Digest)
	if e, ok := c.lookup(key); ok {
		return e, nil
	}
	data, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, "entry.json"), data, 0o644); err != nil {
		return nil, err
	}
	size, err := dirSize(filepath.Join(staging, "tree"))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		return e, nil
	}
	if err := os.Rename(staging, filepath.Join(c.dir, "artifacts", key)); err != nil {
		return nil, err
	}
	e := &cacheEntry{key: key, size: size, lastUsed: time.Now(), meta: meta}
	c.entries[key] = e
	return e, nil
}

// use records that identity's current revision is the entry, remembers how revision
// resolved, and evicts what is over the bound.
func (c *cache) use(identity, resolution string, e *cacheEntry, a *Artifact) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current[identity] = e.key
	if resolution != "" {
		c.resolved[resolution] = e.key
	}
	c.last[identity] = a
	c.evictLocked(e.key)
}

// release unpins identity's current revision.
func (c *cache) release(identity string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.current, identity)
	delete(c.last, identity)
}

func (c *cache) lastArtifact(identity string) (*Artifact, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.last[identity]
	if ok {
		if _, present := c.entries[c.current[identity]]; !present {
			return nil, false
		}
	}
	return a, ok
}

// evictLocked removes least recently used entries until the cache fits its bound, never
// keep (just used) nor a source's current revision.
func (c *cache) evictLocked(keep string) {
	var total int64
	pinned := map[string]bool{keep: true}
	for _, k := range c.current {
		pinned[k] = true
	}
	var candidates []*cacheEntry
	for _, e := range c.entries {
		total += e.size
		if !pinned[e.key] {
			candidates = append(candidates, e)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].lastUsed.Before(candidates[j].lastUsed) })
	for _, e := range candidates {
		if total <= c.maxBytes {
			break
		}
		if err := os.RemoveAll(filepath.Join(c.dir, "artifacts", e.key)); err != nil {
			continue
		}
		total -= e.size
		delete(c.entries, e.key)
		for r, k := range c.resolved {
			if k == e.key {
				delete(c.resolved, r)
			}
		}
	}
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return size, err
}

// The digest algorithms: sha256 for content, sha1 for a git commit.
const (
	algoSHA256 = "sha256"
	algoSHA1   = "sha1"
)

// schemeHTTPS is the URL scheme of TLS.
const schemeHTTPS = "https"

// cutDigest splits "sha256:<hex>" and checks it.
func cutDigest(d string) (algorithm, hex string, err error) {
	algorithm, hex, ok := strings.Cut(d, ":")
	if !ok || hex == "" {
		return "", "", fmt.Errorf("digest %q is not <algorithm>:<hex>", d)
	}
	want := map[string]int{algoSHA256: 64, algoSHA1: 40}[algorithm]
	if want == 0 {
		return "", "", fmt.Errorf("digest %q: the algorithm must be sha256 (or sha1 for a git commit)", d)
	}
	if len(hex) != want || !isLowerHex(hex) {
		return "", "", fmt.Errorf("digest %q: %s needs %d lower-case hex digits", d, algorithm, want)
	}
	return algorithm, hex, nil
}

func isLowerHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
