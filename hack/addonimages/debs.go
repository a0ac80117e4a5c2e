package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// deb is a Debian package at the version this machine's apt would install.
type deb struct {
	name, version, arch string
}

// file is the name `apt-get download` gives the package.
func (d deb) file() string {
	return fmt.Sprintf("%s_%s_%s.deb", d.name, strings.ReplaceAll(d.version, ":", "%3a"), d.arch)
}

// resolveDebs looks up the candidate version of each package, in one apt-cache call
// (`apt-get update` must have run).
func (b *builder) resolveDebs(names []string) ([]deb, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := []string{"show", "--no-all-versions"}
	for _, n := range names {
		args = append(args, n+":"+platform.Architecture)
	}
	show, err := runCommand("/", nil, "apt-cache", args...)
	if err != nil {
		return nil, fmt.Errorf("the Debian packages %s (has `apt-get update` run?): %w", strings.Join(names, " "), err)
	}
	found := map[string]deb{}
	for _, record := range strings.Split(show, "\n\n") {
		var d deb
		for _, line := range strings.Split(record, "\n") {
			if v, ok := strings.CutPrefix(line, "Package: "); ok {
				d.name = v
			}
			if v, ok := strings.CutPrefix(line, "Version: "); ok {
				d.version = v
			}
			if v, ok := strings.CutPrefix(line, "Architecture: "); ok {
				d.arch = v
			}
		}
		if d.name != "" {
			found[d.name] = d
		}
	}
	out := make([]deb, 0, len(names))
	for _, n := range names {
		d, ok := found[n]
		if !ok || d.version == "" || d.arch == "" {
			return nil, fmt.Errorf("the Debian package %s: no candidate version (has `apt-get update` run?)", n)
		}
		out = append(out, d)
	}
	return out, nil
}

// unpackDebs downloads the packages (apt-get download, into the cache) and returns the
// files of their data archives, as dpkg would install them on a merged-/usr system, without
// documentation other than the copyright files. Maintainer scripts do not run.
func (b *builder) unpackDebs(debs []deb) ([]ociimage.File, error) {
	dir := filepath.Join(b.cache, "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var missing []string
	for _, d := range debs {
		if _, err := os.Stat(filepath.Join(dir, d.file())); err != nil {
			missing = append(missing, d.name+":"+d.arch+"="+d.version)
		}
	}
	if len(missing) > 0 {
		b.logf("apt-get download %s", strings.Join(missing, " "))
		if _, err := runCommand(dir, nil, "apt-get", append([]string{"download", "-q"}, missing...)...); err != nil {
			return nil, err
		}
	}
	var files []ociimage.File
	for _, d := range debs {
		fs, err := debFiles(filepath.Join(dir, d.file()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.file(), err)
		}
		files = append(files, fs...)
	}
	return files, nil
}

// debFiles reads the data archive of a .deb (dpkg-deb --fsys-tarfile).
func debFiles(file string) ([]ociimage.File, error) {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", file)
	cmd.Stderr = os.Stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile: %w", err)
	}
	tr := tar.NewReader(bytes.NewReader(data))
	var out []ociimage.File
	content := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		name := mergedUsr("/" + strings.TrimPrefix(path.Clean("/"+h.Name), "/"))
		if name == "/" || skipped(name) {
			continue
		}
		f := ociimage.File{Name: name, Mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Dir = true
		case tar.TypeSymlink:
			f.Symlink, f.Mode = h.Linkname, 0o777
		case tar.TypeLink:
			target := mergedUsr(path.Clean("/" + h.Linkname))
			f.Data = content[target]
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
			content[name] = f.Data
		default:
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// mergedUsr maps /bin, /sbin and /lib* into /usr, as on a merged-/usr system (Debian 12
// and later), where those are links (usrMergeLinks).
func mergedUsr(name string) string {
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if name == d || strings.HasPrefix(name, d+"/") {
			return "/usr" + name
		}
	}
	return name
}

func usrMergeLinks() []ociimage.File {
	out := make([]ociimage.File, 0, 8)
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		out = append(out, ociimage.File{Name: "/" + d, Symlink: "usr/" + d, Mode: 0o777},
			ociimage.File{Name: "/usr/" + d, Mode: 0o755, Dir: true})
	}
	return out
}

