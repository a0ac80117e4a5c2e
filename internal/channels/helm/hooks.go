package helm

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Helm hooks become apply waves (addonsv1alpha1.AnnotationWave and AnnotationWaveAfter,
// see channels/README.md "Apply waves"), so that what Helm runs before or after the
// release's objects is applied, and healthy, before or after them:
//
//   - pre-install and pre-upgrade hooks go to the wave PreHookWave, which the chart's
//     other objects wait for: a Job there must complete (kstatus counts a Job Current once
//     it is complete) before the rest is applied. Its ServiceAccount, ConfigMap, Secret or
//     RBAC helpers, hooks themselves with a lower helm.sh/hook-weight, come first: each
//     distinct weight is a wave of its own (PreHookWave-1, PreHookWave-2, ... in weight
//     order, each after the one before) when there is more than one.
//   - post-install and post-upgrade hooks go to the wave PostHookWave (numbered the same
//     way), after every wave of the chart's other objects.
//   - test, pre-delete, post-delete, pre-rollback and post-rollback hooks, a hook Helm
//     does not know, and a hook that is both before and after the release are refused
//     (ReasonHookNotSupported, naming the object and the hook): kaddons has no moment to
//     run them at.
//
// A hook object is an object of the package like any other: applied at every reconcile
// (a no-op once it exists), in the inventory, pruned with the add-on.
// helm.sh/hook-delete-policy is dropped: kaddons does not delete a hook after it ran, nor
// before it runs again. Every annotation of Helm (helm.sh/..., meta.helm.sh/...; the
// hook's, helm.sh/resource-policy) is removed from the output.
const (
	// PreHookWave is the wave of the pre-install and pre-upgrade hooks.
	PreHookWave = "helm-pre"
	// PostHookWave is the wave of the post-install and post-upgrade hooks.
	PostHookWave = "helm-post"
)

// hookPhase is when kaddons applies a hook: before the chart's other objects, or after.
type hookPhase int

const (
	before hookPhase = iota + 1
	after
)

// hookPhases are the hook events kaddons maps, and to which phase.
var hookPhases = map[release.HookEvent]hookPhase{
	release.HookPreInstall: before, release.HookPreUpgrade: before,
	release.HookPostInstall: after, release.HookPostUpgrade: after,
}

// hookObject is a hook's object and what places it.
type hookObject struct {
	u      *unstructured.Unstructured
	phase  hookPhase
	weight int
}

// assemble turns the rendered templates of chrt into the Result: it counts the objects
// against MaxObjects first, from the text, then refuses the hooks it cannot map, decodes
// the CRDs and the objects in Helm's order, maps the hooks to waves and removes Helm's
// annotations.
func assemble(chrt *chart.Chart, files map[string]string, key string) (*Result, error) {
	crdFiles := chrt.CRDObjects()
	documents := documentsOf(files)
	for _, crd := range crdFiles {
		documents += len(releaseutil.SplitManifests(string(crd.File.Data)))
	}
	if documents > MaxObjects {
		return nil, tooLarge(key, "renders %d YAML documents, more than %d (the cap on a chart's objects: the most objects an add-on's inventory holds)",
			documents, MaxObjects)
	}

	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%v", err)
	}
	// SortManifests leaves out, silently, a hook of an event it does not know.
	if len(hooks)+len(manifests) < documentsOf(files) {
		if err := unknownHook(files, key); err != nil {
			return nil, err
		}
	}

	res := &Result{}
	if res.CRDs, err = decodeCRDs(crdFiles, key); err != nil {
		return nil, err
	}
	for _, m := range manifests {
		objects, err := decodeStream(m.Content, m.Name, key)
		if err != nil {
			return nil, err
		}
		for _, u := range objects {
			stripHelm(u)
			res.Objects = append(res.Objects, u)
		}
	}
	mapped, err := decodeHooks(hooks, key)
	if err != nil {
		return nil, err
	}
	placeHooks(res.Objects, mapped)
	for _, h := range mapped {
		res.Objects = append(res.Objects, h.u)
	}
	// The items of a List count one each.
	if n := len(res.CRDs) + len(res.Objects); n > MaxObjects {
		return nil, tooLarge(key, "renders %d objects, more than %d (the cap on a chart's objects: the most objects an add-on's inventory holds)",
			n, MaxObjects)
	}

	if err := checkDuplicates(slices.Concat(res.CRDs, res.Objects), key); err != nil {
		return nil, err
	}
	if res.Manifest, err = encode(slices.Concat(res.CRDs, res.Objects)); err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, key, "encoding the objects")
	}
	return res, nil
}

// decodeCRDs decodes the files of the crds/ folders, which may hold only
// CustomResourceDefinitions.
func decodeCRDs(crdFiles []chart.CRD, key string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	crdKind := schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	for _, crd := range crdFiles {
		objects, err := decodeStream(string(crd.File.Data), crd.Filename, key)
		if err != nil {
			return nil, err
		}
		for _, u := range objects {
			if u.GroupVersionKind().GroupKind() != crdKind {
				return nil, fail(addonsv1alpha1.ReasonChartRefused, nil, key,
					"%s holds %s %q; crds/ may hold only CustomResourceDefinitions", crd.Filename, u.GetKind(), u.GetName())
			}
			stripHelm(u)
			out = append(out, u)
		}
	}
	return out, nil
}

