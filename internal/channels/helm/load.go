package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/ignore"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// utf8BOM is what Helm's folder loader strips from the start of every file.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// refused is a PackageRefused error of the chart key.
func refused(key, format string, args ...any) *Error {
	return fail(addonsv1alpha1.ReasonPackageRefused, nil, key, format, args...)
}

// tooLarge is a PackageTooLarge error of the chart key.
func tooLarge(key, format string, args ...any) *Error {
	return fail(addonsv1alpha1.ReasonPackageTooLarge, nil, key, format, args...)
}

// chartFiles is what readChart collects: the files the loader gets, and the bytes and
// files counted against the caps.
type chartFiles struct {
	key   string
	fsys  fs.FS
	dir   string
	rules *ignore.Rules
	files []*archive.BufferedFile
	bytes int64
	count int
}

// add counts a file of size bytes against the caps.
func (c *chartFiles) add(name string, size int64) error {
	if c.count == MaxChartFiles {
		return tooLarge(c.key, "more than %d files (the cap on a chart's files, its subchart archives expanded)", MaxChartFiles)
	}
	if c.bytes+size > MaxChartBytes {
		return tooLarge(c.key, "more than %d bytes (the cap on a chart's size, its subchart archives expanded) at %s", MaxChartBytes, name)
	}
	c.count++
	c.bytes += size
	return nil
}

// readChart reads the chart at dir of fsys as Helm's folder loader would read it from
// disk, and nothing else: the files its .helmignore (and Helm's default rule,
// templates/.*) does not ignore, a UTF-8 byte order mark stripped, and each vendored
// subchart archive (charts/*.tgz, at any depth) expanded into a folder of its own. It
// refuses a symbolic link anywhere, the chart folder and its parents included, and
// anything that is neither a folder nor a regular file, ignored or not; it stops as
// soon as the chart, its archives expanded, passes MaxChartFiles or MaxChartBytes.
func readChart(fsys fs.FS, dir, key string) ([]*archive.BufferedFile, error) {
	if fsys == nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "no chart")
	}
	if dir == "" {
		dir = "."
	}
	if err := checkChartDir(fsys, dir, key); err != nil {
		return nil, err
	}
	rules := ignore.Empty()
	if data, err := fs.ReadFile(fsys, path.Join(dir, ignore.HelmIgnore)); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, key, "reading %s", ignore.HelmIgnore)
		}
	}
	rules.AddDefaults()

	c := &chartFiles{key: key, fsys: fsys, dir: dir, rules: rules}
	if err := c.walk(".", 0, false); err != nil {
		return nil, err
	}
	if err := c.expandArchives(); err != nil {
		return nil, err
	}
	return c.files, nil
}

// checkChartDir refuses a chart folder outside fsys's tree, or that is, or lies in, a
// symbolic link.
func checkChartDir(fsys fs.FS, dir, key string) error {
	if !fs.ValidPath(dir) {
		return refused(key, "%q is not a folder inside the package (an absolute path, or one through '..')", dir)
	}
	for p := dir; ; p = path.Dir(p) {
		info, err := fs.Lstat(fsys, p)
		if err != nil {
			return fail(addonsv1alpha1.ReasonRenderFailed, err, key, "reading the chart")
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return refused(key, "%s is a symbolic link; packages may not contain symbolic links", p)
		}
		if p == "." {
			return nil
		}
	}
}

