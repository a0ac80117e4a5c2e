package main

import (
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// The image's user: the "nonroot" user of distroless, which config/manager also names.
const (
	uid = 65532
	gid = 65532
)

// Paths inside the image.
const (
	managerPath = "/manager"
	caPath      = "/etc/ssl/certs/ca-certificates.crt"
	sbomPath    = "/usr/share/sbom/manager.spdx.json"
)

// metadata labels the image.
type metadata struct {
	version, revision, source string
	created                   time.Time
}

// labels are the OCI labels of the image configs and the annotations of the index.
func (m metadata) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "kaddons",
		"org.opencontainers.image.description": "kaddons, a Kubernetes operator for cluster add-ons",
		"org.opencontainers.image.source":      m.source,
		"org.opencontainers.image.url":         m.source,
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.revision":    m.revision,
		"org.opencontainers.image.created":     m.created.Format(time.RFC3339),
	}
}

// platformImage is the image of one platform.
type platformImage struct {
	platform v1.Platform
	image    v1.Image
}

// newImage assembles the image of platform p: a base layer (users, groups, CA
// certificates, home and /tmp) and a layer with the manager and its SBOM.
func newImage(p v1.Platform, binary string, certs []byte, m metadata) (v1.Image, error) {
	manager, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	sbom, err := spdxSBOM(binary, p, m)
	if err != nil {
		return nil, fmt.Errorf("writing the SBOM: %w", err)
	}
	base, err := ociimage.Layer(m.created, []ociimage.File{
		{Name: "/etc", Mode: 0o755, Dir: true},
		{Name: "/etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid))},
		{Name: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", gid))},
		{Name: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "/etc/ssl", Mode: 0o755, Dir: true},
		{Name: "/etc/ssl/certs", Mode: 0o755, Dir: true},
		{Name: caPath, Mode: 0o644, Data: certs},
		{Name: "/home", Mode: 0o755, Dir: true},
		{Name: "/home/nonroot", Mode: 0o700, Dir: true, UID: uid, GID: gid},
		{Name: "/root", Mode: 0o700, Dir: true},
		{Name: "/tmp", Mode: 0o1777, Dir: true},
	})
	if err != nil {
		return nil, err
	}
	app, err := ociimage.Layer(m.created, []ociimage.File{
		{Name: managerPath, Mode: 0o755, Data: manager},
		{Name: "/usr", Mode: 0o755, Dir: true},
		{Name: "/usr/share", Mode: 0o755, Dir: true},
		{Name: path.Dir(sbomPath), Mode: 0o755, Dir: true},
		{Name: sbomPath, Mode: 0o644, Data: sbom},
	})
	if err != nil {
		return nil, err
	}

	img, err := ociimage.Image(p, m.created, v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint: []string{managerPath},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + caPath,
		},
		Labels: m.labels(),
	},
		ociimage.Addendum{Layer: base, CreatedBy: "kaddons hack/image: users, groups, CA certificates", Comment: "base"},
		ociimage.Addendum{Layer: app, CreatedBy: "kaddons hack/image: " + managerPath + " and its SBOM"},
	)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Author = m.source
	// The labels stay in the config: ggcr's annotated image wrapper reports layer
	// descriptors that differ from its own raw manifest. The index carries them as
	// annotations.
	return mutate.ConfigFile(img, cfg)
}

// newIndex puts the platform images into one OCI image index.
func newIndex(images []platformImage, m metadata) v1.ImageIndex {
	adds := make([]mutate.IndexAddendum, 0, len(images))
	for _, pi := range images {
		p := pi.platform
		adds = append(adds, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1, Platform: &p}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, m.labels()).(v1.ImageIndex)
}

// spdx is the part of an SPDX 2.3 JSON document the SBOM uses.
type spdx struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdxSBOM describes the binary's Go modules (what `go version -m` prints) as SPDX.
func spdxSBOM(binary string, p v1.Platform, m metadata) ([]byte, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	pkgID := func(i int) string { return fmt.Sprintf("SPDXRef-Package-%d", i) }
	mainVersion := m.version
	doc := spdx{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        "kaddons-manager-" + platformString(p),
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s/%s/%s", strings.TrimSuffix(m.source, "/"), m.version, m.revision,
			strings.ReplaceAll(platformString(p), "/", "-")),
		CreationInfo: spdxCreation{Created: m.created.Format(time.RFC3339), Creators: []string{"Tool: kaddons-hack-image"}},
	}
	add := func(name, version, sum string) string {
		id := pkgID(len(doc.Packages))
		pkg := spdxPackage{Name: name, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION"}
		if name != "go" {
			pkg.ExternalRefs = []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/" + name + "@" + version}}
		} else {
			pkg.ExternalRefs = []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/stdlib@" + version}}
		}
		if sum != "" {
			pkg.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: h1ToHex(sum)}}
			if pkg.Checksums[0].ChecksumValue == "" {
				pkg.Checksums = nil
			}
		}
		doc.Packages = append(doc.Packages, pkg)
		return id
	}
	root := add(info.Main.Path, mainVersion, "")
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: root})
	goID := add("go", strings.TrimPrefix(info.GoVersion, "go"), "")
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: root, Type: "DEPENDS_ON", Related: goID})
	deps := append([]*debugModule(nil), modules(info)...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].path < deps[j].path })
	for _, d := range deps {
		id := add(d.path, d.version, d.sum)
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: root, Type: "DEPENDS_ON", Related: id})
	}
	return json.MarshalIndent(doc, "", "  ")
}

// debugModule is one dependency as the binary records it, replacements applied.
type debugModule struct {
	path, version, sum string
}

func modules(info *buildinfo.BuildInfo) []*debugModule {
	out := make([]*debugModule, 0, len(info.Deps))
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		out = append(out, &debugModule{path: m.Path, version: m.Version, sum: m.Sum})
	}
	return out
}

// h1ToHex turns a go.sum hash ("h1:" and base64 SHA-256) into hex; "" if it is not one.
func h1ToHex(sum string) string {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 32 {
		return ""
	}
	return hex.EncodeToString(raw)
}