// decodeHooks decodes the hooks, in Helm's order, and says when each is applied; it
// refuses a hook it cannot map.
func decodeHooks(hooks []*release.Hook, key string) ([]hookObject, error) {
	var out []hookObject
	for _, h := range hooks {
		phase, err := phaseOf(h, key)
		if err != nil {
			return nil, err
		}
		objects, err := decodeStream(h.Manifest, h.Path, key)
		if err != nil {
			return nil, err
		}
		for _, u := range objects {
			stripHelm(u)
			out = append(out, hookObject{u: u, phase: phase, weight: h.Weight})
		}
	}
	return out, nil
}

// partial reports whether a template file is a partial (_helpers.tpl), which renders
// nothing of its own.
func partial(name string) bool {
	return strings.HasPrefix(name[strings.LastIndex(name, "/")+1:], "_")
}

// documentsOf counts the documents SortManifests reads in files.
func documentsOf(files map[string]string) int {
	n := 0
	for name, content := range files {
		if !partial(name) && strings.TrimSpace(content) != "" {
			n += len(releaseutil.SplitManifests(content))
		}
	}
	return n
}

// unknownHook finds the hook SortManifests left out because Helm does not know its
// event, and refuses it.
func unknownHook(files map[string]string, key string) error {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if partial(name) {
			continue
		}
		docs := releaseutil.SplitManifests(files[name])
		names := slices.Collect(maps.Keys(docs))
		sort.Sort(releaseutil.BySplitManifestsOrder(names))
		for _, d := range names {
			var head releaseutil.SimpleHead
			if err := yaml.Unmarshal([]byte(docs[d]), &head); err != nil || head.Metadata == nil {
				continue
			}
			value, ok := head.Metadata.Annotations[release.HookAnnotation]
			if !ok {
				continue
			}
			for event := range strings.SplitSeq(value, ",") {
				event = strings.ToLower(strings.TrimSpace(event))
				if _, known := hookPhases[release.HookEvent(event)]; !known {
					return fail(addonsv1alpha1.ReasonHookNotSupported, nil, key,
						"%s: %s %q has the hook %q, which Helm does not know and kaddons cannot map to an apply wave",
						name, head.Kind, head.Metadata.Name, event)
				}
			}
		}
	}
	return nil
}

// phaseOf returns when kaddons applies hook h, or refuses it.
func phaseOf(h *release.Hook, key string) (hookPhase, error) {
	var phase hookPhase
	for _, e := range h.Events {
		p, ok := hookPhases[e]
		if !ok {
			return 0, fail(addonsv1alpha1.ReasonHookNotSupported, nil, key,
				"%s: %s %q is a %s hook; kaddons maps only pre-install, pre-upgrade, post-install and post-upgrade hooks "+
					"to apply waves, and has no moment to run a %s hook at", h.Path, h.Kind, h.Name, e, e)
		}
		if phase != 0 && p != phase {
			return 0, fail(addonsv1alpha1.ReasonHookNotSupported, nil, key,
				"%s: %s %q is a hook both before and after the release (%s); kaddons applies an object once", h.Path, h.Kind, h.Name,
				joinEvents(h.Events))
		}
		phase = p
	}
	if phase == 0 {
		return 0, fail(addonsv1alpha1.ReasonHookNotSupported, nil, key, "%s: %s %q is a hook of no event", h.Path, h.Kind, h.Name)
	}
	return phase, nil
}

// joinEvents lists hook events.
func joinEvents(events []release.HookEvent) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = string(e)
	}
	return strings.Join(s, ",")
}

// placeHooks annotates the hooks with their waves, and the other objects with the wait
// for the last pre-hook wave.
func placeHooks(objects []*unstructured.Unstructured, hooks []hookObject) {
	pre := waveNames(hooks, before, PreHookWave)
	post := waveNames(hooks, after, PostHookWave)

	// The waves of the chart's other objects, which the post hooks wait for.
	var mainWaves []string
	for _, u := range objects {
		w := cmp.Or(strings.TrimSpace(u.GetAnnotations()[addonsv1alpha1.AnnotationWave]), "default")
		if !slices.Contains(mainWaves, w) {
			mainWaves = append(mainWaves, w)
		}
		if len(pre) > 0 {
			addWaveAfter(u, pre[len(pre)-1].name)
		}
	}
	slices.Sort(mainWaves)

	for _, h := range hooks {
		waves := pre
		if h.phase == after {
			waves = post
		}
		i := slices.IndexFunc(waves, func(w wave) bool { return w.weight == h.weight })
		var waitFor []string
		switch {
		case i > 0:
			waitFor = []string{waves[i-1].name}
		case h.phase == after && len(mainWaves) > 0:
			waitFor = mainWaves
		case h.phase == after && len(pre) > 0:
			waitFor = []string{pre[len(pre)-1].name}
		}
		annotations := h.u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[addonsv1alpha1.AnnotationWave] = waves[i].name
		// As Helm's before-hook-creation: a hook Job whose template changes with a new
		// version is deleted and created again, never refused as an immutable change.
		annotations[addonsv1alpha1.AnnotationRecreate] = addonsv1alpha1.RecreateOnImmutable
		delete(annotations, addonsv1alpha1.AnnotationWaveAfter)
		if len(waitFor) > 0 {
			annotations[addonsv1alpha1.AnnotationWaveAfter] = strings.Join(waitFor, ",")
		}
		h.u.SetAnnotations(annotations)
	}
}

