package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Output formats of get.
const (
	outputTable = ""
	outputWide  = "wide"
	outputYAML  = "yaml"
	outputJSON  = "json"
)

// getOptions are get's flags.
type getOptions struct {
	allNamespaces bool
	output        string
	watch         bool
}

func newGetCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get",
		Short: "List the add-ons of every kind, with their version, readiness and the reason",
		Example: `  kubectl kaddons get -A
  kubectl kaddons get -n kube-system -o wide
  kubectl kaddons get -n kube-system -o yaml
  kubectl kaddons get -A --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains([]string{outputTable, outputWide, outputYAML, outputJSON}, o.output) {
				return fmt.Errorf("--output must be wide, yaml or json, not %q", printable(o.output, keepNone))
			}
			c, err := newClusterClient(kube)
			if err != nil {
				return err
			}
			namespace := ""
			if !o.allNamespaces {
				namespace = namespaceOf(kube)
			}
			return getAddons(cmd.Context(), c, namespace, o, streams)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List the add-ons in every namespace.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide (more columns), yaml or json (a List of the add-ons). Default: a table.")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "After listing, print every change to an add-on until interrupted.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputWide, outputYAML, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// listedKind is one add-on kind as get listed it: the resource version to watch from.
type listedKind struct {
	gvk             schema.GroupVersionKind
	resourceVersion string
}

// getAddons lists the add-ons of every kind in namespace ("" for all) and prints them in
// o's format, then, with o.watch, every change until ctx ends. A kind whose CRD is not
// installed is reported on stderr and skipped.
func getAddons(ctx context.Context, c client.WithWatch, namespace string, o getOptions, streams genericiooptions.IOStreams) error {
	kinds, err := addonKinds()
	if err != nil {
		return err
	}
	var items []unstructured.Unstructured
	var listed []listedKind
	for _, gvk := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := c.List(ctx, list, client.InNamespace(namespace))
		if meta.IsNoMatchError(err) {
			_, _ = fmt.Fprintf(streams.ErrOut, "warning: %s is not installed in this cluster (no CRD)\n", gvk.Kind)
			continue
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		listed = append(listed, listedKind{gvk: gvk, resourceVersion: list.GetResourceVersion()})
		for _, item := range list.Items {
			item.SetGroupVersionKind(gvk)
			items = append(items, item)
		}
	}
	if len(listed) == 0 {
		return fmt.Errorf("no add-on kind is installed in this cluster (install the kaddons CRDs)")
	}
	order := map[string]int{}
	for i, gvk := range kinds {
		order[gvk.Kind] = i
	}
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int {
		return strings.Compare(fmt.Sprintf("%s\x00%03d\x00%s", a.GetNamespace(), order[a.GetKind()], a.GetName()),
			fmt.Sprintf("%s\x00%03d\x00%s", b.GetNamespace(), order[b.GetKind()], b.GetName()))
	})
	p := newAddonPrinter(o.output, streams.Out)
	if len(items) == 0 && p.table != nil && !o.watch {
		where := "in namespace " + namespace
		if namespace == "" {
			where = "in any namespace"
		}
		_, _ = fmt.Fprintf(streams.ErrOut, "No add-ons found %s.\n", where)
		return nil
	}
	if err := p.printList(items); err != nil {
		return err
	}
	if !o.watch {
		return nil
	}
	return watchAddons(ctx, c, namespace, listed, p)
}

// watchAddons prints every change to the add-ons of the listed kinds in namespace until
// ctx ends: one watch per kind (watchKind), restarted from the last resource version it
// saw, and from a new list when the server no longer has that version.
func watchAddons(ctx context.Context, c client.WithWatch, namespace string, listed []listedKind, p *addonPrinter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan watch.Event)
	errs := make(chan error, len(listed))
	for _, l := range listed {
		go func() { errs <- watchKind(ctx, c, namespace, l, events) }()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if err != nil {
				return err
			}
		case e := <-events:
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if err := p.printOne(u); err != nil {
				return err
			}
		}
	}
}

// watchKind sends the changes to the add-ons of one kind to events until ctx ends. A
// RetryWatcher resumes a cut watch from the last resource version it saw; when the server
// has compacted that version away (410 Gone: a laptop asleep, a long network cut), the
// kind is listed again and every add-on of the list sent as a change, so the output shows
// the current state (what changed in the gap is not known), and the watch resumes from the
// new list. Any other error ends it.
func watchKind(ctx context.Context, c client.WithWatch, namespace string, l listedKind, events chan<- watch.Event) error {
	for {
		w, err := watchtools.NewRetryWatcherWithContext(ctx, l.resourceVersion, kindWatcher{c: c, gvk: l.gvk, namespace: namespace})
		if err != nil {
			return fmt.Errorf("watching %s: %w", l.gvk.Kind, err)
		}
		gone, err := forwardEvents(ctx, w, events)
		w.Stop()
		if err != nil || !gone {
			return err
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(l.gvk.GroupVersion().WithKind(l.gvk.Kind + "List"))
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listing %s again after its watch expired: %w", l.gvk.Kind, err)
		}
		l.resourceVersion = list.GetResourceVersion()
		for i := range list.Items {
			item := &list.Items[i]
			item.SetGroupVersionKind(l.gvk)
			select {
			case events <- watch.Event{Type: watch.Modified, Object: item}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// forwardEvents sends w's changes to events until ctx ends or w does. It reports whether w
// ended because its resource version expired (410 Gone); another error event is an error.
func forwardEvents(ctx context.Context, w watch.Interface, events chan<- watch.Event) (gone bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case e, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch e.Type {
			case watch.Error:
				err := apierrors.FromObject(e.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return true, nil
				}
				return false, fmt.Errorf("watching the add-ons: %w", err)
			case watch.Added, watch.Modified, watch.Deleted:
				select {
				case events <- e:
				case <-ctx.Done():
					return false, nil
				}
			}
		}
	}
}

// kindWatcher watches the add-ons of one kind in one namespace ("" for all), for a
// RetryWatcher.
type kindWatcher struct {
	c         client.WithWatch
	gvk       schema.GroupVersionKind
	namespace string
}

// WatchWithContext starts a watch with options.
func (k kindWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
	return k.c.Watch(ctx, list, &client.ListOptions{Namespace: k.namespace, Raw: &options})
}

// addonPrinter prints add-ons in one of get's formats, with cli-runtime's printers: the
// table printer for the table and wide formats (its header once), a List for yaml and
// json, and each object on its own once watching.
type addonPrinter struct {
	output string
	out    io.Writer
	table  printers.ResourcePrinter
	// tw keeps the columns' widths from one printed row to the next.
	tw interface {
		io.Writer
		Flush() error
	}
	yaml *printers.YAMLPrinter
}

func newAddonPrinter(output string, out io.Writer) *addonPrinter {
	p := &addonPrinter{output: output, out: out}
	switch output {
	case outputTable, outputWide:
		p.table = printers.NewTablePrinter(printers.PrintOptions{Wide: output == outputWide})
		p.tw = printers.GetNewTabWriter(out)
	case outputYAML:
		p.yaml = &printers.YAMLPrinter{}
	}
	return p
}

// printList prints items: as a table, or as one List.
func (p *addonPrinter) printList(items []unstructured.Unstructured) error {
	if p.table != nil {
		return p.printTable(addonTable(items, time.Now()))
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List",
		"metadata": map[string]any{"resourceVersion": ""}}}
	list.Items = items
	return p.printObject(list)
}

// printOne prints one add-on: a row of the table, or the object.
func (p *addonPrinter) printOne(u *unstructured.Unstructured) error {
	if p.table != nil {
		return p.printTable(addonTable([]unstructured.Unstructured{*u}, time.Now()))
	}
	return p.printObject(u)
}

func (p *addonPrinter) printTable(t *metav1.Table) error {
	if err := p.table.PrintObj(t, p.tw); err != nil {
		return err
	}
	return p.tw.Flush()
}

// printObject prints obj as YAML or JSON. Its strings come from the cluster: YAML shows
// the characters printable escapes escaped as it does (printableValues), JSON as \u
// escapes (printableJSON), which read back to the same strings.
func (p *addonPrinter) printObject(obj runtime.Unstructured) error {
	if p.output == outputYAML {
		safe := &unstructured.Unstructured{Object: printableValues(runtime.DeepCopyJSON(obj.UnstructuredContent())).(map[string]any)}
		return p.yaml.PrintObj(safe, p.out)
	}
	var buf bytes.Buffer
	if err := (&printers.JSONPrinter{}).PrintObj(obj.(runtime.Object), &buf); err != nil {
		return err
	}
	_, err := p.out.Write(printableJSON(buf.Bytes()))
	return err
}

// cellType is the type of every column the plugin prints: the cells are strings.
const cellType = "string"

// namespaceColumn is the NAMESPACE column of get's and events' tables.
var namespaceColumn = metav1.TableColumnDefinition{Name: "Namespace", Type: cellType}

// addonColumns are get's columns; those of priority 1 show with -o wide only.
var addonColumns = []metav1.TableColumnDefinition{
	namespaceColumn,
	{Name: "Kind", Type: cellType},
	{Name: "Name", Type: cellType, Format: "name"},
	{Name: "Version", Type: cellType, Description: "status.appliedVersion"},
	{Name: "Channel", Type: cellType, Priority: 1, Description: "spec.channel"},
	{Name: "Available", Type: cellType, Priority: 1, Description: "status.availableVersion"},
	{Name: "Ready", Type: cellType, Description: "the Ready condition's status, for the current generation"},
	{Name: "Upgradeable", Type: cellType, Priority: 1, Description: "the Upgradeable condition's status"},
	{Name: "Suspended", Type: cellType, Priority: 1, Description: "spec.suspend"},
	{Name: "Age", Type: cellType, Priority: 1},
	{Name: "Reason", Type: cellType},
	{Name: "Message", Type: cellType},
}

// addonTable returns the table of items. Every cell comes from the cluster, so none may
// hold a control character: a tab would shift the columns, a newline forge a row, an
// escape sequence reach the terminal (printable).
func addonTable(items []unstructured.Unstructured, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: addonColumns}
	for _, item := range items {
		r := readinessOf(&item)
		channel, _, _ := unstructured.NestedString(item.Object, "spec", "channel")
		available, _, _ := unstructured.NestedString(item.Object, "status", "availableVersion")
		version, _, _ := unstructured.NestedString(item.Object, "status", "appliedVersion")
		suspended, _, _ := unstructured.NestedBool(item.Object, "spec", "suspend")
		upgradeable := "Unknown"
		if c := findCondition(&item, addonsv1alpha1.ConditionUpgradeable); c != nil {
			upgradeable = c.Status
		}
		age := noneCell
		if ts := item.GetCreationTimestamp(); !ts.IsZero() {
			age = duration.HumanDuration(now.Sub(ts.Time))
		}
		cells := []string{item.GetNamespace(), item.GetKind(), item.GetName(), orNone(version), orNone(channel), orNone(available),
			r.status, upgradeable, fmt.Sprint(suspended), age, orNone(r.reason), strings.Join(strings.Fields(r.message), " ")}
		row := metav1.TableRow{Cells: make([]any, len(cells))}
		for i, c := range cells {
			row.Cells[i] = printable(c, keepNone)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// reasonNotObserved is the REASON get shows for an add-on whose current generation the
// operator has not reconciled yet.
const reasonNotObserved = "GenerationNotObserved"

// readiness is an add-on's Ready condition as get shows it: for its current generation.
type readiness struct {
	status, reason, message string
}

// readinessOf reads the Ready condition of an add-on. One that the operator wrote for an
// older generation than metadata.generation (the condition's observedGeneration, else
// status.observedGeneration) says nothing about the spec as it is: it shows as Unknown,
// generation N not observed yet.
func readinessOf(u *unstructured.Unstructured) readiness {
	c := findCondition(u, addonsv1alpha1.ConditionReady)
	if c == nil {
		return readiness{status: string(metav1.ConditionUnknown)}
	}
	observed := c.ObservedGeneration
	if observed == 0 {
		observed, _, _ = unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	}
	if generation := u.GetGeneration(); observed > 0 && observed < generation {
		return readiness{status: string(metav1.ConditionUnknown), reason: reasonNotObserved,
			message: fmt.Sprintf("generation %d not observed yet (generation %d was Ready=%s, %s: %s)", generation, observed,
				c.Status, c.Reason, c.Message)}
	}
	return readiness{status: c.Status, reason: c.Reason, message: c.Message}
}

// condition is the part of a status condition the plugin reads.
type condition struct {
	Status, Reason, Message string
	ObservedGeneration      int64
}

// findCondition returns the status condition of type typ of u, or nil.
func findCondition(u *unstructured.Unstructured, typ string) *condition {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, item := range conditions {
		m, _ := item.(map[string]any)
		if m["type"] != typ {
			continue
		}
		c := &condition{}
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			c.ObservedGeneration = g
		case float64:
			c.ObservedGeneration = int64(g)
		}
		return c
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return noneCell
	}
	return s
}

// noneCell is what a table shows for a value that is not set.
const noneCell = "<none>"
