package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Exit codes of diff, as kubectl diff's.
const (
	diffNone      = 0
	diffFound     = 1
	diffFailedRun = 2
)

// clusterReaders are the cluster reads a render may fall back on: cache reads only what
// kaddons manages (as the operator's cache), api reads everything.
type clusterReaders struct {
	cache, api client.Reader
}

func newDiffCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		f     renderFlags
		color string
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Diff the objects the operator would apply with the cluster, by server-side dry-run",
		Long: "diff renders the add-on resources as render does, server-side applies every object with dry-run\n" +
			"(field manager kaddons, forced) and prints a unified diff between the live object and the result,\n" +
			"coloured on a terminal (--color). With KUBECTL_EXTERNAL_DIFF set, it writes the live and the merged\n" +
			"objects into two directories and runs that program on them instead, as kubectl diff does.\n" +
			"Exit status: 0 no differences, 1 differences, >1 an error.",
		Example: `  kubectl kaddons diff -f coredns.yaml
  kubectl kaddons diff -f clusters/prod/addons/ --context prod
  KUBECTL_EXTERNAL_DIFF="colordiff -N -u" kubectl kaddons diff -f coredns.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			colored, err := useColor(color, streams.Out)
			if err != nil {
				return withCode(diffFailedRun, err)
			}
			diffs, err := runDiff(cmd.Context(), kube, f, streams)
			if err != nil {
				return withCode(diffFailedRun, err)
			}
			if program := os.Getenv("KUBECTL_EXTERNAL_DIFF"); program != "" {
				return externalDiff(cmd.Context(), program, diffs, streams)
			}
			differs, err := writeDiffs(streams.Out, diffs, colored)
			switch {
			case err != nil:
				return withCode(diffFailedRun, err)
			case differs:
				return withCode(diffFound, nil)
			}
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&color, "color", colorAuto, "Colour the diff: auto (when stdout is a terminal and NO_COLOR is not set), always or never.")
	_ = cmd.RegisterFlagCompletionFunc("color", cobra.FixedCompletions([]string{colorAuto, colorAlways, colorNever}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// newClusterClient returns a client for the cluster the kubeconfig flags select.
func newClusterClient(kube *genericclioptions.ConfigFlags) (client.WithWatch, error) {
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, _, err := newWatchClient(cfg)
	return c, err
}

func runDiff(ctx context.Context, kube *genericclioptions.ConfigFlags, f renderFlags, streams genericiooptions.IOStreams) ([]objectDiff, error) {
	inputs, err := readInputs(f.files, streams.In, namespaceOf(kube))
	if err != nil {
		return nil, err
	}
	src, err := f.source()
	if err != nil {
		return nil, err
	}
	c, err := newClusterClient(kube)
	if err != nil {
		return nil, err
	}
	return diffAddons(ctx, c, inputs, src, f.settings())
}

// liveAddon reads the add-on in from the cluster; nil when it does not exist yet.
func liveAddon(ctx context.Context, c client.Reader, in inputAddon) (addonsv1alpha1.Addon, error) {
	live := in.def.Prototype.DeepCopyObject().(addonsv1alpha1.Addon)
	err := c.Get(ctx, client.ObjectKeyFromObject(in.addon), live)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", in, err)
	}
	return live, nil
}

// diffAddons renders inputs with the cluster's state (what the operator's render reads:
// the add-ons' status, adopted files, followed add-ons), dry-runs every object and
// returns each object on both sides, the live objects' content made printable: those the
// operator would apply, then those it would prune.
func diffAddons(ctx context.Context, c client.Client, inputs []inputAddon, src *channels.Catalog, settings engine.Settings) ([]objectDiff, error) {
	lives := map[string]addonsv1alpha1.Addon{}
	for _, in := range inputs {
		live, err := liveAddon(ctx, c, in)
		if err != nil {
			return nil, err
		}
		if live != nil {
			// The status carries what a reconcile reads beyond the spec: the adopted
			// objects and the applied version.
			status := live.GetAddonStatus().DeepCopy()
			status.Upgrade = nil
			*in.addon.GetAddonStatus() = *status
			in.addon.SetUID(live.GetUID())
			lives[in.String()] = live
		}
	}
	rendered, err := renderAll(ctx, inputs, src, settings, &clusterReaders{cache: managedReader{Reader: c}, api: c})
	if err != nil {
		return nil, err
	}
	var diffs []objectDiff
	for _, ra := range rendered {
		live := lives[ra.String()]
		for _, u := range ra.objects {
			d, err := diffObject(ctx, c, ra, live, u)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ra, err)
			}
			if d != nil {
				diffs = append(diffs, *d)
			}
		}
		if live == nil {
			continue
		}
		pruned, err := diffPruned(ctx, c, ra, live)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ra, err)
		}
		diffs = append(diffs, pruned...)
	}
	return diffs, nil
}

// diffObject dry-runs the apply of u as the operator would apply it (with the add-on as
// owner, leaving out the fields it sets only on creation) and returns the live object
// and the result; nil when the operator would leave the object alone (its
// addons.kaddons.dev/mode annotation).
func diffObject(ctx context.Context, c client.Client, ra renderedAddon, liveOwner addonsv1alpha1.Addon,
	u *unstructured.Unstructured) (*objectDiff, error) {
	desired := u.DeepCopy()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(desired.GroupVersionKind())
	err := c.Get(ctx, types.NamespacedName{Namespace: desired.GetNamespace(), Name: desired.GetName()}, live)
	exists := err == nil
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		live = nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", describe(desired), err)
	}
	if exists {
		switch live.GetAnnotations()[addonsv1alpha1.AnnotationMode] {
		case addonsv1alpha1.ModeIgnore, addonsv1alpha1.ModeEnsureExists:
			return nil, nil
		}
		if err := removeExcluded(ra, desired); err != nil {
			return nil, err
		}
		keepSeal(desired, live)
	}
	if liveOwner != nil && desired.GetNamespace() != "" && desired.GetNamespace() == liveOwner.GetNamespace() {
		desired.SetOwnerReferences(ownerReferences(ra, liveOwner))
	}
	merged := desired.DeepCopy()
	err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(merged), client.FieldOwner(ssa.FieldManager),
		client.ForceOwnership, client.DryRunAll)
	switch {
	case err == nil:
	case !exists && (apierrors.IsNotFound(err) || meta.IsNoMatchError(err)):
		// Its namespace or its CRD comes with the same apply, so the API server cannot
		// dry-run it yet: it shows as rendered.
		merged = desired
	default:
		return nil, fmt.Errorf("dry-run applying %s: %w", describe(desired), err)
	}
	return newObjectDiff(desired, live, merged)
}

// diffPruned returns the objects the operator would prune, on the live side only: those
// in the live add-on's inventory (and pending write-ahead record) that it no longer
// renders and that still carry its labels.
func diffPruned(ctx context.Context, c client.Client, ra renderedAddon, live addonsv1alpha1.Addon) ([]objectDiff, error) {
	rendered := map[string]bool{}
	for _, u := range ra.objects {
		rendered[describe(u)] = true
	}
	var out []objectDiff
	for _, ref := range engine.InventoryObjects(ctx, live) {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(strings.TrimPrefix(ref.Group+"/"+ref.Version, "/"))
		obj.SetKind(ref.Kind)
		if rendered[describe(withName(obj, ref.Namespace, ref.Name))] {
			continue
		}
		err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, obj)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		labels := obj.GetLabels()
		if labels[ssa.LabelManagedBy] != ssa.ManagedByValue || labels[ssa.LabelKind] != strings.ToLower(ra.gvk.Kind) ||
			labels[ssa.LabelName] != live.GetName() || labels[ssa.LabelNamespace] != live.GetNamespace() {
			continue
		}
		d, err := newObjectDiff(obj, obj, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, nil
}

func withName(u *unstructured.Unstructured, namespace, name string) *unstructured.Unstructured {
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// ownerReferences is the owner reference the operator sets on the children in the
// add-on's own namespace.
func ownerReferences(ra renderedAddon, owner addonsv1alpha1.Addon) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: ra.gvk.GroupVersion().String(), Kind: ra.gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
	}}
}

func ptrTo[T any](v T) *T { return &v }

// removeExcluded leaves out of u the fields the operator sets only on creation: the
// definition's and spec.driftExclusions' paths for u.
func removeExcluded(ra renderedAddon, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	ref := addonsv1alpha1.ObjectReference{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
		Namespace: u.GetNamespace(), Name: u.GetName()}
	exclusions := slices.Concat(ra.addon.GetAddonSpec().DriftExclusions, ra.def.DriftExclusions)
	for _, ex := range exclusions {
		if !ex.Target.Matches(ref) {
			continue
		}
		for _, p := range ex.Paths {
			path, err := parsePointer(p)
			if err != nil {
				return fmt.Errorf("spec.driftExclusions: %w", err)
			}
			unstructured.RemoveNestedField(u.Object, path...)
		}
	}
	return nil
}

// keepSeal copies the live object's seal onto desired. The operator seals every object it
// applies with a key only it reads; the seal depends on the object's kind, namespace, name
// and owning add-on, none of which a diff changes, so the operator's apply keeps it as it is.
func keepSeal(desired, live *unstructured.Unstructured) {
	seal, ok := live.GetAnnotations()[ssa.AnnotationSeal]
	if !ok {
		return
	}
	ann := desired.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[ssa.AnnotationSeal] = seal
	desired.SetAnnotations(ann)
}

// parsePointer splits an RFC 6901 JSON pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") || len(p) < 2 {
		return nil, fmt.Errorf("%q is not a JSON pointer to a field", p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return tokens, nil
}

// describe names an object as kubectl diff names its files: group.version.Kind.namespace.name.
func describe(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	parts := []string{}
	if gvk.Group != "" {
		parts = append(parts, gvk.Group)
	}
	parts = append(parts, gvk.Version, gvk.Kind)
	if u.GetNamespace() != "" {
		parts = append(parts, u.GetNamespace())
	}
	return strings.Join(append(parts, u.GetName()), ".")
}

// objectDiff is one object on both sides of a diff: its name as kubectl diff names its
// files, and its YAML live and merged ("" for the side where it does not exist), without
// the fields the server owns, with Secret values masked and control characters escaped.
type objectDiff struct {
	name, live, merged string
}

// newObjectDiff returns the objectDiff of live and merged (either nil for an object that
// does not exist on that side), named after named.
func newObjectDiff(named, live, merged *unstructured.Unstructured) (*objectDiff, error) {
	a, b := clean(live), clean(merged)
	if named.GetKind() == "Secret" && named.GroupVersionKind().Group == "" {
		maskSecret(a, b)
	}
	before, err := toYAML(a)
	if err != nil {
		return nil, err
	}
	after, err := toYAML(b)
	if err != nil {
		return nil, err
	}
	return &objectDiff{name: printable(describe(named), keepNone), live: before, merged: after}, nil
}

// unified returns the unified diff between the live and the merged object; "" when they
// are the same.
func (d objectDiff) unified() (string, error) {
	if d.live == d.merged {
		return "", nil
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(d.live), B: difflib.SplitLines(d.merged),
		FromFile: "live/" + d.name, ToFile: "merged/" + d.name, Context: 3,
	})
}

// toYAML writes content as YAML, its strings made printable (printableValues): they
// come from the cluster.
func toYAML(content map[string]any) (string, error) {
	if content == nil {
		return "", nil
	}
	data, err := yaml.Marshal(printableValues(content))
	return string(data), err
}

// clean returns a copy of u without status and the metadata the API server owns, as
// kubectl diff shows objects.
func clean(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "status")
	for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	if ann := c.GetAnnotations(); ann != nil {
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		if len(ann) == 0 {
			unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
		} else {
			c.SetAnnotations(ann)
		}
	}
	return c.Object
}

// masked stands for a Secret value in diffs.
const masked = "***"

// maskSecret replaces the values of a Secret's data and stringData, as kubectl diff
// does: *** where both sides agree, *** (before) and *** (after) where they differ.
func maskSecret(live, merged map[string]any) {
	for _, field := range []string{"data", "stringData"} {
		a, _, _ := unstructured.NestedMap(live, field)
		b, _, _ := unstructured.NestedMap(merged, field)
		for k, va := range a {
			vb, ok := b[k]
			switch {
			case !ok:
				a[k] = masked
			case fmt.Sprint(va) == fmt.Sprint(vb):
				a[k], b[k] = masked, masked
			default:
				a[k], b[k] = masked+" (before)", masked+" (after)"
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				b[k] = masked
			}
		}
		if live != nil && a != nil {
			_ = unstructured.SetNestedMap(live, a, field)
		}
		if merged != nil && b != nil {
			_ = unstructured.SetNestedMap(merged, b, field)
		}
	}
}