// wave is one hook wave: its name and the hook weight it holds.
type wave struct {
	name   string
	weight int
}

// waveNames returns the waves of the hooks of phase, in weight order: one wave named
// base when they share one weight, base-1, base-2, ... otherwise.
func waveNames(hooks []hookObject, phase hookPhase, base string) []wave {
	var weights []int
	for _, h := range hooks {
		if h.phase == phase && !slices.Contains(weights, h.weight) {
			weights = append(weights, h.weight)
		}
	}
	slices.Sort(weights)
	waves := make([]wave, len(weights))
	for i, w := range weights {
		waves[i] = wave{name: base, weight: w}
		if len(weights) > 1 {
			waves[i].name = fmt.Sprintf("%s-%d", base, i+1)
		}
	}
	return waves
}

// addWaveAfter adds wave to the waves u's wave waits for.
func addWaveAfter(u *unstructured.Unstructured, wave string) {
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	var waits []string
	for w := range strings.SplitSeq(annotations[addonsv1alpha1.AnnotationWaveAfter], ",") {
		if w = strings.TrimSpace(w); w != "" && w != wave {
			waits = append(waits, w)
		}
	}
	annotations[addonsv1alpha1.AnnotationWaveAfter] = strings.Join(append(waits, wave), ",")
	u.SetAnnotations(annotations)
}

// helmAnnotation reports whether an annotation is Helm's own: the hooks', the resource
// policy's, a release's.
func helmAnnotation(key string) bool {
	return strings.HasPrefix(key, "helm.sh/") || strings.HasPrefix(key, "meta.helm.sh/")
}

// stripHelm removes Helm's annotations from u, and its annotations when none is left.
func stripHelm(u *unstructured.Unstructured) {
	annotations := u.GetAnnotations()
	if annotations == nil {
		return
	}
	maps.DeleteFunc(annotations, func(k, _ string) bool { return helmAnnotation(k) })
	if len(annotations) == 0 {
		annotations = nil
	}
	u.SetAnnotations(annotations)
}

// decodeStream decodes the YAML documents of one rendered file (or crds/ file) into
// objects, in order, the items of a List one each; a document that holds only comments
// is none. Every object needs an apiVersion, a kind and a metadata.name: kaddons applies
// by name (no generateName).
func decodeStream(content, source, key string) ([]*unstructured.Unstructured, error) {
	docs := releaseutil.SplitManifests(content)
	names := slices.Collect(maps.Keys(docs))
	sort.Sort(releaseutil.BySplitManifestsOrder(names))
	var out []*unstructured.Unstructured
	for i, d := range names {
		data, err := yaml.YAMLToJSON([]byte(docs[d]))
		if err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%s: document %d is not YAML: %v", source, i+1, err)
		}
		if s := strings.TrimSpace(string(data)); s == "null" || s == "" {
			continue
		}
		if data[0] != '{' {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%s: document %d is not a Kubernetes object", source, i+1)
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
		if err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%s: document %d is not a Kubernetes object: %s",
				source, i+1, shorten(err.Error()))
		}
		var objects []*unstructured.Unstructured
		switch obj := obj.(type) {
		case *unstructured.Unstructured:
			objects = append(objects, obj)
		case *unstructured.UnstructuredList:
			for j := range obj.Items {
				objects = append(objects, &obj.Items[j])
			}
		}
		for _, u := range objects {
			for _, f := range []struct{ name, value string }{
				{"apiVersion", u.GetAPIVersion()}, {"kind", u.GetKind()}, {"metadata.name", u.GetName()},
			} {
				if f.value == "" {
					return nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%s: %s %q has no %s", source, u.GetKind(), u.GetName(), f.name)
				}
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// shorten keeps an error message of a decoder, which may quote the whole object, short.
func shorten(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

// checkDuplicates refuses a chart that renders one object twice (the same group, kind,
// namespace and name).
func checkDuplicates(objects []*unstructured.Unstructured, key string) error {
	seen := make(map[string]bool, len(objects))
	for _, u := range objects {
		id := fmt.Sprintf("%s %s", u.GroupVersionKind().GroupKind(), u.GetName())
		if ns := u.GetNamespace(); ns != "" {
			id = fmt.Sprintf("%s %s/%s", u.GroupVersionKind().GroupKind(), ns, u.GetName())
		}
		if seen[id] {
			return fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "renders %s twice", id)
		}
		seen[id] = true
	}
	return nil
}
