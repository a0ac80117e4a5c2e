package sources

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	. "github.com/onsi/gomega"
)

func TestParseBundle(t *testing.T) {
	cases := []struct {
		name        string
		labels      map[string]string
		annotations string
		require     bool
		want        Bundle
		wantErr     string
	}{
		{name: "labels only", require: true,
			labels: map[string]string{LabelMediaType: MediaTypeChannels, LabelManifests: "manifests/", LabelMetadata: "metadata/",
				LabelOperatorID: "kaddons", LabelMinOperatorVersion: "v0.2.0", LabelKubernetesVersions: ">=1.30.0 <1.36.0",
				"org.opencontainers.image.source": "https://example.com"},
			want: Bundle{ManifestsDir: "manifests", MetadataDir: "metadata", Metadata: Metadata{MediaType: MediaTypeChannels,
				OperatorID: "kaddons", MinOperatorVersion: "v0.2.0", KubernetesVersions: ">=1.30.0 <1.36.0"}}},
		{name: "the file wins on conflict", require: true,
			labels:      map[string]string{LabelMediaType: MediaTypeChannels, LabelOperatorID: "other", LabelManifests: "manifests/"},
			annotations: "annotations:\n  kaddons.dev.operator.id.v1: kaddons\n  kaddons.dev.bundle.manifests.v1: tree/\n",
			want:        Bundle{ManifestsDir: "tree", MetadataDir: "metadata", Metadata: Metadata{MediaType: MediaTypeChannels, OperatorID: "kaddons"}}},
		{name: "a plain tree", want: Bundle{ManifestsDir: ".", MetadataDir: "metadata", Metadata: Metadata{MediaType: MediaTypeChannels}}},
		{name: "an image must say what it is", require: true, wantErr: "not a kaddons bundle"},
		{name: "another mediatype", labels: map[string]string{LabelMediaType: "registry+v1"}, wantErr: "not a kaddons channels tree"},
		{name: "unknown kaddons key", annotations: "annotations:\n  kaddons.dev.operator.idd.v1: x\n", wantErr: `unknown key "kaddons.dev.operator.idd.v1"`},
		{name: "unknown field", annotations: "annotations: {}\nextra: 1\n", wantErr: "unknown field"},
		{name: "no annotations map", annotations: "other: 1\n", wantErr: "unknown field"},
		{name: "empty file", annotations: "\n", wantErr: "no annotations: map"},
		{name: "manifests outside", labels: map[string]string{LabelManifests: "../x"}, wantErr: "leaves the bundle"},
		{name: "manifests absolute", labels: map[string]string{LabelManifests: "/x"}, wantErr: "not a relative path"},
		{name: "bad operator id", labels: map[string]string{LabelOperatorID: "Kaddons Operator"}, wantErr: "not a valid operator id"},
		{name: "bad minimum", labels: map[string]string{LabelMinOperatorVersion: "0.2"}, wantErr: "not a semantic version"},
		{name: "bad range", labels: map[string]string{LabelKubernetesVersions: ">=one"}, wantErr: "not a version range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var ann []byte
			if tc.annotations != "" {
				ann = []byte(tc.annotations)
			}
			b, err := ParseBundle(tc.labels, ann, tc.require)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(b).To(Equal(tc.want))
		})
	}
}

func TestAnnotationsRoundTrip(t *testing.T) {
	g := NewWithT(t)
	in := Bundle{ManifestsDir: "manifests", MetadataDir: "metadata", Metadata: Metadata{MediaType: MediaTypeChannels,
		OperatorID: "kaddons", KubernetesVersions: ">=1.30"}}
	data, err := MarshalAnnotations(in.Annotations())
	g.Expect(err).NotTo(HaveOccurred())
	out, err := ParseBundle(nil, data, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(in))
}

func TestReadBundle(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "metadata"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "tree"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "metadata", AnnotationsFile),
		[]byte("annotations:\n  kaddons.dev.bundle.manifests.v1: tree/\n"), 0o644)).To(Succeed())
	b, dir, err := ReadBundle(root, nil, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dir).To(Equal(filepath.Join(root, "tree")))
	g.Expect(b.Metadata.MediaType).To(Equal(MediaTypeChannels))

	// A manifests folder that is a symbolic link is refused.
	g.Expect(os.RemoveAll(filepath.Join(root, "tree"))).To(Succeed())
	g.Expect(os.Symlink("/etc", filepath.Join(root, "tree"))).To(Succeed())
	_, _, err = ReadBundle(root, nil, false)
	g.Expect(ReasonOf(err)).To(Equal(ReasonInvalidBundle))
}

