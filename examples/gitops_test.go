package examples

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// gitopsDir is the example GitOps repository layout.
var gitopsDir = "gitops"

// kustomizations returns every folder under root that holds a kustomization.yaml.
func kustomizations(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// build runs kustomize on dir, as `kubectl kustomize`, Flux and Argo CD do.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	objects := make([]*unstructured.Unstructured, 0, resources.Size())
	for _, res := range resources.Resources() {
		// Through JSON, so numbers are int64 as an API client has them.
		data, err := res.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		objects = append(objects, obj)
	}
	return objects
}

// apiServer is a kube-apiserver and etcd with the add-on CRDs, started by the first test
// that needs the API server's own verdict (schemas, validation rules, defaults) and
// stopped by TestMain.
var apiServer struct {
	once sync.Once
	env  *envtest.Environment
	// client talks to it as an administrator; kubeconfig is a file with the same access.
	client     client.Client
	kubeconfig string
	err        error
}

// startAPIServer returns the shared API server's client and kubeconfig file.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, which builds kube-apiserver, etcd and kubectl with hack/toolchain.sh")
	}
	apiServer.once.Do(func() {
		apiServer.env = &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
		}
		// The examples' Service IPs (CoreDNS 10.96.0.10) are in kubeadm's default range,
		// not in envtest's.
		apiServer.env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/12")
		apiServer.err = func() error {
			cfg, err := apiServer.env.Start()
			if err != nil {
				return fmt.Errorf("starting envtest: %w", err)
			}
			scheme := runtime.NewScheme()
			if err := addonsv1alpha1.AddToScheme(scheme); err != nil {
				return err
			}
			if apiServer.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
				return err
			}
			user, err := apiServer.env.AddUser(envtest.User{Name: "ci", Groups: []string{"system:masters"}}, nil)
			if err != nil {
				return err
			}
			kubeconfig, err := user.KubeConfig()
			if err != nil {
				return err
			}
			f, err := os.CreateTemp("", "kaddons-examples-kubeconfig-")
			if err != nil {
				return err
			}
			apiServer.kubeconfig = f.Name()
			if _, err := f.Write(kubeconfig); err != nil {
				return err
			}
			return f.Close()
		}()
	})
	if apiServer.err != nil {
		t.Fatal(apiServer.err)
	}
	return apiServer.client, apiServer.kubeconfig
}

// stopAPIServer stops the shared API server, if a test started it.
func stopAPIServer() error {
	if apiServer.env == nil {
		return nil
	}
	if apiServer.kubeconfig != "" {
		_ = os.Remove(apiServer.kubeconfig)
	}
	return apiServer.env.Stop()
}

func TestGitOpsLayout(t *testing.T) {
	dirs := kustomizations(t, gitopsDir)
	NewWithT(t).Expect(dirs).To(ContainElements(
		filepath.Join(gitopsDir, "install"), filepath.Join(gitopsDir, "base")))
	kinds := addonKinds(t)
	c, _ := startAPIServer(t)

	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			g := NewWithT(t)
			objects := build(t, dir)
			g.Expect(objects).NotTo(BeEmpty())

			if dir == filepath.Join(gitopsDir, "install") {
				// The operator: a CRD for every add-on kind, and a manager with a real image.
				crds := map[string]bool{}
				var images []string
				for _, obj := range objects {
					switch obj.GetKind() {
					case "CustomResourceDefinition":
						crds[crdKey(t, obj)] = true
					case "Deployment":
						containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
						g.Expect(err).NotTo(HaveOccurred())
						for _, c := range containers {
							images = append(images, c.(map[string]any)["image"].(string))
						}
					}
				}
				for _, kind := range kinds {
					g.Expect(crds).To(HaveKey(addonsv1alpha1.GroupVersion.Group+"/"+kind), "no CRD for %s", kind)
				}
				g.Expect(images).NotTo(BeEmpty())
				g.Expect(images).NotTo(ContainElement("controller:latest"), "the image placeholder was not replaced")
				return
			}

			// Everything else is add-on resources, and nothing but add-on resources.
			expectAddonResources(g, c, kinds, objects)
		})
	}
}

// expectAddonResources checks that objects are add-on resources and nothing else, each
// with a namespace, strictly decodable into its API type, pinning a version or following
// a channel kaddons ships, and accepted by the API server c in a server-side dry run.
func expectAddonResources(g Gomega, c client.Client, kinds []string, objects []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, obj := range objects {
		gvk := obj.GroupVersionKind()
		g.Expect(gvk.GroupVersion()).To(Equal(addonsv1alpha1.GroupVersion), "%s %s", gvk, obj.GetName())
		g.Expect(kinds).To(ContainElement(gvk.Kind))
		g.Expect(obj.GetNamespace()).NotTo(BeEmpty(), "%s %s", gvk.Kind, obj.GetName())

		typed, err := c.Scheme().New(gvk)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, typed, true)).
			To(Succeed(), "%s %s has fields the API does not know", gvk.Kind, obj.GetName())
		addon := typed.(addonsv1alpha1.Addon)

		// A pinned version names a package, a channel a channel file.
		spec := addon.CommonSpec()
		if spec.Version != "" {
			g.Expect(filepath.Join("..", "channels", "packages", addon.ComponentName(), spec.Version)).To(BeADirectory(),
				"%s %s pins a version kaddons does not ship", gvk.Kind, obj.GetName())
		}
		if spec.Channel != "" {
			g.Expect(filepath.Join("..", "channels", spec.Channel)).To(BeARegularFile(),
				"%s %s follows a channel kaddons does not ship", gvk.Kind, obj.GetName())
		}

		// The API server's verdict: schema, validation rules, defaults.
		g.Expect(c.Create(ctx, obj.DeepCopy(), client.DryRunAll)).To(Succeed(), "%s %s", gvk.Kind, obj.GetName())
	}
}
