package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func newEventsCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "events [KIND/NAME]",
		Short: "List the events of an add-on, or of every add-on in the namespace",
		Long: "events lists the Events whose regarding object (involvedObject) is the add-on KIND/NAME, or any add-on\n" +
			"of the namespace (-A: of every namespace) without an argument, oldest first. It reads events.k8s.io/v1,\n" +
			"or core/v1 where the cluster does not serve it.",
		Example: `  kubectl kaddons events coredns/coredns -n kube-system
  kubectl kaddons events -n kube-system
  kubectl kaddons events -A`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeAddonRefs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newCluster(kube)
			if err != nil {
				return err
			}
			q := eventQuery{namespace: c.namespace}
			if allNamespaces {
				q.namespace = ""
			}
			if len(args) == 1 {
				ref, err := c.parseRef(args[0])
				if err != nil {
					return err
				}
				q.namespace, q.name, q.kinds = ref.namespace, ref.name, []schema.GroupVersionKind{ref.gvk}
			} else if q.kinds, err = addonKinds(); err != nil {
				return err
			}
			events, err := addonEvents(cmd.Context(), c.client, q)
			if err != nil {
				return err
			}
			if len(events) == 0 {
				_, _ = fmt.Fprintln(streams.ErrOut, "No events found.")
				return nil
			}
			return printEvents(streams.Out, events, allNamespaces && len(args) == 0, time.Now())
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the events of the add-ons in every namespace.")
	return cmd
}

// eventQuery selects events: those regarding an add-on of one of kinds in namespace (""
// for all), named name when it is set.
type eventQuery struct {
	kinds           []schema.GroupVersionKind
	namespace, name string
}

// addonEvent is one event as events prints it.
type addonEvent struct {
	namespace, typ, reason, object, message string
	lastSeen                                time.Time
}

// addonEvents lists the events q selects, oldest first.
func addonEvents(ctx context.Context, c client.Client, q eventQuery) ([]addonEvent, error) {
	var out []addonEvent
	for _, gvk := range q.kinds {
		events, err := eventsRegarding(ctx, c, q.namespace, gvk, q.name)
		if err != nil {
			return nil, err
		}
		out = append(out, events...)
	}
	slices.SortStableFunc(out, func(a, b addonEvent) int { return a.lastSeen.Compare(b.lastSeen) })
	return out, nil
}

// eventsRegarding lists the events regarding the add-ons of kind gvk in namespace (named
// name, when set) with a field selector: from events.k8s.io/v1, else from core/v1.
func eventsRegarding(ctx context.Context, c client.Client, namespace string, gvk schema.GroupVersionKind, name string) ([]addonEvent, error) {
	fields := client.MatchingFields{"regarding.kind": gvk.Kind}
	if name != "" {
		fields["regarding.name"] = name
	}
	var list eventsv1.EventList
	err := c.List(ctx, &list, client.InNamespace(namespace), fields)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return coreEventsRegarding(ctx, c, namespace, gvk, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the events of %s: %w", gvk.Kind, err)
	}
	var out []addonEvent
	for _, e := range list.Items {
		if schema.FromAPIVersionAndKind(e.Regarding.APIVersion, e.Regarding.Kind).GroupKind() != gvk.GroupKind() {
			continue
		}
		seen := e.EventTime.Time
		switch {
		case e.Series != nil:
			seen = e.Series.LastObservedTime.Time
		case seen.IsZero() && !e.DeprecatedLastTimestamp.IsZero():
			seen = e.DeprecatedLastTimestamp.Time
		case seen.IsZero():
			seen = e.CreationTimestamp.Time
		}
		out = append(out, addonEvent{namespace: e.Namespace, typ: e.Type, reason: e.Reason, lastSeen: seen,
			object: e.Regarding.Kind + "/" + e.Regarding.Name, message: e.Note})
	}
	return out, nil
}

// coreEventsRegarding is eventsRegarding from core/v1.
func coreEventsRegarding(ctx context.Context, c client.Client, namespace string, gvk schema.GroupVersionKind, name string) ([]addonEvent, error) {
	fields := client.MatchingFields{"involvedObject.kind": gvk.Kind}
	if name != "" {
		fields["involvedObject.name"] = name
	}
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(namespace), fields); err != nil {
		return nil, fmt.Errorf("listing the events of %s: %w", gvk.Kind, err)
	}
	var out []addonEvent
	for _, e := range list.Items {
		if schema.FromAPIVersionAndKind(e.InvolvedObject.APIVersion, e.InvolvedObject.Kind).GroupKind() != gvk.GroupKind() {
			continue
		}
		seen := e.LastTimestamp.Time
		switch {
		case e.Series != nil:
			seen = e.Series.LastObservedTime.Time
		case seen.IsZero() && !e.EventTime.IsZero():
			seen = e.EventTime.Time
		case seen.IsZero():
			seen = e.CreationTimestamp.Time
		}
		out = append(out, addonEvent{namespace: e.Namespace, typ: e.Type, reason: e.Reason, lastSeen: seen,
			object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, message: e.Message})
	}
	return out, nil
}

// printEvents writes events as a table, with a NAMESPACE column when withNamespace. Every
// cell comes from the cluster and goes through printable.
func printEvents(w io.Writer, events []addonEvent, withNamespace bool, now time.Time) error {
	columns := []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: cellType}, {Name: "Type", Type: cellType}, {Name: "Reason", Type: cellType},
		{Name: "Object", Type: cellType}, {Name: "Message", Type: cellType},
	}
	if withNamespace {
		columns = append([]metav1.TableColumnDefinition{namespaceColumn}, columns...)
	}
	t := &metav1.Table{ColumnDefinitions: columns}
	for _, e := range events {
		lastSeen := noneCell
		if !e.lastSeen.IsZero() {
			lastSeen = duration.HumanDuration(now.Sub(e.lastSeen))
		}
		cells := []string{lastSeen, e.typ, e.reason, e.object, strings.Join(strings.Fields(e.message), " ")}
		if withNamespace {
			cells = append([]string{e.namespace}, cells...)
		}
		row := metav1.TableRow{Cells: make([]any, len(cells))}
		for i, c := range cells {
			row.Cells[i] = printable(c, keepNone)
		}
		t.Rows = append(t.Rows, row)
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(t, w)
}
