// Package ociimage assembles container images without a container engine, for the
// project's image tools (hack/image, the manager's image, and hack/addonimages, the
// add-on images a real node imports): reproducible layers from a list of files or a
// folder tree, and single-platform images written as docker archives that
// `ctr images import` names after their reference.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer.
type File struct {
	Name     string // absolute path in the image
	Mode     int64  // permission bits (and setuid, setgid, sticky)
	UID, GID int
	Dir      bool
	Symlink  string // the target, for a symbolic link
	Data     []byte
	// Xattrs are extended attributes, such as security.capability (a file capability).
	Xattrs map[string]string
}

// Layer builds an uncompressed tar of files, in the order given, every entry stamped with
// created, and wraps it as a gzip-compressed OCI layer.
func Layer(created time.Time, files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.Name, "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Symlink != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Symlink
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if len(f.Xattrs) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range f.Xattrs {
				h.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// Parents returns the folders leading to path (absolute, without "/" itself), outermost
// first: the directory entries a layer needs before a file deep in a tree.
func Parents(path string) []string {
	var out []string
	for d := filepath.Dir(path); d != "/" && d != "."; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// Sorted orders files by path, every missing parent folder added (mode 0755, root), so
// that a layer lists each folder before its entries and the same files always give the
// same bytes. A later file of the same path replaces an earlier one.
func Sorted(files []File) []File {
	byName := map[string]File{}
	for _, f := range files {
		f.Name = "/" + strings.Trim(filepath.Clean(f.Name), "/")
		byName[f.Name] = f
	}
	for n := range byName {
		for _, d := range Parents(n) {
			if _, ok := byName[d]; !ok {
				byName[d] = File{Name: d, Mode: 0o755, Dir: true}
			}
		}
	}
	out := make([]File, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TreeFiles lists the folder tree under root as files of an image rooted at prefix:
// folders, regular files (with their permission bits) and symbolic links, owned by root.
func TreeFiles(root, prefix string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Name: filepath.Join(prefix, rel), Mode: int64(info.Mode().Perm())}
		switch {
		case d.IsDir():
			f.Dir = true
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Symlink, err = os.Readlink(p); err != nil {
				return err
			}
			f.Mode = 0o777
		case info.Mode().IsRegular():
			if f.Data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: neither a folder, a file nor a link", p)
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// SourceDateEpoch reads SOURCE_DATE_EPOCH (seconds since 1970), the reproducible-builds
// convention for timestamps; 0 when it is unset.
func SourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// Addendum is one layer of an image and the history line that tells what it holds.
type Addendum struct {
	Layer     v1.Layer
	CreatedBy string
	Comment   string
}

// Image is a single-platform OCI image of layers, with the process config cfg; every
// timestamp is created.
func Image(p v1.Platform, created time.Time, cfg v1.Config, layers ...Addendum) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l.Layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: l.CreatedBy, Comment: l.Comment}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// WriteDockerArchive writes img as a docker-archive tarball at path (through a temporary
// file, so that path never holds half an image), tagged ref: what `ctr images import` and
// `docker load` name the image.
func WriteDockerArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path+".tmp", tag, img); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
