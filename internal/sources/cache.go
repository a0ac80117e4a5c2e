package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// folder under artifacts/ is always whole. The trees and the staging folders together
// count against maxBytes: the least recently used trees are evicted to keep under it, but
// never the current revision of a source, which is kept even over the bound. Staging is
// bounded on its own: a write that would take the staging of the fetches under way over
// maxBytes is refused (ErrCacheFull), so that a hostile server cannot fill the volume
// whatever the current revisions hold. Staging folders are removed on every path out of a
// fetch, and those of an earlier process when the cache is created.
type cache struct {
	dir      string
	maxBytes int64

	mu       sync.Mutex
	size     int64 // the bytes of the trees in entries
	staged   int64 // the bytes charged to the stages of fetches under way
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

// ErrCacheFull is in the chain of a fetch refused because its staging would take the
// staging of the fetches under way over the cache's bound. The error is transient: the
// fetches under way end and release their room.
var ErrCacheFull = errors.New("the source cache is full")

// newCache opens the cache in dir. Staging folders left by an earlier process (a crash
// in the middle of a fetch) are removed; its whole trees are kept.
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
		c.size += size
	}
	return c, nil
}

// entryKey names the folder of a digest: "oci-<hex>" for "sha256:<hex>".
func entryKey(kind Kind, digest string) string {
	_, hex, _ := cutDigest(digest)
	return string(kind) + "-" + hex
}

func (c *cache) treeDir(key string) string { return filepath.Join(c.dir, "artifacts", key, "tree") }

// stage is the staging folder of a fetch under way, under <dir>/tmp. What the fetch writes
// into it counts in the cache's bound from before it is written (charge) until the folder
// is released or becomes an entry (insert). Every fetch defers release right after
// newStage, so that no path out of it, an error or a panic, leaves the folder behind.
type stage struct {
	c   *cache
	dir string
	// charged is what charge counted and release or insert has not given back yet;
	// guarded by c.mu.
	charged int64
}

// newStage returns a new empty staging folder.
func (c *cache) newStage() (*stage, error) {
	dir, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "fetch-")
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	return &stage{c: c, dir: dir}, nil
}

// path returns the path of name inside the stage.
func (s *stage) path(name string) string { return filepath.Join(s.dir, name) }

// charge counts n more bytes that the fetch is about to write into the stage. A write that
// would take the staging of the fetches under way over the bound is refused with
// ErrCacheFull and not counted; otherwise, when trees and staging together go over the
// bound, the least recently used trees no source uses are evicted.
func (s *stage) charge(n int64) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.staged+n > c.maxBytes {
		e := errorf(ReasonFetchFailed, ErrCacheFull,
			"the source cache has no room for %d more bytes: the fetches under way already stage %d bytes of its bound of %d (the manager's --source-cache-bytes)",
			n, c.staged, c.maxBytes)
		e.Transient = true
		return e
	}
	c.staged += n
	s.charged += n
	if c.size+c.staged > c.maxBytes {
		c.evictLocked("")
	}
	return nil
}

// release removes the staging folder, if insert has not moved it, and gives its bytes
// back to the cache. It may be called more than once.
func (s *stage) release() {
	_ = os.RemoveAll(s.dir)
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.staged -= s.charged
	s.charged = 0
}

// chargedWriter charges each write to a stage before it makes it.
type chargedWriter struct {
	w      io.Writer
	charge func(int64) error
}

func (cw chargedWriter) Write(p []byte) (int, error) {
	if cw.charge != nil {
		if err := cw.charge(int64(len(p))); err != nil {
			return 0, err
		}
	}
	return cw.w.Write(p)
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

// insert moves the finished tree in the stage's tree folder into the cache under meta's
// digest; when the digest is cached already (another source had it) it returns that entry
// and the caller's release drops the staging copy.
func (c *cache) insert(s *stage, meta entryMeta) (*cacheEntry, error) {
	staging := s.dir
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
	// The bytes move from the stage to the entry.
	c.staged -= s.charged
	s.charged = 0
	e := &cacheEntry{key: key, size: size, lastUsed: time.Now(), meta: meta}
	c.entries[key] = e
	c.size += size
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

// evictLocked removes least recently used entries until the trees and the stages fit the
// bound, never keep (just used) nor a source's current revision.
func (c *cache) evictLocked(keep string) {
	total := c.size + c.staged
	pinned := map[string]bool{keep: true}
	for _, k := range c.current {
		pinned[k] = true
	}
	var candidates []*cacheEntry
	for _, e := range c.entries {
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
		c.size -= e.size
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

// URL schemes and git protocols the fetcher tells apart.
const (
	// schemeHTTPS is the URL scheme of TLS.
	schemeHTTPS = "https"
	// schemeHTTP is plain HTTP, only to loopback with insecure and insecureLoopback.
	schemeHTTP = "http"
	// schemeSSH is git over SSH.
	schemeSSH = "ssh"
)

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
