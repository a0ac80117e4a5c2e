package channels

import (
	"bytes"
	"path"
	"slices"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// plainResources returns the files that the package's root kustomization lists, in its
// order, when the package is plain: the kustomization holds nothing but apiVersion
// (kustomize.config.k8s.io/v1beta1), kind (Kustomization) and a resources list whose
// every entry is a file of the package that is not itself a kustomization. Such a
// package renders to its files' objects, one after the other, with nothing transformed,
// so renderPlain builds it without kustomize, whose build time grows faster than the
// square of the object count. ok is false for any other package, which kustomize builds.
//
// Any doubt sends the package to kustomize: a kustomization that does not decode, a
// second kustomization file at the root (kustomize refuses that), an entry naming a
// folder or a missing file, an empty list.
func plainResources(files []packageFile) (resources []string, ok bool) {
	byName := make(map[string]bool, len(files))
	var root []byte
	roots := 0
	for _, f := range files {
		byName[f.name] = true
		if slices.Contains(konfig.RecognizedKustomizationFileNames(), f.name) {
			root = f.data
			roots++
		}
	}
	if roots != 1 {
		return nil, false
	}
	var k map[string]any
	if err := yaml.Unmarshal(root, &k); err != nil {
		return nil, false
	}
	for field, value := range k {
		switch field {
		case "apiVersion":
			if value != types.KustomizationVersion {
				return nil, false
			}
		case "kind":
			if value != types.KustomizationKind {
				return nil, false
			}
		case "resources":
		default:
			return nil, false
		}
	}
	list, isList := k["resources"].([]any)
	if !isList || len(list) == 0 {
		return nil, false
	}
	for _, entry := range list {
		ref, isString := entry.(string)
		if !isString || ref == "" || checkPath(ref) != "" {
			return nil, false
		}
		name := path.Clean(ref)
		if !byName[name] || slices.Contains(konfig.RecognizedKustomizationFileNames(), path.Base(name)) {
			return nil, false
		}
		resources = append(resources, name)
	}
	return resources, true
}

// renderPlain builds a plain package (see plainResources) as kustomize does, in time
// linear in its objects: each listed file is split into YAML documents and decoded by
// kustomize's own resource factory, which drops empty documents, expands a List (any
// kind ending in List that has items) into its items and refuses an object without a kind
// or a name; an id (group, version, kind, namespace, name) seen before is refused, as
// kustomize refuses it; objects annotated config.kubernetes.io/local-config are dropped,
// and kustomize's build annotations removed. The objects come out in the order of the
// list, then of the documents in each file.
func renderPlain(key string, files []packageFile, resources []string) ([]*resource.Resource, error) {
	data := make(map[string][]byte, len(files))
	for _, f := range files {
		data[f.name] = f.data
	}
	type id struct {
		gvk       resid.Gvk
		name      string
		namespace string
	}
	factory := provider.NewDefaultDepProvider().GetResourceFactory()
	seen := map[id]bool{}
	var out []*resource.Resource
	for _, name := range resources {
		objects, err := factory.SliceFromBytes(data[name])
		if err != nil {
			return nil, errorf(addonsv1alpha1.ReasonRenderFailed, err, "building package %s: accumulating resources from '%s'", key, name)
		}
		for _, r := range objects {
			cur := r.CurId()
			// kustomize compares ids by their effective namespace: "" and "default"
			// are one namespace, and a cluster-scoped kind has none.
			k := id{gvk: cur.Gvk, name: cur.Name, namespace: cur.EffectiveNamespace()}
			if seen[k] {
				return nil, errorf(addonsv1alpha1.ReasonRenderFailed, nil,
					"building package %s: merging resources from '%s': may not add resource with an already registered id: %s",
					key, name, cur)
			}
			seen[k] = true
			out = append(out, r)
		}
	}
	kept := out[:0]
	for _, r := range out {
		if v, local := r.GetAnnotations()[konfig.IgnoredByKustomizeAnnotation]; local && v != "false" {
			continue
		}
		r.RemoveBuildAnnotations()
		if err := r.SetOrigin(nil); err != nil {
			return nil, errorf(addonsv1alpha1.ReasonRenderFailed, err, "building package %s", key)
		}
		if err := r.ClearTransformations(); err != nil {
			return nil, errorf(addonsv1alpha1.ReasonRenderFailed, err, "building package %s", key)
		}
		kept = append(kept, r)
	}
	return kept, nil
}

// encodeResources writes objects as one YAML stream, each document in the form kustomize
// writes it (keys sorted, no comments), separated by "---" lines as in kustomize's
// ResMap.AsYaml.
func encodeResources(objects []*resource.Resource) ([]byte, error) {
	var buf bytes.Buffer
	for i, r := range objects {
		out, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(out)
	}
	return buf.Bytes(), nil
}