func TestReadPackageMetadata(t *testing.T) {
	fsys := fstest.MapFS{
		"packages/coredns/1.12.1/metadata.yaml":      {Data: []byte("annotations:\n  kaddons.dev.kubernetes.versions.v1: \">=1.30\"\n  kaddons.dev.operator.min-version.v1: v0.3.0\n")},
		"packages/coredns/1.11.3/kustomization.yaml": {Data: []byte("resources: []\n")},
		"packages/coredns/9.9.9/metadata.yaml":       {Data: []byte("annotations:\n  kaddons.dev.mediatype.v1: kaddons-channels-v1\n")},
		"packages/coredns/8.8.8/metadata.yaml":       {Data: []byte("annotations:\n  kaddons.dev.kubernetes.versions.v1: \">=one\"\n")},
	}
	cases := []struct {
		version string
		want    Metadata
		wantErr string
	}{
		{version: "1.12.1", want: Metadata{KubernetesVersions: ">=1.30", MinOperatorVersion: "v0.3.0"}},
		{version: "1.11.3", want: Metadata{}},
		{version: "9.9.9", wantErr: "unknown key"},
		{version: "8.8.8", wantErr: "not a version range"},
		{version: "..", wantErr: "not a valid package name"},
	}
	for _, tc := range cases {
		t.Run(tc.version, func(t *testing.T) {
			g := NewWithT(t)
			m, err := ReadPackageMetadata(fsys, "coredns", tc.version)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				g.Expect(ReasonOf(err)).To(Equal(ReasonInvalidBundle))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m).To(Equal(tc.want))
		})
	}
}

func TestCheck(t *testing.T) {
	m := Metadata{OperatorID: "kaddons", MinOperatorVersion: "v0.3.0", KubernetesVersions: ">=1.30.0 <1.36.0"}
	cases := []struct {
		name              string
		meta              Metadata
		id, version, kube string
		wantReason        string
	}{
		{name: "all satisfied", meta: m, id: "kaddons", version: "v0.3.0", kube: "v1.33.2"},
		{name: "default id", meta: m, id: "", version: "v0.4.1", kube: "v1.35.9"},
		{name: "no constraints", meta: Metadata{}, id: "other", version: "v0.0.1", kube: "v1.20.0"},
		{name: "operator mismatch", meta: m, id: "platform", version: "v0.3.0", kube: "v1.33.2", wantReason: ReasonOperatorMismatch},
		{name: "operator too old", meta: m, id: "kaddons", version: "v0.2.9", kube: "v1.33.2", wantReason: ReasonOperatorTooOld},
		{name: "a release candidate is older than its release", meta: m, id: "kaddons", version: "v0.3.0-rc.1", kube: "v1.33.2", wantReason: ReasonOperatorTooOld},
		{name: "dev satisfies every minimum", meta: m, id: "kaddons", version: "dev", kube: "v1.33.2"},
		{name: "an unreadable operator version", meta: m, id: "kaddons", version: "nightly", kube: "v1.33.2", wantReason: ReasonOperatorTooOld},
		{name: "kubernetes too new", meta: m, id: "kaddons", version: "v0.3.0", kube: "v1.36.0", wantReason: ReasonKubernetesVersionUnsupported},
		{name: "kubernetes too old", meta: m, id: "kaddons", version: "v0.3.0", kube: "v1.29.14", wantReason: ReasonKubernetesVersionUnsupported},
		{name: "a provider's build counts as its release", meta: m, id: "kaddons", version: "v0.3.0", kube: "v1.33.0-gke.100+abc"},
		{name: "a pre-release of the cluster counts as its release", meta: m, id: "kaddons", version: "v0.3.0", kube: "v1.36.0-alpha.1", wantReason: ReasonKubernetesVersionUnsupported},
		{name: "an unreadable cluster version", meta: m, id: "kaddons", version: "v0.3.0", kube: "", wantReason: ReasonKubernetesVersionUnsupported},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tc.meta.Check(tc.id, tc.version, tc.kube)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(ReasonOf(err)).To(Equal(tc.wantReason))
			g.Expect(IsTransient(err)).To(BeFalse())
		})
	}
}