// skipped are documentation, manual pages, translations, glibc's character set
// conversion modules (gconv) and tc's qdisc modules (q_atm needs libatm): not needed to
// run. Copyright
// files stay.
func skipped(name string) bool {
	if strings.HasPrefix(name, "/usr/share/doc/") {
		return path.Base(name) != "copyright" && strings.Count(name, "/") > 4
	}
	for _, p := range []string{"/usr/share/man", "/usr/share/info", "/usr/share/locale", "/usr/share/lintian",
		"/usr/share/bug", "/usr/share/bash-completion", "/usr/share/zsh", "/usr/share/gdb",
		"/usr/lib/x86_64-linux-gnu/gconv", "/usr/lib/x86_64-linux-gnu/tc"} {
		if name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// busyboxLinks links every applet of Debian's busybox-static (/usr/bin/busybox) whose path
// no other file of the image takes.
func (b *builder) busyboxLinks(files []ociimage.File) ([]ociimage.File, error) {
	taken := map[string]bool{}
	var bin []byte
	for _, f := range files {
		taken[mergedUsr(f.Name)] = true
		if f.Name == "/usr/bin/busybox" {
			bin = f.Data
		}
	}
	if bin == nil {
		return nil, fmt.Errorf("no /usr/bin/busybox: the recipe needs busybox-static")
	}
	tmp, err := os.CreateTemp("", "busybox-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(bin); err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return nil, err
	}
	list, err := runCommand("/", nil, tmp.Name(), "--list-full")
	if err != nil {
		return nil, err
	}
	var out []ociimage.File
	for _, applet := range strings.Fields(list) {
		name := mergedUsr("/" + applet)
		if taken[name] {
			continue
		}
		taken[name] = true
		out = append(out, ociimage.File{Name: name, Symlink: "/usr/bin/busybox", Mode: 0o777})
	}
	return out, nil
}

// checkLinked fails unless every ELF executable and library among files finds its program
// interpreter and every library it needs (DT_NEEDED) in files, as the dynamic linker would
// search them; the Go programs must be static.
func checkLinked(files []ociimage.File) error {
	fs := map[string]ociimage.File{}
	for _, f := range ociimage.Sorted(files) {
		fs[f.Name] = f
	}
	var problems []string
	for _, f := range fs {
		if f.Dir || f.Symlink != "" || !bytes.HasPrefix(f.Data, []byte(elf.ELFMAG)) {
			continue
		}
		e, err := elf.NewFile(bytes.NewReader(f.Data))
		if err != nil {
			continue
		}
		for _, p := range e.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			interp, _ := io.ReadAll(p.Open())
			if !resolve(fs, strings.TrimRight(string(interp), "\x00")) {
				problems = append(problems, fmt.Sprintf("%s: no interpreter %s", f.Name, interp))
			}
		}
		libs, _ := e.DynString(elf.DT_NEEDED)
		for _, lib := range libs {
			found := false
			for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib"} {
				if resolve(fs, d+"/"+lib) {
					found = true
					break
				}
			}
			if !found {
				problems = append(problems, fmt.Sprintf("%s: needs %s, which no package of the recipe has", f.Name, lib))
			}
		}
		_ = e.Close()
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("the root file system is incomplete:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// resolve tells whether name leads to a regular file of fs, following symbolic links (of
// any path component).
func resolve(fs map[string]ociimage.File, name string) bool {
	for hops := 0; hops < 40; hops++ {
		parts := strings.Split(strings.TrimPrefix(path.Clean(name), "/"), "/")
		cur, changed := "", false
		for i, part := range parts {
			cur += "/" + part
			f, ok := fs[cur]
			if !ok {
				return false
			}
			if f.Symlink != "" {
				target := f.Symlink
				if !path.IsAbs(target) {
					target = path.Join(path.Dir(cur), target)
				}
				name, changed = path.Join(append([]string{target}, parts[i+1:]...)...), true
				break
			}
			if i == len(parts)-1 {
				return !f.Dir
			}
		}
		if !changed {
			return false
		}
	}
	return false
}
