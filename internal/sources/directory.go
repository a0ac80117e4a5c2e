package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// fetchDirectory copies a channels tree on the operator's file system into the cache,
// through the same caps and naming rules as an archive. Symbolic links are followed only
// when they stay inside the directory (a ConfigMap volume is made of them); entries whose
// names start with ".." (a volume's internals) and .git folders are left out. The digest
// is the tree's (TreeDigest), so an unchanged directory is one cache entry.
func (f *fetcher) fetchDirectory(ctx context.Context, req Request, id string) (*Artifact, error) {
	root := req.URL
	if req.Path != "" {
		root = filepath.Join(root, filepath.FromSlash(req.Path))
	}
	if !filepath.IsAbs(root) {
		return nil, errorf(ReasonInvalidSource, nil, "directory %q is not an absolute path", req.URL)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "reading directory %s", root)
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return nil, errorf(ReasonFetchFailed, err, "%s is not a directory", root)
	}
	st, err := f.cache.newStage()
	if err != nil {
		return nil, err
	}
	defer st.release()
	tree := st.path("tree")
	if err := mkdir(tree); err != nil {
		return nil, err
	}
	w := newTreeWriter(tree, f.limits, st.charge)
	if err := copyDir(ctx, w, real, real, "."); err != nil {
		return nil, err
	}
	digest, err := TreeDigest(tree)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "hashing directory %s", root)
	}
	if req.Digest != "" && req.Digest != digest {
		return nil, errorf(ReasonDigestMismatch, nil, "directory %s is %s, not the pinned %s", root, digest, req.Digest)
	}
	e, err := f.cache.insert(st, entryMeta{Kind: KindDirectory, Digest: digest, Revision: root})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "caching directory %s", root)
	}
	return f.finish(id, "", root, e, "", false)
}

// copyDir copies the folder rel of the tree rooted at root (both resolved) into w.
func copyDir(ctx context.Context, w *treeWriter, root, dir, rel string) error {
	if err := ctx.Err(); err != nil {
		return fetchError(err, "reading directory %s", root)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errorf(ReasonFetchFailed, err, "reading directory %s", dir)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || e.Name() == ".git" {
			continue
		}
		name := path.Join(rel, e.Name())
		p := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return refused("%s is a symbolic link that does not resolve", name)
			}
			if target != root && !strings.HasPrefix(target, root+string(filepath.Separator)) {
				return refused("%s is a symbolic link out of the directory", name)
			}
			p = target
		}
		info, err := os.Stat(p)
		if err != nil {
			return errorf(ReasonFetchFailed, err, "reading %s", name)
		}
		switch {
		case info.IsDir():
			if err := w.Dir(name + "/"); err != nil {
				return err
			}
			if err := copyDir(ctx, w, root, p, name); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			file, err := os.Open(p)
			if err != nil {
				return errorf(ReasonFetchFailed, err, "reading %s", name)
			}
			err = w.File(name, file)
			_ = file.Close()
			if err != nil {
				return err
			}
		default:
			return refused("%s is not a regular file or a folder", name)
		}
	}
	return nil
}

// TreeDigest returns the "sha256:<hex>" of a tree of folders and regular files: the
// sha256 of its sorted listing, a line per entry, "d <path>" for a folder and
// "f <path> <sha256 of the content>" for a file, paths slash-separated and relative.
// File modes and times do not count.
func TreeDigest(root string) (string, error) {
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			lines = append(lines, "d "+rel)
		case d.Type().IsRegular():
			sum, err := fileSHA256(p)
			if err != nil {
				return err
			}
			lines = append(lines, "f "+rel+" "+sum)
		default:
			return fmt.Errorf("%s is not a regular file or a folder", rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		_, _ = io.WriteString(h, l+"\n")
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
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
