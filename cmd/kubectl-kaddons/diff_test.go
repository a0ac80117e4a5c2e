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

// TestDiffColorAndExternalDiff changes an applied CoreDNS's replicas: --color=always
// colours the diff, and KUBECTL_EXTERNAL_DIFF runs a program on a live and a merged
// directory, as kubectl diff does, with its exit status.
func TestDiffColorAndExternalDiff(t *testing.T) {
	ns := newNamespace(t)
	applyRendered(t, coreDNSInput(ns, "  replicas: 2\n"))
	changed := coreDNSInput(ns, "  replicas: 3\n")
	diff := func(args ...string) (int, string, string) {
		return runPlugin(t, changed, append([]string{"diff", "-f", "-", "--kubeconfig", testKubeconfig}, args...)...)
	}

	t.Run("color", func(t *testing.T) {
		for _, tc := range []struct {
			color   string
			colored bool
		}{{color: "always", colored: true}, {color: "never"}, {color: "auto"}} {
			t.Run(tc.color, func(t *testing.T) {
				g := NewWithT(t)
				code, out, stderr := diff("--color", tc.color)
				g.Expect(code).To(Equal(diffFound), stderr)
				if !tc.colored {
					// auto: the output is no terminal.
					expectPrintable(t, out, keepLines)
					g.Expect(out).To(MatchRegexp(`(?m)^-  replicas: 2$`))
					return
				}
				g.Expect(out).To(ContainSubstring("\x1b[1m--- live/apps.v1.Deployment." + ns + ".coredns\x1b[0m\n"))
				g.Expect(out).To(ContainSubstring("\x1b[31m-  replicas: 2\x1b[0m\n"))
				g.Expect(out).To(ContainSubstring("\x1b[32m+  replicas: 3\x1b[0m\n"))
				g.Expect(out).To(MatchRegexp("\x1b\\[36m@@ .* @@\x1b\\[0m\n"))
			})
		}
		g := NewWithT(t)
		code, _, stderr := diff("--color", "rainbow")
		g.Expect(code).To(Equal(diffFailedRun))
		g.Expect(stderr).To(ContainSubstring(`--color must be auto, always or never, not "rainbow"`))
	})

	t.Run("KUBECTL_EXTERNAL_DIFF", func(t *testing.T) {
		// The program records its arguments and the two directories, and exits $EXIT_CODE.
		record := t.TempDir()
		script := filepath.Join(t.TempDir(), "record-diff")
		g := NewWithT(t)
		g.Expect(os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$RECORD/args\"\n"+
			"rm -rf \"$RECORD/live\" \"$RECORD/merged\"\ncp -r \"$1\" \"$RECORD/live\"\ncp -r \"$2\" \"$RECORD/merged\"\n"+
			"echo external diff ran\nexit \"$EXIT_CODE\"\n"), 0o700)).To(Succeed())
		t.Setenv("RECORD", record)
		t.Setenv("KUBECTL_EXTERNAL_DIFF", script+" -u $(touch${IFS}/tmp/owned) --label=x")
		for _, exit := range []int{1, 0, 3} {
			t.Setenv("EXIT_CODE", fmt.Sprint(exit))
			code, out, stderr := diff()
			g.Expect(code).To(Equal(exit), "the program's exit status: %s", stderr)
			g.Expect(out).To(Equal("external diff ran\n"), "the program writes to stdout, the plugin writes no diff of its own")
		}

		data, err := os.ReadFile(filepath.Join(record, "args"))
		g.Expect(err).NotTo(HaveOccurred())
		args := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		g.Expect(args).To(HaveLen(4), "two directories, then the arguments kubectl keeps: %q", args)
		g.Expect(filepath.Base(args[0])).To(HavePrefix("LIVE-"))
		g.Expect(filepath.Base(args[1])).To(HavePrefix("MERGED-"))
		g.Expect(args[2:]).To(Equal([]string{"-u", "--label=x"}))
		g.Expect(args[0]).NotTo(BeADirectory(), "removed after the program ran")

		deployment := "apps.v1.Deployment." + ns + ".coredns"
		live, err := os.ReadFile(filepath.Join(record, "live", deployment))
		g.Expect(err).NotTo(HaveOccurred())
		merged, err := os.ReadFile(filepath.Join(record, "merged", deployment))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(live)).To(MatchRegexp(`(?m)^  replicas: 2$`))
		g.Expect(string(merged)).To(MatchRegexp(`(?m)^  replicas: 3$`))
		// Every object the input renders is written, changed or not, as kubectl diff does.
		configMap := "v1.ConfigMap." + ns + ".coredns"
		g.Expect(os.ReadFile(filepath.Join(record, "live", configMap))).To(Equal(mustRead(t, filepath.Join(record, "merged", configMap))))
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
