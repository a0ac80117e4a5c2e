package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kaddons/kaddons/internal/version"
)

// defaultOperatorNamespace is where the operator runs unless POD_NAMESPACE or
// --operator-namespace says otherwise (config/default's namespace, as main.go's).
const defaultOperatorNamespace = "kaddons-system"

// managerSelector selects the operator's Deployment (config/manager's labels).
var managerSelector = client.MatchingLabels{"app.kubernetes.io/name": "kaddons", "control-plane": "controller-manager"}

func newVersionCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var clientOnly bool
	operatorNamespace := cmp.Or(os.Getenv("POD_NAMESPACE"), defaultOperatorNamespace)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and, where the cluster answers, the operator's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, _ = fmt.Fprintf(streams.Out, "Client Version: %s\n", clientVersion())
			if clientOnly {
				return nil
			}
			_, _ = fmt.Fprintf(streams.Out, "Operator Version: %s\n",
				printable(operatorVersion(cmd.Context(), kube, operatorNamespace), keepNone))
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print the client's version only; do not contact the cluster.")
	cmd.Flags().StringVar(&operatorNamespace, "operator-namespace", operatorNamespace,
		"The namespace the operator runs in (default $POD_NAMESPACE, else kaddons-system).")
	return cmd
}

// clientVersion is the version linked in by the build (internal/version), else the
// module version and VCS revision Go recorded.
func clientVersion() string {
	v, rev := version.Version, version.Revision
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && rev == "unknown" {
				rev = s.Value
			}
		}
	}
	return fmt.Sprintf("%s (revision %s)", v, rev)
}

// operatorVersion reads the operator's version from its Deployment in namespace: the
// app.kubernetes.io/version label, else the manager image's tag. It says why when it
// cannot.
func operatorVersion(ctx context.Context, kube *genericclioptions.ConfigFlags, namespace string) string {
	c, err := newClusterClient(kube)
	if err != nil {
		return "unreachable (" + err.Error() + ")"
	}
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, client.InNamespace(namespace), managerSelector); err != nil {
		return "unreachable (" + err.Error() + ")"
	}
	if len(list.Items) == 0 {
		return fmt.Sprintf("not found (no kaddons manager Deployment in namespace %s)", namespace)
	}
	var out []string
	for _, d := range list.Items {
		out = append(out, describeManager(d))
	}
	return strings.Join(out, "; ")
}

// describeManager returns the version of one manager Deployment, its image and name.
func describeManager(d appsv1.Deployment) string {
	image := ""
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" || image == "" {
			image = c.Image
		}
	}
	v := d.Labels["app.kubernetes.io/version"]
	if v == "" {
		v = cmp.Or(imageTag(image), "unknown")
	}
	return fmt.Sprintf("%s (image %s, Deployment %s/%s)", v, image, d.Namespace, d.Name)
}

// imageTag returns the tag of image (v0.1.0 of example.com/kaddons:v0.1.0), or "".
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash, colon := strings.LastIndex(image, "/"), strings.LastIndex(image, ":")
	if colon < 0 || colon < slash {
		return ""
	}
	return image[colon+1:]
}
