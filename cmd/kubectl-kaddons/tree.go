package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func newTreeCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "tree KIND/NAME",
		Short: "Show the objects an add-on applied (status.inventory), each with its health",
		Long: "tree lists the objects in the add-on's status.inventory, as `flux tree` does, and reads each one to\n" +
			"compute its health with kstatus: Current, InProgress, Failed, Terminating, or NotFound for an object that\n" +
			"does not exist. KIND is an add-on kind in any case, its plural or a short name.",
		Example: `  kubectl kaddons tree coredns/coredns -n kube-system
  kubectl kaddons tree metricsservers/metrics-server -n kube-system`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeAddonRefs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newCluster(kube)
			if err != nil {
				return err
			}
			ref, err := c.parseRef(args[0])
			if err != nil {
				return err
			}
			return addonTree(cmd.Context(), c, ref, streams.Out)
		},
	}
}

// treeNode is one line of the tree: an object, its health and why.
type treeNode struct {
	name, status, message string
}

// addonTree prints the add-on ref names and its inventory's objects with their health.
func addonTree(ctx context.Context, c *cluster, ref addonRef, w io.Writer) error {
	addon, err := c.get(ctx, ref)
	if err != nil {
		return err
	}
	r := readinessOf(addon)
	root := treeNode{name: ref.gvk.Kind + "/" + ref.namespace + "/" + ref.name, status: "Ready=" + r.status,
		message: strings.TrimPrefix(r.reason+": "+r.message, ": ")}
	typed, err := typedAddon(addon)
	if err != nil {
		return err
	}
	refs := typed.GetAddonStatus().Inventory.Objects()
	children := make([]treeNode, 0, len(refs))
	for _, child := range refs {
		children = append(children, objectHealth(ctx, c.client, child))
	}
	tw := printers.GetNewTabWriter(w)
	writeNode := func(prefix string, n treeNode) {
		line := prefix + printable(n.name, keepNone)
		if n.status != "" {
			line += "\t" + printable(n.status, keepNone)
		}
		if message := strings.Join(strings.Fields(n.message), " "); message != "" {
			line += "\t" + printable(message, keepNone)
		}
		_, _ = fmt.Fprintln(tw, line)
	}
	writeNode("", root)
	for i, n := range children {
		prefix := "├── "
		if i == len(children)-1 {
			prefix = "└── "
		}
		writeNode(prefix, n)
	}
	if len(children) == 0 {
		writeNode("└── ", treeNode{name: "(no objects in status.inventory)"})
	}
	return tw.Flush()
}

// Health of an object that tree could not compute with kstatus.
const (
	healthNotFound = "NotFound"
	healthUnknown  = "Unknown"
)

// objectHealth reads the object ref names and computes its kstatus.
func objectHealth(ctx context.Context, c client.Reader, ref addonsv1alpha1.ObjectReference) treeNode {
	n := treeNode{name: ref.Kind + "/" + ref.Name}
	if ref.Namespace != "" {
		n.name = ref.Kind + "/" + ref.Namespace + "/" + ref.Name
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u)
	switch {
	case apierrors.IsNotFound(err):
		n.status = healthNotFound
		return n
	case meta.IsNoMatchError(err):
		n.status, n.message = healthNotFound, "the cluster serves no "+ref.GroupVersionKind().String()
		return n
	case err != nil:
		n.status, n.message = healthUnknown, err.Error()
		return n
	}
	res, err := status.Compute(u)
	if err != nil {
		n.status, n.message = healthUnknown, err.Error()
		return n
	}
	n.status, n.message = res.Status.String(), res.Message
	return n
}
