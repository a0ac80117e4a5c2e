package sources

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name     string
	typ      byte
	body     string
	size     int64 // for a header that claims more or less than body
	linkname string
}

func makeTar(t *testing.T, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(e.body))
		if typ != tar.TypeReg {
			size = 0
		}
		if e.size != 0 {
			size = e.size
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: typ, Size: size, Mode: 0o755, Linkname: e.linkname}); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !gz {
		return buf.Bytes()
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(buf.Bytes())
	_ = zw.Close()
	return out.Bytes()
}

func TestExtract(t *testing.T) {
	small := Limits{MaxBytes: 1000, MaxFiles: 5, MaxDepth: 3}
	cases := []struct {
		name    string
		entries []tarEntry
		limits  Limits
		gzip    bool
		wantErr string // empty: extracted
	}{
		{name: "a channels tree", gzip: true, entries: []tarEntry{
			{name: "stable", body: "manifests: []\n"}, {name: "packages/", typ: tar.TypeDir},
			{name: "packages/coredns/1.0.0/kustomization.yaml", body: "resources: []\n"},
		}},
		{name: "uncompressed", entries: []tarEntry{{name: "./stable", body: "x"}}},
		{name: "traversal", entries: []tarEntry{{name: "../evil", body: "x"}}, wantErr: "leaves the tree"},
		{name: "traversal inside", entries: []tarEntry{{name: "packages/../../evil", body: "x"}}, wantErr: "leaves the tree"},
		{name: "absolute path", entries: []tarEntry{{name: "/etc/passwd", body: "x"}}, wantErr: "absolute path"},
		{name: "symlink", entries: []tarEntry{{name: "stable", typ: tar.TypeSymlink, linkname: "/etc/passwd"}}, wantErr: "symbolic link"},
		{name: "hard link", entries: []tarEntry{{name: "a", body: "x"}, {name: "b", typ: tar.TypeLink, linkname: "a"}}, wantErr: "hard link"},
		{name: "character device", entries: []tarEntry{{name: "null", typ: tar.TypeChar}}, wantErr: "device"},
		{name: "block device", entries: []tarEntry{{name: "sda", typ: tar.TypeBlock}}, wantErr: "device"},
		{name: "fifo", entries: []tarEntry{{name: "pipe", typ: tar.TypeFifo}}, wantErr: "named pipe"},
		{name: "duplicate", entries: []tarEntry{{name: "stable", body: "a"}, {name: "./stable", body: "b"}}, wantErr: "appears twice"},
		{name: "duplicate folder", entries: []tarEntry{{name: "p/", typ: tar.TypeDir}, {name: "p", typ: tar.TypeDir}}, wantErr: "appears twice"},
		{name: "file then folder", entries: []tarEntry{{name: "p", body: "a"}, {name: "p/x", body: "b"}}, wantErr: "a file and a folder"},
		{name: "bomb over the byte cap", gzip: true, limits: small,
			entries: []tarEntry{{name: "big", body: strings.Repeat("0", 100000)}}, wantErr: "more than 1000 bytes"},
		{name: "bytes summed over files", limits: small,
			entries: []tarEntry{{name: "a", body: strings.Repeat("0", 600)}, {name: "b", body: strings.Repeat("0", 600)}}, wantErr: "more than 1000 bytes"},
		{name: "too many files", limits: small, entries: []tarEntry{
			{name: "1", body: "x"}, {name: "2", body: "x"}, {name: "3", body: "x"}, {name: "4", body: "x"}, {name: "5", body: "x"}, {name: "6", body: "x"},
		}, wantErr: "more than 5 entries"},
		{name: "too deep", limits: small, entries: []tarEntry{{name: "a/b/c/d", body: "x"}}, wantErr: "4 folders deep"},
		{name: "not a tar", entries: nil, wantErr: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			err := Extract(bytes.NewReader(makeTar(t, tc.gzip, tc.entries...)), dir, tc.limits)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				for _, e := range tc.entries {
					if e.typ == 0 {
						data, err := os.ReadFile(filepath.Join(dir, e.name))
						g.Expect(err).NotTo(HaveOccurred())
						g.Expect(string(data)).To(Equal(e.body))
						info, _ := os.Stat(filepath.Join(dir, e.name))
						g.Expect(info.Mode().Perm() & 0o111).To(BeZero()) // never executable
					}
				}
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			g.Expect(ReasonOf(err)).To(Equal(ReasonArchiveRefused))
			g.Expect(IsTransient(err)).To(BeFalse())
			// Nothing was written outside dir.
			_, statErr := os.Lstat(filepath.Join(filepath.Dir(dir), "evil"))
			g.Expect(errors.Is(statErr, os.ErrNotExist)).To(BeTrue())
		})
	}
}

func TestExtractTruncated(t *testing.T) {
	g := NewWithT(t)
	// The header claims 10 bytes; the archive ends after 5.
	data := makeTar(t, false, tarEntry{name: "a", body: "0123456789"})
	err := Extract(bytes.NewReader(data[:512+5]), t.TempDir(), Limits{})
	g.Expect(err).To(MatchError(ContainSubstring("reading a")))
	g.Expect(ReasonOf(err)).To(Equal(ReasonArchiveRefused))
}
