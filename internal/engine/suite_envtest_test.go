package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The envtest tests of the engine (the *_envtest_test.go files) run the reconcilers of
// two test Definitions, of the CoreDNS kind without CoreDNS's own transforms and of the
// NodeLocalDNS kind without any, in a manager against a real kube-apiserver and etcd:
// what they check is the engine's, not CoreDNS's (which controllers/ tests). Each test
// works in a namespace of its own.
var (
	cfg *rest.Config
	// k8sClient reads and writes straight to the API server, never through a cache.
	k8sClient client.Client
	testMgr   ctrl.Manager
	// requests counts every request the manager sends, so tests can assert how many
	// requests and writes a reconcile makes.
	requests = &enginetest.RequestCounter{}
	// source is the repository's channels plus the test-only packages of
	// testdata/packages.
	source *channels.Catalog
	// settings are the operator-wide settings the manager runs with; a test that
	// changes them restores them.
	settings = engine.NewSettingsStore(engine.Settings{})
	sealer   = ssa.NewSealer([]byte("the engine envtest suite's seal key, 32+ bytes"))
)

// policyNamespace is where the suite's AddonPolicies count.
const policyNamespace = "kaddons-system"

// testDefinition is the CoreDNS kind with the children of its package and, of its typed
// fields, only replicas and the node selector, applied through the engine's generic
// PodFields; nothing else of CoreDNS's own (Corefile, adoption of kubeadm's install).
// spec.corefile is declared free-form, so that AddonPolicies can refuse it, but is not
// applied.
func testDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.CoreDNS{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
			policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
		},
		Transforms:     []engine.ObjectTransform{podFields},
		FreeFormFields: []string{"spec.corefile"},
		// Every hook answers what the namespace's script says (hooks_envtest_test.go), and
		// lets an add-on without a script go on.
		Hooks: testHooks(),
	}
}

// otherDefinition is a second kind, the NodeLocalDNS kind with the children of its
// package as they are, none of its typed fields: tests that one kind's settings leave
// another's add-ons alone create one.
func otherDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.NodeLocalDNS{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
		},
	}
}

// podFields applies the CoreDNS's replicas and node selector to its Deployment.
func podFields(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.CoreDNS)
	if !ok {
		return fmt.Errorf("expected a CoreDNS, got %T", in.Addon)
	}
	d, err := engine.MustFindObject(objects, "Deployment", "coredns")
	if err != nil {
		return err
	}
	return engine.ApplyPodFields(d, "coredns", engine.PodFields{Replicas: cr.Spec.Replicas, NodeSelector: cr.Spec.NodeSelector})
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	flag.Parse()
	enginetest.SetLogger()
	env, started, err := enginetest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	cfg = started
	scheme := enginetest.Scheme()
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintf(os.Stderr, "creating client: %v\n", err)
		return 1
	}
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.Wrap(requests.Wrap)
	testMgr, err = ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  engine.CacheOptions(sealer, testDefinition(), otherDefinition()),
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating manager: %v\n", err)
		return 1
	}
	channelsDir, err := os.MkdirTemp("", "kaddons-channels-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating channels folder: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(channelsDir) }()
	for src, dst := range map[string]string{
		filepath.Join("..", "..", "channels"): channelsDir,
		filepath.Join("testdata", "packages"): filepath.Join(channelsDir, "packages"),
	} {
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			fmt.Fprintf(os.Stderr, "copying %s: %v\n", src, err)
			return 1
		}
	}
	source = channels.NewCatalog(channelsDir, channels.DefaultChannel)
	for _, def := range []engine.Definition{testDefinition(), otherDefinition()} {
		r, err := engine.New(testMgr, def, engineOptions())
		if err == nil {
			err = r.SetupWithManager(testMgr)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "setting up the reconciler of %T: %v\n", def.Prototype, err)
			return 1
		}
	}

	return enginetest.RunWithManager(m, testMgr)
}

// engineOptions are the options the suite's reconcilers run with: the AddonPolicies of
// policyNamespace decide, as main.go's engine.PolicyChecker does (read from the manager's
// cache; namespaces straight from the API server).
func engineOptions() engine.Options {
	checker := &engine.PolicyChecker{Namespace: policyNamespace, Policies: testMgr.GetClient(), Namespaces: k8sClient}
	return engine.Options{Catalog: source, Settings: settings, Sealer: sealer,
		Permit: checker.Permit, ReconcileAllOn: []client.Object{&configv1alpha1.AddonPolicy{}},
		AddonKinds: []client.Object{&addonsv1alpha1.CoreDNS{}, &addonsv1alpha1.NodeLocalDNS{}}}
}

// withSettings runs the rest of the test with the manager's settings replaced.
func withSettings(t *testing.T, s engine.Settings) {
	t.Helper()
	enginetest.WithSettings(t, settings, s)
}
