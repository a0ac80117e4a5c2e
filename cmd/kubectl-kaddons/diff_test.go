package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The diff tests run against one real kube-apiserver and etcd (envtest, from the
// binaries hack/toolchain.sh builds), with the add-on CRDs installed. The plugin reaches
// it through a kubeconfig file, as a user would.
var (
	testCfg        *rest.Config
	testClient     client.Client
	testKubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, `KUBEBUILDER_ASSETS is not set: run make test, or KUBEBUILDER_ASSETS="$(hack/toolchain.sh dir)" go test`)
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	testCfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	testClient, err = client.New(testCfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating client: %v\n", err)
		return 1
	}
	user, err := env.AddUser(envtest.User{Name: "kaddons-cli-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "adding a user: %v\n", err)
		return 1
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "writing a kubeconfig: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kubectl-kaddons-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	testKubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(testKubeconfig, kubeconfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// newNamespace creates a namespace of its own for t.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("cli-%04x", rand.IntN(1<<16))
	if err := testClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testClient.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}

// coreDNSInput is a CoreDNS resource in namespace with spec lines (YAML, indented by two).
func coreDNSInput(namespace, spec string) string {
	return "apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata:\n  name: coredns\n  namespace: " + namespace +
		"\nspec:\n  version: 1.12.1\n" + spec
}

// applyRendered server-side applies what render prints for input, as the operator does
// (field manager kaddons, forced, with a seal annotation of its own), and removes the
// cluster-scoped objects after t.
func applyRendered(t *testing.T, input string) {
	t.Helper()
	ctx := context.Background()
	code, out, stderr := runPlugin(t, input, "render", "-f", "-")
	if code != 0 {
		t.Fatalf("render exited %d: %s", code, stderr)
	}
	for _, obj := range decodeAll(t, out) {
		u := &unstructured.Unstructured{Object: obj}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[ssa.AnnotationSeal] = "sealed-by-the-operator"
		u.SetAnnotations(ann)
		if err := testClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(ssa.FieldManager),
			client.ForceOwnership); err != nil {
			t.Fatalf("applying %s: %v", describe(u), err)
		}
		if u.GetNamespace() == "" {
			t.Cleanup(func() { _ = testClient.Delete(context.Background(), u) })
		}
	}
}

func TestDiff(t *testing.T) {
	ns := newNamespace(t)
	diff := func(input string) (int, string, string) {
		return runPlugin(t, input, "diff", "-f", "-", "--kubeconfig", testKubeconfig)
	}
	original := coreDNSInput(ns, "  replicas: 2\n")

	t.Run("objects that do not exist show as added", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := diff(original)
		g.Expect(code).To(Equal(diffFound), stderr)
		g.Expect(out).To(ContainSubstring("+++ merged/apps.v1.Deployment." + ns + ".coredns"))
		g.Expect(out).To(ContainSubstring("+kind: Deployment"))
		g.Expect(out).NotTo(MatchRegexp(`(?m)^-[a-z]`), "nothing exists, so nothing is removed")
	})

	applyRendered(t, original)

	t.Run("no change exits 0 and prints nothing", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := diff(original)
		g.Expect(code).To(Equal(diffNone), "stdout: %s\nstderr: %s", out, stderr)
		g.Expect(out).To(BeEmpty())
	})

	t.Run("a changed field shows in a unified diff and exits 1", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := diff(coreDNSInput(ns, "  replicas: 3\n"))
		g.Expect(code).To(Equal(diffFound), stderr)
		g.Expect(out).To(ContainSubstring("--- live/apps.v1.Deployment." + ns + ".coredns"))
		g.Expect(out).To(MatchRegexp(`(?m)^-  replicas: 2$`))
		g.Expect(out).To(MatchRegexp(`(?m)^\+  replicas: 3$`))
		g.Expect(out).To(ContainSubstring("@@ "))
		g.Expect(out).NotTo(ContainSubstring("managedFields"))
		g.Expect(out).NotTo(ContainSubstring("resourceVersion"))
		g.Expect(strings.Count(out, "+++ merged/")).To(Equal(1), "only the Deployment changes:\n%s", out)

		// The dry-run wrote nothing.
		code, _, _ = diff(original)
		g.Expect(code).To(Equal(diffNone))
	})

	t.Run("a changed Corefile domain shows in the ConfigMap", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := diff(coreDNSInput(ns, "  replicas: 2\n  dnsDomain: corp.example.org\n"))
		g.Expect(code).To(Equal(diffFound), stderr)
		g.Expect(out).To(ContainSubstring("merged/v1.ConfigMap." + ns + ".coredns"))
		g.Expect(out).To(MatchRegexp(`(?m)^\+\s+kubernetes corp.example.org `))
	})

	t.Run("errors exit 2", func(t *testing.T) {
		g := NewWithT(t)
		code, _, stderr := diff(coreDNSInput(ns, "  patches:\n  - {apiVersion: v1, kind: Service, metadata: {name: nothing}}\n"))
		g.Expect(code).To(Equal(diffFailedRun))
		g.Expect(stderr).To(ContainSubstring("CoreDNS " + ns + "/coredns"))

		code, out, stderr := runPlugin(t, original, "diff", "-f", "-", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
		g.Expect(code).To(Equal(diffFailedRun), "stdout: %s stderr: %s", out, stderr)
	})
}

// TestDiffNamespaceNotThere checks that the objects of an add-on whose namespace does
// not exist yet (the API server cannot dry-run them) show as rendered, all added.
func TestDiffNamespaceNotThere(t *testing.T) {
	g := NewWithT(t)
	ns := fmt.Sprintf("absent-%04x", rand.IntN(1<<16))
	code, out, stderr := runPlugin(t, coreDNSInput(ns, ""), "diff", "-f", "-", "--kubeconfig", testKubeconfig)
	g.Expect(code).To(Equal(diffFound), stderr)
	g.Expect(out).To(ContainSubstring("+++ merged/v1.ConfigMap." + ns + ".coredns"))
}

// TestStaticMapperScopes checks the render's static RESTMapper against the API server:
// every kind an add-on package may contain has the scope the server gives it.
func TestStaticMapperScopes(t *testing.T) {
	g := NewWithT(t)
	httpClient, err := rest.HTTPClientFor(testCfg)
	g.Expect(err).NotTo(HaveOccurred())
	live, err := apiutil.NewDynamicRESTMapper(testCfg, httpClient)
	g.Expect(err).NotTo(HaveOccurred())
	static := staticMapper()
	for _, def := range controllers.Definitions() {
		for _, gvk := range def.Children {
			want, err := live.RESTMapping(gvk.GroupKind(), gvk.Version)
			g.Expect(err).NotTo(HaveOccurred(), "the API server maps %s", gvk)
			got, err := static.RESTMapping(gvk.GroupKind(), gvk.Version)
			g.Expect(err).NotTo(HaveOccurred(), "the static mapper maps %s", gvk)
			g.Expect(got.Scope.Name()).To(Equal(want.Scope.Name()), "scope of %s", gvk)
		}
	}
	// And the built-in kinds the server serves.
	for gvk := range scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") {
			continue // lists are never applied
		}
		want, err := live.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue // list, option and internal types have no resource
		}
		g.Expect(err).NotTo(HaveOccurred())
		got, err := static.RESTMapping(gvk.GroupKind(), gvk.Version)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Scope.Name()).To(Equal(want.Scope.Name()), "scope of %s", gvk)
	}
}