// walk reads the folder rel of the chart, depth folders down; ignored says that a
// folder above it is ignored.
func (c *chartFiles) walk(rel string, depth int, ignored bool) error {
	if depth > maxChartDepth {
		return refused(c.key, "%s: folders nest more than %d levels deep", path.Join(c.dir, rel), maxChartDepth)
	}
	entries, err := fs.ReadDir(c.fsys, path.Join(c.dir, rel))
	if err != nil {
		return fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the chart")
	}
	for _, e := range entries {
		name := path.Join(rel, e.Name())
		full := path.Join(c.dir, name)
		if e.Type()&fs.ModeSymlink != 0 {
			return refused(c.key, "%s is a symbolic link; packages may not contain symbolic links", full)
		}
		info, err := e.Info()
		if err != nil {
			return fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the chart")
		}
		switch {
		case e.IsDir():
			// Helm does not descend into an ignored folder; kaddons reads it all the
			// same, so that it is refused and capped like the rest of the package.
			if err := c.walk(name, depth+1, ignored || c.rules.Ignore(name, info)); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := c.read(name, info, ignored || c.rules.Ignore(name, info)); err != nil {
				return err
			}
		default:
			return refused(c.key, "%s is not a regular file (%s)", full, e.Type())
		}
	}
	return nil
}

// read reads the regular file name of the chart against the caps, and keeps it for the
// loader unless it is ignored.
func (c *chartFiles) read(name string, info fs.FileInfo, ignored bool) error {
	full := path.Join(c.dir, name)
	if err := c.add(full, info.Size()); err != nil {
		return err
	}
	data, err := fs.ReadFile(c.fsys, full)
	if err != nil {
		return fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the chart")
	}
	// The file may have grown since it was listed.
	if c.bytes += int64(len(data)) - info.Size(); c.bytes > MaxChartBytes {
		return tooLarge(c.key, "more than %d bytes (the cap on a chart's size) at %s", MaxChartBytes, full)
	}
	if !ignored {
		c.files = append(c.files, &archive.BufferedFile{Name: name, ModTime: info.ModTime(), Data: bytes.TrimPrefix(data, utf8BOM)})
	}
	return nil
}

// subchartArchive reports whether name is a vendored subchart archive Helm's loader
// expands: charts/<name>.tgz of the chart or of a subchart folder
// (charts/a/charts/b.tgz), whose name does not start with '_' or '.'.
func subchartArchive(name string) bool {
	parts := strings.Split(name, "/")
	if len(parts)%2 != 0 || !strings.HasSuffix(name, ".tgz") {
		return false
	}
	for i := 0; i < len(parts); i += 2 {
		if parts[i] != "charts" || strings.IndexAny(parts[i+1], "_.") == 0 {
			return false
		}
	}
	return true
}

// expandArchives replaces each vendored subchart archive by its files, in the folder
// charts/<archive name without .tgz>/ next to it, archives within archives included.
// The archive's own bytes leave the count, its expanded files join it.
func (c *chartFiles) expandArchives() error {
	for depth := 0; ; depth++ {
		i := slices.IndexFunc(c.files, func(f *archive.BufferedFile) bool { return subchartArchive(f.Name) })
		if i < 0 {
			return nil
		}
		if depth > maxChartDepth {
			return refused(c.key, "subchart archives nest more than %d levels deep", maxChartDepth)
		}
		a := c.files[i]
		c.files = slices.Delete(c.files, i, i+1)
		c.bytes -= int64(len(a.Data))
		c.count--
		folder := strings.TrimSuffix(a.Name, ".tgz") + "/"
		if slices.ContainsFunc(c.files, func(f *archive.BufferedFile) bool { return strings.HasPrefix(f.Name, folder) }) {
			return refused(c.key, "%s and the folder %s are both there; a subchart is vendored once", a.Name, folder)
		}
		expanded, err := c.untar(a.Name, a.Data)
		if err != nil {
			return err
		}
		for _, f := range expanded {
			f.Name = folder + f.Name
		}
		c.files = append(c.files, expanded...)
	}
}

