package sources

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits caps what one fetch may write: the total bytes of its files, the number of
// entries (files and folders) and the depth of its folders, and what a git fetch may
// read from its server.
type Limits struct {
	// MaxBytes caps the sum of the file sizes (and, for https, the archive's size).
	MaxBytes int64
	// MaxFiles caps the number of entries.
	MaxFiles int
	// MaxDepth caps the number of path elements of an entry.
	MaxDepth int
	// MaxTransferBytes caps the bytes a git fetch reads from its server (the ref listing
	// and the packfile, over every connection of the fetch) and the bytes of git objects
	// it writes. It is larger than MaxBytes: a packfile holds the whole repository at
	// the commit, of which the channels tree may be a small folder.
	MaxTransferBytes int64
}

// DefaultLimits are generous for a channels tree (a few hundred small YAML files) and
// small enough that a hostile archive cannot fill the cache volume.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxFiles: 10000, MaxDepth: 16, MaxTransferBytes: 256 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultLimits.MaxFiles
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxTransferBytes <= 0 {
		l.MaxTransferBytes = DefaultLimits.MaxTransferBytes
	}
	return l
}

// treeWriter writes regular files and folders under a root, enforcing the Limits and the
// naming rules. Every source kind writes through one: tar extraction, a git tree, a
// directory copy.
type treeWriter struct {
	root   string
	limits Limits
	charge func(int64) error // counts bytes in the cache before they are written; nil: none
	bytes  int64
	count  int
	seen   map[string]bool // entries written, by cleaned name
	dirs   map[string]bool // folders that exist, made explicitly or implicitly
}

// newTreeWriter returns a writer of the tree at root; charge, when not nil, is given the
// size of every write before it is made (a stage's charge).
func newTreeWriter(root string, limits Limits, charge func(int64) error) *treeWriter {
	return &treeWriter{root: root, limits: limits.withDefaults(), charge: charge, seen: map[string]bool{}, dirs: map[string]bool{".": true}}
}

func refused(format string, args ...any) *Error {
	return errorf(ReasonArchiveRefused, nil, format, args...)
}

// clean checks an entry's name and returns it cleaned and slash-separated.
func (w *treeWriter) clean(name string) (string, error) {
	if name == "" {
		return "", refused("an entry has an empty name")
	}
	if strings.ContainsAny(name, "\x00\\") {
		return "", refused("entry %q has a NUL or backslash in its name", name)
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) || (len(name) > 1 && name[1] == ':') {
		return "", refused("entry %q has an absolute path", name)
	}
	for _, elem := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if elem == ".." {
			return "", refused("entry %q leaves the tree (..)", name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return clean, nil
	}
	if depth := strings.Count(clean, "/") + 1; depth > w.limits.MaxDepth {
		return "", refused("entry %q is %d folders deep, more than the cap of %d", name, depth, w.limits.MaxDepth)
	}
	return clean, nil
}

// entry counts a new entry and refuses a duplicate.
func (w *treeWriter) entry(clean, orig string) error {
	if w.seen[clean] {
		return refused("entry %q appears twice", orig)
	}
	w.seen[clean] = true
	w.count++
	if w.count > w.limits.MaxFiles {
		return refused("more than %d entries, the cap", w.limits.MaxFiles)
	}
	return nil
}

// mkdirs makes the folder clean and its parents, refusing a parent that is a file.
func (w *treeWriter) mkdirs(clean string) error {
	if w.dirs[clean] {
		return nil
	}
	if parent := path.Dir(clean); !w.dirs[parent] {
		if err := w.mkdirs(parent); err != nil {
			return err
		}
	}
	if w.seen[clean] {
		return refused("%q is a file and a folder", clean)
	}
	if err := os.Mkdir(filepath.Join(w.root, filepath.FromSlash(clean)), 0o755); err != nil {
		return errorf(ReasonFetchFailed, err, "writing the tree")
	}
	w.dirs[clean] = true
	return nil
}

// Dir writes a folder entry.
func (w *treeWriter) Dir(name string) error {
	clean, err := w.clean(name)
	if err != nil || clean == "." {
		return err
	}
	if w.dirs[clean] && w.seen[clean] {
		return refused("entry %q appears twice", name)
	}
	if err := w.mkdirs(clean); err != nil {
		return err
	}
	w.seen[clean] = true
	w.count++
	if w.count > w.limits.MaxFiles {
		return refused("more than %d entries, the cap", w.limits.MaxFiles)
	}
	return nil
}

// File writes a regular file entry from r, counting its bytes against the cap whatever
// size a header claims. Files are written read-only and never executable.
func (w *treeWriter) File(name string, r io.Reader) error {
	clean, err := w.clean(name)
	if err != nil {
		return err
	}
	if clean == "." {
		return refused("a file entry has the name of the root")
	}
	if w.dirs[clean] {
		return refused("%q is a folder and a file", name)
	}
	if err := w.entry(clean, name); err != nil {
		return err
	}
	if err := w.mkdirs(path.Dir(clean)); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(w.root, filepath.FromSlash(clean)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return errorf(ReasonFetchFailed, err, "writing the tree")
	}
	remaining := w.limits.MaxBytes - w.bytes
	n, err := io.Copy(chargedWriter{w: f, charge: w.charge}, io.LimitReader(r, remaining+1))
	w.bytes += n
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if w.bytes > w.limits.MaxBytes {
		return refused("more than %d bytes, the cap", w.limits.MaxBytes)
	}
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return se
		}
		return errorf(ReasonArchiveRefused, err, "reading %s", name)
	}
	return nil
}

