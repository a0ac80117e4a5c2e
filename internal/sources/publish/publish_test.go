package publish

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/kaddons/kaddons/internal/sources"
)

const builtinChannels = "../../../channels"

func TestBuildLayout(t *testing.T) {
	g := NewWithT(t)
	img, b, err := Build(builtinChannels, BuildOptions{OperatorID: "kaddons", KubernetesVersions: ">=1.30.0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Metadata).To(Equal(sources.Metadata{MediaType: sources.MediaTypeChannels, OperatorID: "kaddons", KubernetesVersions: ">=1.30.0"}))

	cfg, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Config.Labels).To(Equal(map[string]string{
		sources.LabelMediaType:          sources.MediaTypeChannels,
		sources.LabelManifests:          "manifests/",
		sources.LabelMetadata:           "metadata/",
		sources.LabelOperatorID:         "kaddons",
		sources.LabelKubernetesVersions: ">=1.30.0",
	}))

	layers, err := img.Layers()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(layers).To(HaveLen(1))
	rc, err := layers[0].Compressed()
	g.Expect(err).NotTo(HaveOccurred())
	defer rc.Close() //nolint:errcheck
	zr, err := gzip.NewReader(rc)
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(zr)
	var names []string
	var annotations []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h.ModTime.Unix()).To(BeNumerically("<=", 0), "no times: reproducible")
		names = append(names, h.Name)
		if h.Name == "metadata/annotations.yaml" {
			annotations, _ = io.ReadAll(tr)
		}
	}
	g.Expect(sort.StringsAreSorted(names)).To(BeTrue())
	g.Expect(names).To(ContainElements("manifests/", "manifests/stable", "manifests/rapid",
		"manifests/packages/coredns/1.12.1/kustomization.yaml", "metadata/", "metadata/annotations.yaml"))
	parsed, err := sources.ParseBundle(nil, annotations, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.Metadata).To(Equal(b.Metadata))
	g.Expect(parsed.ManifestsDir).To(Equal("manifests"))

	// The same tree and options give the same digest.
	again, _, err := Build(builtinChannels, BuildOptions{OperatorID: "kaddons", KubernetesVersions: ">=1.30.0"})
	g.Expect(err).NotTo(HaveOccurred())
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	g.Expect(d2).To(Equal(d1))
}

func TestBuildRefusesLinks(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.CopyFS(dir, os.DirFS(builtinChannels))).To(Succeed())
	g.Expect(os.Symlink("/etc/passwd", filepath.Join(dir, "packages", "passwd"))).To(Succeed())
	_, _, err := Build(dir, BuildOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("symbolic link")))
}

func TestBuildRefusesBadMetadata(t *testing.T) {
	g := NewWithT(t)
	_, _, err := Build(builtinChannels, BuildOptions{MinOperatorVersion: "soon"})
	g.Expect(err).To(MatchError(ContainSubstring("not a semantic version")))
}

func TestLoadSigner(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := cryptoutils.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	// cosign generate-key-pair's format: an encrypted sigstore private key.
	der, err := cryptoutils.MarshalPrivateKeyToEncryptedDER(key, cryptoutils.StaticPasswordFunc([]byte("secret")))
	if err != nil {
		t.Fatal(err)
	}
	encrypted := cryptoutils.PEMEncode(cryptoutils.EncryptedSigstorePrivateKeyPEMType, der)
	cases := []struct {
		name     string
		pem      []byte
		password []byte
		wantErr  bool
	}{
		{name: "PKCS#8", pem: plain},
		{name: "cosign's encrypted key", pem: encrypted, password: []byte("secret")},
		{name: "cosign's encrypted key, wrong password", pem: encrypted, password: []byte("wrong"), wantErr: true},
		{name: "not a key", pem: []byte("hello"), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, err := LoadSigner(tc.pem, tc.password)
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			pub, err := s.PublicKey()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cryptoutils.EqualKeys(pub, key.Public())).To(Succeed())
		})
	}
}
