package sources_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
)

func TestDirectoryFetch(t *testing.T) {
	g := NewWithT(t)
	dir := writeTree(t, "one")
	f := newFetcher(t, sources.Limits{})
	req := sources.Request{Kind: sources.KindDirectory, URL: dir}
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(configValue(t, a)).To(Equal("one"))
	g.Expect(a.Dir).NotTo(HavePrefix(dir), "a copy in the cache, not the directory itself")

	// Unchanged: the same digest and copy.
	b, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Digest).To(Equal(a.Digest))
	g.Expect(b.Dir).To(Equal(a.Dir))

	// Changed: a new digest; the pin of the old one no longer matches.
	g.Expect(os.WriteFile(filepath.Join(dir, "packages", "demo", "1.0.0", "configmap.yaml"),
		[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\ndata:\n  value: two\n"), 0o644)).To(Succeed())
	c, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Digest).NotTo(Equal(a.Digest))
	g.Expect(configValue(t, c)).To(Equal("two"))
	req.Digest = a.Digest
	_, err = f.Fetch(context.Background(), req)
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonDigestMismatch))
}

func TestDirectoryLinks(t *testing.T) {
	// A ConfigMap volume: files are links into a ..data folder of the same directory.
	g := NewWithT(t)
	dir := writeTree(t, "one")
	g.Expect(os.Mkdir(filepath.Join(dir, "..2026"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "..2026", "rapid"), []byte("manifests: []\n"), 0o644)).To(Succeed())
	g.Expect(os.Symlink("..2026", filepath.Join(dir, "..data"))).To(Succeed())
	g.Expect(os.Symlink("..data/rapid", filepath.Join(dir, "rapid"))).To(Succeed())
	a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), sources.Request{Kind: sources.KindDirectory, URL: dir})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Join(a.Dir, "rapid")).To(BeARegularFile())
	g.Expect(filepath.Join(a.Dir, "..data")).NotTo(BeAnExistingFile())

	// A link out of the directory is refused.
	g.Expect(os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))).To(Succeed())
	_, err = newFetcher(t, sources.Limits{}).Fetch(context.Background(), sources.Request{Kind: sources.KindDirectory, URL: dir})
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonArchiveRefused))
	g.Expect(err).To(MatchError(ContainSubstring("out of the directory")))
}

func TestDirectoryBundleMetadata(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	g.Expect(os.CopyFS(filepath.Join(root, "tree"), os.DirFS(writeTree(t, "one")))).To(Succeed())
	g.Expect(os.Mkdir(filepath.Join(root, "metadata"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "metadata", sources.AnnotationsFile), []byte(strings.Join([]string{
		"annotations:",
		"  kaddons.dev.bundle.manifests.v1: tree/",
		"  kaddons.dev.operator.id.v1: platform",
		"  kaddons.dev.kubernetes.versions.v1: '>=1.31'",
		""}, "\n")), 0o644)).To(Succeed())
	a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), sources.Request{Kind: sources.KindDirectory, URL: root})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(configValue(t, a)).To(Equal("one"))
	g.Expect(a.Metadata).To(Equal(sources.Metadata{MediaType: sources.MediaTypeChannels, OperatorID: "platform", KubernetesVersions: ">=1.31"}))
	err = a.Metadata.Check("kaddons", "v0.1.0", "v1.33.0")
	g.Expect(sources.ReasonOf(err)).To(Equal(sources.ReasonOperatorMismatch))
}

func TestCacheEviction(t *testing.T) {
	g := NewWithT(t)
	cacheDir := t.TempDir()
	// Room for about one tree: older revisions go, the current one of each source stays.
	f, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, MaxCacheBytes: 300})
	g.Expect(err).NotTo(HaveOccurred())
	dir := writeTree(t, "one")
	req := sources.Request{Kind: sources.KindDirectory, URL: dir}
	a, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())

	other := sources.Request{Kind: sources.KindDirectory, URL: writeTree(t, "other")}
	o, err := f.Fetch(context.Background(), other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Dir).To(BeADirectory(), "the current revision of a source is never evicted")

	g.Expect(os.WriteFile(filepath.Join(dir, "stable"), []byte("manifests:\n- name: demo\n  version: 1.0.0\n# two\n"), 0o644)).To(Succeed())
	b, err := f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Digest).NotTo(Equal(a.Digest))
	g.Expect(a.Dir).NotTo(BeAnExistingFile(), "the old revision, over the bound, is evicted")
	g.Expect(b.Dir).To(BeADirectory())
	g.Expect(o.Dir).To(BeADirectory())

	// Released, a source's revision may go too.
	f.Release(other)
	g.Expect(os.WriteFile(filepath.Join(dir, "stable"), []byte("manifests:\n- name: demo\n  version: 1.0.0\n# three\n"), 0o644)).To(Succeed())
	_, err = f.Fetch(context.Background(), req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.Dir).NotTo(BeAnExistingFile())
	entries, err := os.ReadDir(filepath.Join(cacheDir, "artifacts"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1))
}