// untar reads a vendored subchart archive as Helm's archive loader does (the top folder
// stripped, a byte order mark too), within the caps left, and refuses anything but
// folders and regular files, absolute paths and paths through "..".
func (c *chartFiles) untar(name string, data []byte) ([]*archive.BufferedFile, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the subchart archive %s", name)
	}
	defer func() { _ = zr.Close() }()
	tr := tar.NewReader(zr)
	var out []*archive.BufferedFile
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the subchart archive %s", name)
		}
		switch hd.Typeflag {
		case tar.TypeDir, tar.TypeXGlobalHeader, tar.TypeXHeader:
			continue
		case tar.TypeReg:
		default:
			return nil, refused(c.key, "%s: %s is not a regular file (tar type %q); packages may not contain links or devices",
				name, hd.Name, hd.Typeflag)
		}
		entry := strings.ReplaceAll(hd.Name, "\\", "/")
		top, rest, _ := strings.Cut(entry, "/")
		switch clean := path.Clean(rest); {
		case path.IsAbs(entry) || path.IsAbs(rest) || strings.Contains(top, ":"):
			return nil, refused(c.key, "%s: %s is an absolute path; a chart may only hold its own files", name, hd.Name)
		case rest == "" || clean == "." || top == "Chart.yaml":
			return nil, refused(c.key, "%s: %s is not inside the archive's chart folder", name, hd.Name)
		case top == ".." || slices.Contains(strings.Split(rest, "/"), ".."):
			return nil, refused(c.key, "%s: %s contains '..'; a chart may only hold its own files", name, hd.Name)
		default:
			rest = clean
		}
		if err := c.add(name+": "+hd.Name, hd.Size); err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(tr, MaxChartBytes-c.bytes+hd.Size+1))
		if err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, c.key, "reading the subchart archive %s", name)
		}
		if int64(len(body)) != hd.Size {
			return nil, tooLarge(c.key, "more than %d bytes (the cap on a chart's size, its subchart archives expanded) at %s: %s",
				MaxChartBytes, name, hd.Name)
		}
		out = append(out, &archive.BufferedFile{Name: rest, ModTime: hd.ModTime, Data: bytes.TrimPrefix(body, utf8BOM)})
	}
	if len(out) == 0 {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, c.key, "the subchart archive %s holds no files", name)
	}
	return out, nil
}

// loadChart builds the chart from its files with Helm's loader, and refuses what kaddons
// does not render: a chart of another API version than v1 or v2, a library chart.
func loadChart(files []*archive.BufferedFile, key string) (*chart.Chart, error) {
	i := slices.IndexFunc(files, func(f *archive.BufferedFile) bool { return f.Name == "Chart.yaml" })
	if i < 0 {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "no Chart.yaml")
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := yaml.Unmarshal(files[i].Data, &head); err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, key, "reading Chart.yaml")
	}
	switch head.APIVersion {
	case chart.APIVersionV1, chart.APIVersionV2, "":
	default:
		return nil, fail(addonsv1alpha1.ReasonChartRefused, nil, key,
			"Chart.yaml has apiVersion %q; kaddons renders charts of apiVersion v1 and v2", head.APIVersion)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, key, "loading the chart")
	}
	if c.Metadata.Type == "library" {
		return nil, fail(addonsv1alpha1.ReasonChartRefused, nil, key, "%s is a library chart, which renders nothing; Helm does not install it either", c.Name())
	}
	return c, nil
}

// checkDependencies refuses a chart, or a vendored subchart, with a dependency in its
// Chart.yaml (or requirements.yaml) that is not vendored under its charts/ folder, as
// `helm template` does without --dependency-update. kaddons never downloads a chart,
// whatever the repository (https://, oci://, file://).
func checkDependencies(c *chart.Chart, key string) error {
	for _, req := range c.Metadata.Dependencies {
		if req == nil {
			continue
		}
		if !slices.ContainsFunc(c.Dependencies(), func(d *chart.Chart) bool { return d.Name() == req.Name }) {
			repo := req.Repository
			if repo == "" {
				repo = "none given"
			}
			return fail(addonsv1alpha1.ReasonChartRefused, nil, key,
				"%s: dependency %q (version %q, repository %s) is not vendored under charts/; kaddons never downloads a chart "+
					"(run `helm dependency build` and ship the charts/ folder in the package)",
				c.ChartFullPath(), req.Name, req.Version, repo)
		}
	}
	for _, d := range c.Dependencies() {
		if err := checkDependencies(d, key); err != nil {
			return err
		}
	}
	return nil
}
