package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func newGetCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "get",
		Short: "List the add-ons of every kind, with their version, readiness and the reason",
		Example: `  kubectl kaddons get -A
  kubectl kaddons get -n kube-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClusterClient(kube)
			if err != nil {
				return err
			}
			namespace := ""
			if !allNamespaces {
				namespace = namespaceOf(kube)
			}
			return getAddons(cmd.Context(), c, namespace, streams)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the add-ons in every namespace.")
	return cmd
}

// addonRow is one line of get's table.
type addonRow struct {
	namespace, kind, name, version, ready, reason, message string
	order                                                  int
}

// getAddons lists the add-ons of every kind in namespace ("" for all) and prints them as
// a table. A kind whose CRD is not installed is reported on stderr and skipped.
func getAddons(ctx context.Context, c client.Client, namespace string, streams genericiooptions.IOStreams) error {
	kinds, err := addonKinds()
	if err != nil {
		return err
	}
	var rows []addonRow
	installed := 0
	for order, def := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(def.GroupVersion().WithKind(def.Kind + "List"))
		err := c.List(ctx, list, client.InNamespace(namespace))
		if meta.IsNoMatchError(err) {
			_, _ = fmt.Fprintf(streams.ErrOut, "warning: %s is not installed in this cluster (no CRD)\n", def.Kind)
			continue
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", def.Kind, err)
		}
		installed++
		for _, item := range list.Items {
			rows = append(rows, rowOf(item, def.Kind, order))
		}
	}
	if installed == 0 {
		return fmt.Errorf("no add-on kind is installed in this cluster (install the kaddons CRDs)")
	}
	if len(rows) == 0 {
		where := "in namespace " + namespace
		if namespace == "" {
			where = "in any namespace"
		}
		_, _ = fmt.Fprintf(streams.ErrOut, "No add-ons found %s.\n", where)
		return nil
	}
	slices.SortFunc(rows, func(a, b addonRow) int {
		return strings.Compare(fmt.Sprintf("%s\x00%03d\x00%s", a.namespace, a.order, a.name),
			fmt.Sprintf("%s\x00%03d\x00%s", b.namespace, b.order, b.name))
	})
	return printRows(streams.Out, rows)
}

// rowOf reads the columns of one add-on: the applied version and its Ready condition.
func rowOf(item unstructured.Unstructured, kind string, order int) addonRow {
	row := addonRow{namespace: item.GetNamespace(), kind: kind, name: item.GetName(), order: order,
		version: noneCell, ready: "Unknown"}
	if v, _, _ := unstructured.NestedString(item.Object, "status", "appliedVersion"); v != "" {
		row.version = v
	}
	conditions, _, _ := unstructured.NestedSlice(item.Object, "status", "conditions")
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if cond["type"] != addonsv1alpha1.ConditionReady {
			continue
		}
		row.ready, _ = cond["status"].(string)
		row.reason, _ = cond["reason"].(string)
		row.message, _ = cond["message"].(string)
	}
	return row
}

// printRows writes rows as get's table. Every cell comes from the cluster, so none may
// hold a control character: a tab would shift the columns, a newline forge a row, an
// escape sequence reach the terminal (printable).
func printRows(w io.Writer, rows []addonRow) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAMESPACE\tKIND\tNAME\tVERSION\tREADY\tREASON\tMESSAGE")
	for _, r := range rows {
		message := strings.Join(strings.Fields(r.message), " ")
		cells := []string{r.namespace, r.kind, r.name, r.version, r.ready, orNone(r.reason), message}
		for i, c := range cells {
			cells[i] = printable(c, keepNone)
		}
		_, _ = fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return noneCell
	}
	return s
}

// noneCell is what a table shows for a value that is not set.
const noneCell = "<none>"
