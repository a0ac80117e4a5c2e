package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/Masterminds/semver/v3"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/sources"
)

func newCheckCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		kubernetesVersion string
		allNamespaces     bool
		f                 renderFlags
	)
	cmd := &cobra.Command{
		Use:   "check --kubernetes-version VERSION",
		Short: "List the add-ons that would block an upgrade of the cluster to a Kubernetes version, and what to change",
		Long: "check compares the version every add-on runs (status.appliedVersion) with the Kubernetes versions its\n" +
			"package supports (the package's metadata.yaml), and names the version to move to when it does not support\n" +
			"VERSION. It exits 0 when no add-on blocks the upgrade, 1 when one does or cannot be checked.",
		Example: `  kubectl kaddons check --kubernetes-version 1.38 -A`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := semver.NewVersion(kubernetesVersion)
			if kubernetesVersion == "" || err != nil {
				return fmt.Errorf("--kubernetes-version %q is not a Kubernetes version such as 1.38 or v1.38.0", kubernetesVersion)
			}
			src, err := f.source()
			if err != nil {
				return err
			}
			c, err := newClusterClient(kube)
			if err != nil {
				return err
			}
			namespace := ""
			if !allNamespaces {
				namespace = namespaceOf(kube)
			}
			rows, err := checkAddons(cmd.Context(), c, src, namespace, "v"+target.String())
			if err != nil {
				return err
			}
			return printChecks(streams.Out, rows, minorVersion(target))
		},
	}
	cmd.Flags().StringVar(&kubernetesVersion, "kubernetes-version", "", "The Kubernetes version the cluster would be upgraded to, such as 1.38.")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Check the add-ons in every namespace.")
	cmd.Flags().StringVar(&f.channelsDir, "channels", "",
		"A channels directory whose packages the operator uses, instead of the channels built into the plugin.")
	return cmd
}

// checkRow is one add-on's line of check's table.
type checkRow struct {
	namespace, kind, name, version, supports, result, action string
	blocks                                                   bool
}

// Results of check.
const (
	checkOK         = "OK"
	checkBlocks     = "BLOCKS"
	checkUnknown    = "UNKNOWN"
	checkNotApplied = "NOT-APPLIED"
)

// checkAddons checks every add-on of namespace ("" for all) against the Kubernetes
// version target.
func checkAddons(ctx context.Context, c client.Client, src *channels.Catalog, namespace, target string) ([]checkRow, error) {
	defs, err := definitions()
	if err != nil {
		return nil, err
	}
	kinds, err := addonKinds()
	if err != nil {
		return nil, err
	}
	var rows []checkRow
	for _, gvk := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := c.List(ctx, list, client.InNamespace(namespace))
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for _, item := range list.Items {
			addon := defs[gvk].Prototype.DeepCopyObject().(addonsv1alpha1.Addon)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, addon); err != nil {
				return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, item.GetNamespace(), item.GetName(), err)
			}
			rows = append(rows, checkAddon(src, gvk.Kind, addon, target))
		}
	}
	slices.SortStableFunc(rows, func(a, b checkRow) int {
		return strings.Compare(a.namespace+"/"+a.kind+"/"+a.name, b.namespace+"/"+b.kind+"/"+b.name)
	})
	return rows, nil
}

// checkAddon checks the version addon runs against target.
func checkAddon(src *channels.Catalog, kind string, addon addonsv1alpha1.Addon, target string) checkRow {
	status := addon.GetAddonStatus()
	row := checkRow{namespace: addon.GetNamespace(), kind: kind, name: addon.GetName(), version: status.AppliedVersion, supports: "-"}
	switch {
	case status.AppliedVersion == "":
		row.version, row.result = noneCell, checkNotApplied
		row.action = "nothing is applied yet"
		return row
	case addon.GetAddonSpec().SourceRef != "":
		row.result, row.blocks = checkUnknown, true
		row.action = fmt.Sprintf("its packages come from AddonSource %s: check them with `kubectl kaddons bundle verify --kubernetes-version`, "+
			"or read its Upgradeable condition", addon.GetAddonSpec().SourceRef)
		return row
	}
	component := addon.ComponentName()
	pkg, err := sources.ReadPackageMetadata(src.FS(), component, status.AppliedVersion)
	if err == nil && !slices.Contains(src.Versions(component), status.AppliedVersion) {
		err = errors.New("the plugin's channels have no such package (pass the operator's with --channels)")
	}
	if err != nil {
		row.result, row.blocks, row.action = checkUnknown, true, err.Error()
		return row
	}
	check, err := engine.CheckKubernetesVersion(src, component, status.AppliedVersion, pkg, target)
	if err != nil {
		row.result, row.blocks, row.action = checkUnknown, true, err.Error()
		return row
	}
	if check.Range != "" {
		row.supports = check.Range
	}
	if check.Supported {
		row.result = checkOK
		return row
	}
	row.result, row.blocks = checkBlocks, true
	row.action = "no version of the add-on supports it yet"
	if check.Suggested != "" {
		row.action = "move to " + check.Suggested + " (spec.version, or a channel that lists it) before the upgrade"
	}
	return row
}

// printChecks writes rows as a table, and returns an exit error when one blocks.
func printChecks(w io.Writer, rows []checkRow, target string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAMESPACE\tKIND\tNAME\tVERSION\tSUPPORTS\tKUBERNETES "+target+"\tACTION")
	blocking := 0
	for _, r := range rows {
		cells := []string{r.namespace, r.kind, r.name, r.version, r.supports, r.result, r.action}
		for i, c := range cells {
			cells[i] = printable(c, keepNone)
		}
		_, _ = fmt.Fprintln(tw, strings.Join(cells, "\t"))
		if r.blocks {
			blocking++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		_, _ = fmt.Fprintln(w, "no add-ons found")
	}
	if blocking > 0 {
		return withCode(1, fmt.Errorf("%d add-on(s) would block an upgrade to Kubernetes %s, or could not be checked", blocking, target))
	}
	return nil
}

// minorVersion shortens a version to major.minor.
func minorVersion(v *semver.Version) string {
	return fmt.Sprintf("%d.%d", v.Major(), v.Minor())
}