// Extract writes the tar archive read from r (gzip-compressed or not) under dir, which
// must exist and be empty, within limits. It refuses absolute paths, "..", symbolic and
// hard links, devices, pipes, duplicate entries, and an archive over a cap; on a refusal
// dir holds a partial tree the caller removes. Nothing extracted is made executable.
func Extract(r io.Reader, dir string, limits Limits) error {
	return extractCharged(r, dir, limits, nil)
}

// extractCharged is Extract with every write charged first (a stage's charge).
func extractCharged(r io.Reader, dir string, limits Limits, charge func(int64) error) error {
	src := &trackingReader{r: r}
	err := extract(src, newTreeWriter(dir, limits, charge))
	if err == nil {
		return nil
	}
	if src.err != nil {
		// The archive's own reader failed (the network, a digest check): not the archive.
		return fetchError(src.err, "reading the archive")
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	return errorf(ReasonArchiveRefused, err, "the archive is not a valid tar")
}

func extract(r io.Reader, w *treeWriter) error {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return refused("the archive is not valid gzip: %v", err)
		}
		defer gz.Close() //nolint:errcheck
		src = gz
	}
	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = w.Dir(hdr.Name)
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archivers write TypeRegA
			err = w.File(hdr.Name, tr)
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeSymlink:
			err = refused("entry %q is a symbolic link (to %q)", hdr.Name, hdr.Linkname)
		case tar.TypeLink:
			err = refused("entry %q is a hard link (to %q)", hdr.Name, hdr.Linkname)
		case tar.TypeChar, tar.TypeBlock:
			err = refused("entry %q is a device", hdr.Name)
		case tar.TypeFifo:
			err = refused("entry %q is a named pipe", hdr.Name)
		default:
			err = refused("entry %q has the unsupported type %q", hdr.Name, string(hdr.Typeflag))
		}
		if err != nil {
			return err
		}
	}
}

// trackingReader remembers the first error of the reader it wraps, other than EOF.
type trackingReader struct {
	r   io.Reader
	err error
}

func (t *trackingReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && t.err == nil {
		t.err = err
	}
	return n, err
}

// errorOf turns an error from a writer or reader into an *Error, keeping one already.
func errorOf(err error, format string, args ...any) error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	return fetchError(err, format, args...)
}
