package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	builtinchannels "github.com/kaddons/kaddons/channels"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
)

// renderFlags are the flags render and diff share: the input and the operator settings
// a render depends on.
type renderFlags struct {
	files          []string
	channelsDir    string
	registryMirror string
	defaultChannel string
}

func (f *renderFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringSliceVarP(&f.files, "filename", "f", nil,
		"Add-on resources to render: files, directories of .yaml/.yml/.json files, or - for stdin. Repeat or separate with commas.")
	cmd.Flags().StringVar(&f.channelsDir, "channels", "",
		"A channels directory (channel files and packages/) to render from instead of the channels built into the plugin.")
	cmd.Flags().StringVar(&f.registryMirror, "registry-mirror", "",
		"Replace the registry of every image, as the operator's runtime.registryMirror setting does (for example mirror.example.com/k8s).")
	cmd.Flags().StringVar(&f.defaultChannel, "default-channel", "",
		"The channel of add-ons that set neither spec.version nor spec.channel (default stable), as the operator's --default-channel.")
}

// source returns the channels to render from: the directory of --channels, or the
// channels built into the plugin (the same files the manager embeds).
func (f *renderFlags) source() (*channels.Catalog, error) {
	if f.channelsDir == "" {
		return channels.NewFSCatalog(builtinchannels.FS, "builtin", f.defaultChannel), nil
	}
	if info, err := os.Stat(f.channelsDir); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("the channels directory %q is not a directory", f.channelsDir)
	}
	dir, err := filepath.Abs(f.channelsDir)
	if err != nil {
		return nil, err
	}
	return channels.NewCatalog(dir, f.defaultChannel), nil
}

func (f *renderFlags) settings() engine.Settings {
	return engine.Settings{DefaultChannel: f.defaultChannel, RegistryMirror: f.registryMirror}
}

// namespaceOf returns the namespace of -n, else of the kubeconfig's context, else
// "default": where add-ons without a namespace go, as with kubectl apply.
func namespaceOf(kube *genericclioptions.ConfigFlags) string {
	if kube.Namespace != nil && *kube.Namespace != "" {
		return *kube.Namespace
	}
	if ns, _, err := kube.ToRawKubeConfigLoader().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

func newRenderCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var f renderFlags
	var output string
	cmd := &cobra.Command{
		Use:   "render -f FILE",
		Short: "Print the objects the operator would apply for add-on resources, without a cluster",
		Example: `  kubectl kaddons render -f coredns.yaml
  kubectl kaddons render -f addons/ --registry-mirror mirror.example.com/k8s -o json
  cat coredns.yaml | kubectl kaddons render -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "yaml" && output != "json" {
				return fmt.Errorf("--output must be yaml or json, not %q", output)
			}
			inputs, err := readInputs(f.files, streams.In, namespaceOf(kube))
			if err != nil {
				return err
			}
			src, err := f.source()
			if err != nil {
				return err
			}
			rendered, err := renderAll(cmd.Context(), inputs, src, f.settings(), nil)
			if err != nil {
				return err
			}
			return printObjects(streams.Out, output, allObjects(rendered))
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "Output format: yaml (documents separated by ---) or json (a v1 List).")
	return cmd
}

// renderedAddon is one add-on and the objects it renders to, in apply order.
type renderedAddon struct {
	inputAddon
	objects []*unstructured.Unstructured
}

// renderAll renders every input add-on through the engine's own render path. The engine
// reads the input's add-ons, and the objects rendered for them, from memory; cluster,
// when not nil, answers what they do not hold (diff passes the cluster, render nothing).
// An add-on that follows another of the input is rendered after it; otherwise the input's
// order is kept.
func renderAll(ctx context.Context, inputs []inputAddon, src *channels.Catalog, settings engine.Settings,
	cluster *clusterReaders) ([]renderedAddon, error) {
	memory := newMemoryReader()
	for _, in := range inputs {
		if err := memory.add(in.addon); err != nil {
			return nil, err
		}
	}
	var cache, api client.Reader = memory, memory
	if cluster != nil {
		cache = layeredReader{input: memory, cluster: cluster.cache}
		api = layeredReader{input: memory, cluster: cluster.api}
	}
	mapper := staticMapper()
	opts := engine.Options{Catalog: src, Settings: engine.NewSettingsStore(settings)}
	var out []renderedAddon
	for _, in := range renderOrder(inputs) {
		r, err := engine.NewWithClients(in.def, opts, engine.Clients{
			Client: readOnlyClient{Reader: cache, mapper: mapper}, Reader: api, Scheme: scheme, Mapper: mapper,
			Recorder: &events.FakeRecorder{},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in, err)
		}
		objects, err := r.Render(ctx, in.addon)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in, err)
		}
		ra := renderedAddon{inputAddon: in}
		var inventory []addonsv1alpha1.ObjectReference
		for _, o := range objects.Items {
			u := o.UnstructuredObject().DeepCopy()
			ra.objects = append(ra.objects, u)
			gvk := u.GroupVersionKind()
			inventory = append(inventory, addonsv1alpha1.ObjectReference{Group: gvk.Group, Version: gvk.Version,
				Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()})
		}
		in.addon.GetAddonStatus().Inventory = addonsv1alpha1.NewInventory(inventory)
		// What follows this add-on reads it with its inventory, as it would from the
		// cluster once the operator applied it, and its objects.
		if err := memory.add(in.addon); err != nil {
			return nil, err
		}
		for _, u := range ra.objects {
			if err := memory.add(u); err != nil {
				return nil, err
			}
		}
		out = append(out, ra)
	}
	return out, nil
}

// renderOrder returns inputs with every add-on after the input add-ons it follows.
func renderOrder(inputs []inputAddon) []inputAddon {
	index := map[string]int{}
	for i, in := range inputs {
		index[in.String()] = i
	}
	done := make([]bool, len(inputs))
	visiting := make([]bool, len(inputs))
	var out []inputAddon
	var visit func(i int)
	visit = func(i int) {
		if done[i] || visiting[i] {
			return // a cycle renders in input order; the operator reports it
		}
		visiting[i] = true
		in := inputs[i]
		if in.def.Follows != nil {
			for _, ref := range in.def.Follows(in.addon) {
				key := fmt.Sprintf("%s %s/%s", ref.Kind, engine.RefNamespace(in.addon, ref), ref.Name)
				if j, ok := index[key]; ok {
					visit(j)
				}
			}
		}
		visiting[i] = false
		done[i] = true
		out = append(out, in)
	}
	for i := range inputs {
		visit(i)
	}
	return out
}

func allObjects(rendered []renderedAddon) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, ra := range rendered {
		out = append(out, ra.objects...)
	}
	return out
}

// printObjects writes objects as YAML documents separated by ---, or as one JSON v1 List.
func printObjects(w io.Writer, format string, objects []*unstructured.Unstructured) error {
	if format == "json" {
		items := make([]any, 0, len(objects))
		for _, o := range objects {
			items = append(items, o.Object)
		}
		data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	docs := make([]string, 0, len(objects))
	for _, o := range objects {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(data))
	}
	_, err := io.WriteString(w, strings.Join(docs, "---\n"))
	return err
}
