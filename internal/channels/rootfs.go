package channels

import (
	"io/fs"
	"os"
)

// rootFS is the directory of a directory source, read through os.Root: a symbolic link
// that stays inside the directory is followed (a ConfigMap volume links its keys to a
// ..data folder), one that leads outside fails, unlike os.DirFS, which follows it
// anywhere. Inside a package, readPackage refuses symbolic links altogether.
//
// Each call opens the directory again, so that a directory replaced or created after the
// Catalog is read as it is now.
type rootFS string

// fsys opens the directory and returns the file system of its os.Root, and a function
// that closes the root. Files opened through the file system stay valid after it.
func (d rootFS) fsys() (fs.FS, func(), error) {
	root, err := os.OpenRoot(string(d))
	if err != nil {
		return nil, nil, err
	}
	return root.FS(), func() { _ = root.Close() }, nil
}

// Open implements fs.FS.
func (d rootFS) Open(name string) (fs.File, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer done()
	return fsys.Open(name)
}

// Stat implements fs.StatFS.
func (d rootFS) Stat(name string) (fs.FileInfo, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	defer done()
	return fs.Stat(fsys, name)
}

// Lstat implements fs.ReadLinkFS.
func (d rootFS) Lstat(name string) (fs.FileInfo, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	defer done()
	return fs.Lstat(fsys, name)
}

// ReadLink implements fs.ReadLinkFS.
func (d rootFS) ReadLink(name string) (string, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	defer done()
	return fs.ReadLink(fsys, name)
}

// ReadDir implements fs.ReadDirFS.
func (d rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	defer done()
	return fs.ReadDir(fsys, name)
}

// ReadFile implements fs.ReadFileFS.
func (d rootFS) ReadFile(name string) ([]byte, error) {
	fsys, done, err := d.fsys()
	if err != nil {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	defer done()
	return fs.ReadFile(fsys, name)
}

// openDir opens dir of fsys for a series of reads relative to it, and returns a function
// that releases it. For a directory source it is one os.Root at dir, opened through the
// source's root (a symbolic link may lead to dir if it stays inside the source): each
// read through the returned file system is then one system call relative to dir's
// descriptor, where a read through rootFS opens the source's directory again and walks
// down to dir. For any other file system it is fs.Sub.
func openDir(fsys fs.FS, dir string) (fs.FS, func(), error) {
	d, ok := fsys.(rootFS)
	if !ok {
		sub, err := fs.Sub(fsys, dir)
		return sub, func() {}, err
	}
	root, err := os.OpenRoot(string(d))
	if err != nil {
		return nil, nil, err
	}
	if dir != "." {
		sub, err := root.OpenRoot(dir)
		_ = root.Close()
		if err != nil {
			return nil, nil, err
		}
		root = sub
	}
	return root.FS(), func() { _ = root.Close() }, nil
}
