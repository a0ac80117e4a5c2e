package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/config"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// The suite runs every test against one real kube-apiserver and etcd (envtest, from the
// binaries hack/toolchain.sh builds) and one manager with all add-on controllers, the way
// main.go wires them. Each test works in a namespace of its own.
var (
	testScheme = runtime.NewScheme()
	cfg        *rest.Config
	// k8sClient reads and writes straight to the API server, never through a cache.
	k8sClient client.Client
	// testMgr is the running manager.
	testMgr ctrl.Manager
	// source is the channels directory of the repository.
	source *channels.Catalog
	// settings are the operator-wide settings the suite's manager runs with; a test that
	// changes them restores them.
	settings = engine.NewSettingsStore(engine.Settings{})
	// policyNamespace is where the suite's AddonPolicies count.
	policyNamespace = "kaddons-system"
	// fileSettings stand for the configuration file's runtime settings. Every namespace is
	// trusted, as each test runs in a namespace of its own; the tenancy tests narrow the
	// trusted set through an OperatorConfig.
	// testSources holds the AddonSources' artifacts; testFetcher serves them as the tests
	// say; testOperator is the operator the pre-flight checks see.
	testSources  = engine.NewArtifactRegistry(channels.DefaultChannel)
	testFetcher  = newFakeFetcher()
	testOperator = engine.OperatorIdentity{ID: "kaddons", Version: "v1.5.0"}
	// testSealer seals what the suite's manager applies, as main.go's does with the key of
	// the Secret kaddons-seal.
	testSealer   = ssa.NewSealer([]byte("the envtest suite's seal key, 32+ bytes"))
	fileSettings = config.Runtime{DefaultChannel: channels.DefaultChannel, LogLevel: config.LogLevelInfo,
		TrustedNamespaces: []string{config.TrustAllNamespaces}}
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(testScheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(testScheme))
	utilruntime.Must(configv1alpha1.AddToScheme(testScheme))
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	enginetest.SetLogger()
	testEnv, started, err := enginetest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	cfg = started
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()

	k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating client: %v\n", err)
		return 1
	}

	// The manager talks through a counting transport, so tests can assert how many
	// requests and writes a reconcile makes.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.Wrap(requests.Wrap)
	testMgr, err = ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  engine.CacheOptions(testSealer, Definitions()...),
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating manager: %v\n", err)
		return 1
	}
	// The manager reads the repository's channels plus the test-only channels of
	// testdata/channels, copied into a temporary folder.
	channelsDir, err := os.MkdirTemp("", "kaddons-channels-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating channels folder: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(channelsDir) }()
	for src, dst := range map[string]string{
		filepath.Join("..", "channels"):       channelsDir,
		filepath.Join("testdata", "channels"): channelsDir,
	} {
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			fmt.Fprintf(os.Stderr, "copying %s: %v\n", src, err)
			return 1
		}
	}
	source = channels.NewCatalog(channelsDir, channels.DefaultChannel)
	// Operator is set once the cluster's version can be read, below.
	opts := engine.Options{Catalog: source, Settings: settings, Artifacts: testSources, Sealer: testSealer}
	namespaces, err := SetupPolicies(testMgr, policyNamespace, &opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "setting up policies: %v\n", err)
		return 1
	}
	if err := setupTestExtensions(cfg, namespaces, &opts); err != nil {
		fmt.Fprintf(os.Stderr, "setting up extensions: %v\n", err)
		return 1
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating the discovery client: %v\n", err)
		return 1
	}
	testOperator.KubernetesVersion = engine.ClusterVersion(discoveryClient, time.Minute)
	sourceController := &AddonSourceReconciler{Client: testMgr.GetClient(), Reader: testMgr.GetAPIReader(),
		Namespace: policyNamespace, Fetcher: testFetcher, Registry: testSources, Operator: testOperator}
	if err := sourceController.SetupWithManager(testMgr); err != nil {
		fmt.Fprintf(os.Stderr, "setting up the addonsource controller: %v\n", err)
		return 1
	}
	opts.Operator = testOperator
	if err := SetupWithManager(testMgr, opts); err != nil {
		fmt.Fprintf(os.Stderr, "setting up controllers: %v\n", err)
		return 1
	}
	live := &OperatorConfigReconciler{Client: testMgr.GetClient(), File: fileSettings, Settings: settings,
		Catalog: source, Kinds: definedKinds()}
	if err := live.SetupWithManager(testMgr); err != nil {
		fmt.Fprintf(os.Stderr, "setting up the operatorconfig controller: %v\n", err)
		return 1
	}

	return enginetest.RunWithManager(m, testMgr)
}

// definedKinds lists the kinds of Definitions(), as main.go's addonKinds does.
func definedKinds() []string {
	defs := Definitions()
	kinds := make([]string, 0, len(defs))
	for _, def := range defs {
		gvk, err := apiutil.GVKForObject(def.Prototype, testScheme)
		if err != nil {
			panic(fmt.Sprintf("add-on prototype %T: %v", def.Prototype, err))
		}
		kinds = append(kinds, gvk.Kind)
	}
	return kinds
}

// requests counts every request the suite's manager sends.
var requests = &enginetest.RequestCounter{}
