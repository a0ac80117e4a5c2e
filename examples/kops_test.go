package examples

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// kopsAddons mirrors kops' channel file (k8s.io/kops channels/pkg/api, type Addons), field
// for field, so a strict decode refuses anything kops would not read.
type kopsAddons struct {
	metav1.TypeMeta `json:",inline"`
	ObjectMeta      metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec            kopsAddonsSpec    `json:"spec,omitempty"`
}

type kopsAddonsSpec struct {
	Addons []*kopsAddonSpec `json:"addons,omitempty"`
}

type kopsAddonSpec struct {
	Name               *string           `json:"name,omitempty"`
	Namespace          *string           `json:"namespace,omitempty"`
	Selector           map[string]string `json:"selector"`
	Manifest           *string           `json:"manifest,omitempty"`
	ManifestHash       string            `json:"manifestHash,omitempty"`
	KubernetesVersion  string            `json:"kubernetesVersion,omitempty"`
	ID                 string            `json:"id,omitempty"`
	NeedsRollingUpdate string            `json:"needsRollingUpdate,omitempty"`
	NeedsPKI           bool              `json:"needsPKI,omitempty"`
	Version            string            `json:"version,omitempty"`
	Prune              *kopsPruneSpec    `json:"prune,omitempty"`
}

type kopsPruneSpec struct {
	Kinds []kopsPruneKindSpec `json:"kinds,omitempty"`
}

type kopsPruneKindSpec struct {
	Group         string   `json:"group,omitempty"`
	Kind          string   `json:"kind,omitempty"`
	Namespaces    []string `json:"namespaces,omitempty"`
	LabelSelector string   `json:"labelSelector,omitempty"`
	FieldSelector string   `json:"fieldSelector,omitempty"`
}

// kopsDir is the kops example: the channel file and the manifests next to it.
var kopsDir = "kops"

// kopsManifestHash hashes a manifest as kops does: SHA-256 over the manifest without its
// leading and trailing white space, in hex.
func kopsManifestHash(data []byte) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(data))))
	return hex.EncodeToString(sum[:])
}

// decodeObjects splits a multi-document manifest into objects.
func decodeObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objects []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects
		}
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if len(u.Object) > 0 {
			objects = append(objects, u)
		}
	}
}

// crdKey names a CRD by the group and kind it defines.
func crdKey(t *testing.T, crd *unstructured.Unstructured) string {
	t.Helper()
	group, _, err := unstructured.NestedString(crd.Object, "spec", "group")
	if err != nil {
		t.Fatal(err)
	}
	kind, _, err := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	if err != nil {
		t.Fatal(err)
	}
	return group + "/" + kind
}

// crdVersions returns a CRD's versions: their names, schemas and subresources.
func crdVersions(t *testing.T, crd *unstructured.Unstructured) []any {
	t.Helper()
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

func TestKopsChannel(t *testing.T) {
	g := NewWithT(t)
	const refresh = "run `make kops-channel` and commit examples/kops"
	data, err := os.ReadFile(filepath.Join(kopsDir, "addons.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	channel := &kopsAddons{}
	g.Expect(yaml.UnmarshalStrict(data, channel)).To(Succeed(), "the channel file has fields kops does not know")

	// kops (1.37 and later) reads a file as an Addons index only without an apiVersion.
	g.Expect(channel.APIVersion).To(BeEmpty())
	g.Expect(channel.Kind).To(Equal("Addons"))
	g.Expect(channel.ObjectMeta.Name).NotTo(BeEmpty())
	g.Expect(channel.Spec.Addons).NotTo(BeEmpty())

	names := map[string]bool{}
	manifests := map[string][]*unstructured.Unstructured{}
	for i, addon := range channel.Spec.Addons {
		g.Expect(addon).NotTo(BeNil(), "spec.addons[%d]", i)
		g.Expect(addon.Name).NotTo(BeNil(), "spec.addons[%d] has no name", i)
		name := *addon.Name
		g.Expect(names).NotTo(HaveKey(name), "two entries are named %s", name)
		names[name] = true
		// kops records what it applied in an annotation addons.k8s.io/<name> on the namespace.
		g.Expect(validation.IsQualifiedName("addons.k8s.io/"+name)).To(BeEmpty(), "%s", name)
		g.Expect([]string{"", "control-plane", "workers", "all"}).To(ContainElement(addon.NeedsRollingUpdate), "%s", name)

		g.Expect(addon.Manifest).NotTo(BeNil(), "%s has no manifest", name)
		manifest := *addon.Manifest
		g.Expect(manifest).NotTo(ContainSubstring("/"), "%s: the manifests live next to the channel file", name)
		content, err := os.ReadFile(filepath.Join(kopsDir, manifest))
		g.Expect(err).NotTo(HaveOccurred(), "%s: %s", name, refresh)
		g.Expect(addon.ManifestHash).To(Equal(kopsManifestHash(content)), "%s: %s changed: %s", name, manifest, refresh)

		objects := decodeObjects(t, content)
		g.Expect(objects).NotTo(BeEmpty(), "%s: %s is empty", name, manifest)
		manifests[manifest] = objects
		g.Expect(addon.Selector).NotTo(BeEmpty(), "%s has no selector", name)
		selector := labels.SelectorFromSet(addon.Selector)
		matched := 0
		for _, obj := range objects {
			if selector.Matches(labels.Set(obj.GetLabels())) {
				matched++
			}
		}
		g.Expect(matched).NotTo(BeZero(), "%s: the selector %v matches nothing in %s", name, addon.Selector, manifest)
	}

	// The installer defines every add-on kind, so the add-on resources it travels with are
	// ones the API server knows. (It is a snapshot of dist/install.yaml: `make
	// kops-channel` refreshes it with your image and the CRDs of the tree.)
	installed := map[string]*unstructured.Unstructured{}
	for _, obj := range manifests["install.yaml"] {
		if obj.GetKind() == "CustomResourceDefinition" {
			installed[crdKey(t, obj)] = obj
		}
	}
	for _, kind := range addonKinds(t) {
		g.Expect(installed).To(HaveKey(addonsv1alpha1.GroupVersion.Group+"/"+kind), "install.yaml lacks the CRD of %s: %s", kind, refresh)
	}
	g.Expect(manifests).To(HaveKey("addon-resources.yaml"))
	for _, obj := range manifests["addon-resources.yaml"] {
		gvk := obj.GroupVersionKind()
		crd, ok := installed[gvk.Group+"/"+gvk.Kind]
		g.Expect(ok).To(BeTrue(), "addon-resources.yaml has a %s that install.yaml does not define", gvk)
		g.Expect(crdVersions(t, crd)).To(ContainElement(HaveKeyWithValue("name", gvk.Version)))
		// kops applies this manifest as it is, so every add-on names its namespace.
		g.Expect(obj.GetNamespace()).NotTo(BeEmpty(), "%s %s", gvk.Kind, obj.GetName())
		// kops installs and owns CoreDNS in kube-system itself.
		g.Expect(gvk.Kind).NotTo(Equal("CoreDNS"))
	}
}
