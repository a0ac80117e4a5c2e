package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// cluster is what the commands that read or write add-ons work with: a client, the
// names each add-on kind answers to, and the namespace of -n (or the context's).
type cluster struct {
	client    client.WithWatch
	kinds     kindNames
	namespace string
}

// newCluster connects to the cluster the kubeconfig flags select.
func newCluster(kube *genericclioptions.ConfigFlags) (*cluster, error) {
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, httpClient, err := newWatchClient(cfg)
	if err != nil {
		return nil, err
	}
	kinds, err := discoverKindNames(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &cluster{client: c, kinds: kinds, namespace: namespaceOf(kube)}, nil
}

// kindNames maps every name an add-on kind answers to (its kind in lower case, its
// resource's plural, singular and short names) to the kind.
type kindNames map[string]schema.GroupVersionKind

// discoverKindNames reads the add-on resources' names from the API server's discovery.
// Without an answer, each kind answers to its own name only.
func discoverKindNames(cfg *rest.Config, httpClient *http.Client) (kindNames, error) {
	kinds, err := addonKinds()
	if err != nil {
		return nil, err
	}
	names := kindNames{}
	for _, gvk := range kinds {
		names[strings.ToLower(gvk.Kind)] = gvk
	}
	// Discovery only adds aliases: without it (the CRDs may not be installed, and the
	// read of the add-on then says so) each kind keeps its own name.
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return names, nil
	}
	resources, err := disc.ServerResourcesForGroupVersion(addonsv1alpha1.GroupVersion.String())
	if err != nil {
		return names, nil
	}
	for _, r := range resources.APIResources {
		if strings.Contains(r.Name, "/") {
			continue // a subresource
		}
		gvk, ok := names[strings.ToLower(r.Kind)]
		if !ok {
			continue // AddonSource, AddonExtension: not add-ons
		}
		for _, alias := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
			if alias != "" {
				names[strings.ToLower(alias)] = gvk
			}
		}
	}
	return names, nil
}

// resolve returns the add-on kind that name (any case; kind, plural, singular or short
// name) stands for, or an error that lists the known kinds.
func (k kindNames) resolve(name string) (schema.GroupVersionKind, error) {
	if gvk, ok := k[strings.ToLower(name)]; ok {
		return gvk, nil
	}
	kinds, err := addonKinds()
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	known := make([]string, 0, len(kinds))
	for _, gvk := range kinds {
		known = append(known, gvk.Kind)
	}
	slices.Sort(known)
	return schema.GroupVersionKind{}, fmt.Errorf("unknown add-on kind %q: the add-on kinds are %s", printable(name, keepNone),
		strings.Join(known, ", "))
}

// addonRef names one add-on: its kind, namespace and name.
type addonRef struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

// String names the add-on as messages do: CoreDNS kube-system/coredns.
func (r addonRef) String() string {
	return fmt.Sprintf("%s %s/%s", r.gvk.Kind, r.namespace, printable(r.name, keepNone))
}

// parseRef reads a KIND/NAME argument, in the cluster's namespace.
func (c *cluster) parseRef(arg string) (addonRef, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return addonRef{}, fmt.Errorf("%q is not KIND/NAME, such as coredns/coredns", printable(arg, keepNone))
	}
	gvk, err := c.kinds.resolve(kind)
	if err != nil {
		return addonRef{}, err
	}
	return addonRef{gvk: gvk, namespace: c.namespace, name: name}, nil
}

// get reads the add-on ref names.
func (c *cluster) get(ctx context.Context, ref addonRef) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.gvk)
	err := c.client.Get(ctx, client.ObjectKey{Namespace: ref.namespace, Name: ref.name}, u)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s not found", ref)
	case meta.IsNoMatchError(err):
		return nil, fmt.Errorf("%s is not installed in this cluster (no CRD)", ref.gvk.Kind)
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	return u, nil
}

// newWatchClient returns a client that can also watch, and the HTTP client it uses.
func newWatchClient(cfg *rest.Config) (client.WithWatch, *http.Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	return c, httpClient, err
}

// completeAddonRefs completes a KIND/NAME argument with the add-ons of the namespace:
// every kind's when toComplete names no kind yet, the kind's own after a slash. Only
// the first argument completes.
func completeAddonRefs(kube *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := newCluster(kube)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		kinds, err := addonKinds()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		kindPart, _, hasSlash := strings.Cut(toComplete, "/")
		if hasSlash {
			gvk, err := c.kinds.resolve(kindPart)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			kinds = []schema.GroupVersionKind{gvk}
		}
		var out []cobra.Completion
		for _, gvk := range kinds {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := c.client.List(cmd.Context(), list, client.InNamespace(c.namespace)); err != nil {
				continue
			}
			prefix := strings.ToLower(gvk.Kind) + "/"
			if hasSlash {
				prefix = kindPart + "/"
			}
			for _, item := range list.Items {
				candidate := prefix + item.GetName()
				// A name the terminal would have to be protected from cannot be typed either.
				if printable(candidate, keepNone) == candidate && strings.HasPrefix(strings.ToLower(candidate), strings.ToLower(toComplete)) {
					out = append(out, candidate)
				}
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// typedAddon converts an add-on read as unstructured into its kind's type.
func typedAddon(u *unstructured.Unstructured) (addonsv1alpha1.Addon, error) {
	defs, err := definitions()
	if err != nil {
		return nil, err
	}
	def, ok := defs[u.GroupVersionKind()]
	if !ok {
		return nil, fmt.Errorf("%s is not an add-on kind", u.GroupVersionKind())
	}
	addon := def.Prototype.DeepCopyObject().(addonsv1alpha1.Addon)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, addon); err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", u.GetKind(), u.GetNamespace(), printable(u.GetName(), keepNone), err)
	}
	return addon, nil
}
