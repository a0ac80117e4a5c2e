package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	builtinchannels "github.com/kaddons/kaddons/channels"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/config"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
	"github.com/kaddons/kaddons/internal/extensions"
	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/version"
)

// defaultOperatorNamespace is where AddonPolicies count when POD_NAMESPACE is not set
// (config/manager sets it to the manager's own namespace).
const defaultOperatorNamespace = "kaddons-system"

// clusterVersionTTL is how long the cluster's version, read for pre-flight checks, is reused.
const clusterVersionTTL = 10 * time.Minute

// operatorNamespace returns the manager's own namespace: where AddonPolicies count, the
// seal key is kept and AddonSources are trusted.
func operatorNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return defaultOperatorNamespace
}

// newManager creates the manager with the settings of m, and the sealer its cache
// checks every child's seal with.
func newManager(f flags, m config.Manager, namespace string) (ctrl.Manager, *ssa.Sealer, error) {
	metricsOptions := newMetricsOptions(m.Metrics, f.enableHTTP2)
	restConfig := ctrl.GetConfigOrDie()
	// Uncompressed responses, as kube-controller-manager and kube-scheduler ask for: between
	// a controller and its API server, gzip (which the API server applies to each watch
	// event on its own) costs both sides more CPU than it saves on the wire.
	restConfig.DisableCompression = true
	// The seal key must be known before the cache starts: its transform checks every
	// child's seal.
	sealer, err := loadSealer(restConfig, namespace)
	if err != nil {
		return nil, nil, err
	}
	cacheOptions := engine.CacheOptions(sealer, controllers.Definitions()...)
	cacheOptions.SyncPeriod = &m.CacheSyncPeriod
	le := m.LeaderElection
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions,
		HealthProbeBindAddress:  m.HealthProbeBindAddress,
		PprofBindAddress:        f.profilerAddr,
		LeaderElection:          le.Enabled,
		LeaderElectionID:        le.ID,
		LeaderElectionNamespace: le.Namespace,
		LeaseDuration:           &le.LeaseDuration,
		RenewDeadline:           &le.RenewDeadline,
		RetryPeriod:             &le.RetryPeriod,
		// Never release the Lease on the way out: client-go also releases it after a
		// failed renewal, and that release (bounded by the renew deadline) runs while the
		// controllers still reconcile, so a leader cut off from its Lease kept writing
		// past the Lease's expiry, beside the new leader (TestFaultLeaderFailover). A
		// successor waits out the lease duration instead.
		LeaderElectionReleaseOnCancel: false,
		Cache:                         cacheOptions,
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		// The client, the cache and the engine share one mapper that remembers what it
		// answered: every apply asks it for the child's resource and scope.
		MapperProvider: func(c *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
			mapper, err := apiutil.NewDynamicRESTMapper(c, httpClient)
			if err != nil {
				return nil, err
			}
			return engine.MemoizedMapper(mapper), nil
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, sealer, nil
}

// newMetricsOptions returns the metrics server's options for the settings of m.
func newMetricsOptions(m config.Metrics, enableHTTP2 bool) metricsserver.Options {
	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		// HTTP/2 stream cancellation and rapid reset (CVE-2023-44487, CVE-2023-39325).
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	secure := ptr.Deref(m.Secure, true)
	opts := metricsserver.Options{BindAddress: m.BindAddress, SecureServing: secure, TLSOpts: tlsOpts}
	if secure {
		// Scrapers authenticate with a token and need RBAC for GET /metrics
		// (config/rbac/metrics_reader_role.yaml).
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// loadSealer reads, or creates on the first start, the key the engine seals children with
// (ssa.LoadSealer), retrying for a minute while the API server is not answering.
func loadSealer(restConfig *rest.Config, namespace string) (*ssa.Sealer, error) {
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client for the seal key: %w", err)
	}
	var (
		sealer  *ssa.Sealer
		lastErr error
	)
	_ = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		sealer, lastErr = ssa.LoadSealer(ctx, c, namespace)
		if errors.Is(lastErr, ssa.ErrSealKeyNotStored) {
			setupLog.Info("The seal key is not stored: after a restart, every child is sealed again by one apply",
				"reason", lastErr.Error())
			return true, nil
		}
		if lastErr != nil {
			setupLog.Info("Reading the seal key failed; retrying", "error", lastErr.Error())
			return false, nil
		}
		return true, nil
	})
	if sealer == nil {
		return nil, lastErr
	}
	return sealer, nil
}

// reconcilerOptions is what the reconcilers share besides the manager.
type reconcilerOptions struct {
	flags     flags
	cfg       *config.Configuration
	catalog   *channels.Catalog
	sealer    *ssa.Sealer
	namespace string
	setLevel  func(config.LogLevel)
}

// registration adds reconcilers, or runnables, to a manager. Its error says which failed.
type registration func(ctrl.Manager) error

// setupReconcilers registers every reconciler with mgr, each as a registration. The order
// matters: the AddonPolicy controller's permit is an option of the add-on controllers.
func setupReconcilers(mgr ctrl.Manager, o reconcilerOptions) error {
	opts, err := newEngineOptions(mgr, o)
	if err != nil {
		return err
	}
	fetcher, err := sources.NewFetcher(sources.Options{CacheDir: o.flags.sourceCacheDir, MaxCacheBytes: o.flags.sourceCacheBytes})
	if err != nil {
		return err
	}
	registrations := []registration{
		reconciler("addonsource", &controllers.AddonSourceReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Namespace: o.namespace, Fetcher: fetcher, Registry: opts.Artifacts, Operator: opts.Operator}),
		policies(&opts, o.namespace),
		addons(&opts),
		reconciler("operatorconfig", &controllers.OperatorConfigReconciler{Client: mgr.GetClient(), File: o.cfg.Runtime,
			Settings: opts.Settings, Catalog: o.catalog, Kinds: addonKinds(), SetLogLevel: o.setLevel, OperatorNamespace: o.namespace}),
	}
	for _, register := range registrations {
		if err := register(mgr); err != nil {
			return err
		}
	}
	return nil
}

// newEngineOptions returns the options every add-on controller shares; the permit is left
// to the AddonPolicy controller's registration.
func newEngineOptions(mgr ctrl.Manager, o reconcilerOptions) (engine.Options, error) {
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return engine.Options{}, fmt.Errorf("creating the discovery client: %w", err)
	}
	operator := engine.OperatorIdentity{ID: o.flags.operatorID, Version: version.Version,
		KubernetesVersion: engine.ClusterVersion(discoveryClient, clusterVersionTTL)}
	capabilities, err := engine.NewClusterCapabilities(mgr.GetConfig(), operator.KubernetesVersion)
	if err != nil {
		return engine.Options{}, err
	}
	return engine.Options{Catalog: o.catalog, Concurrency: o.cfg.ConcurrencyFor, Capabilities: capabilities,
		// The operatorconfig controller puts the file's runtime settings in force, then
		// those of the OperatorConfig resource.
		Settings: engine.NewSettingsStore(engine.Settings{}), Artifacts: engine.NewArtifactRegistry(o.cfg.Runtime.DefaultChannel),
		Operator: operator, Sealer: o.sealer}, nil
}

// reconciler registers r as the controller name.
func reconciler(name string, r interface{ SetupWithManager(ctrl.Manager) error }) registration {
	return func(mgr ctrl.Manager) error {
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", name, err)
		}
		return nil
	}
}

// policies registers the AddonPolicy controller with the namespace cache it reads, and
// sets the permit of opts: the add-on controllers registered after it ask it. Then it
// registers the AddonExtension controller, which selects add-ons with the same cache,
// and sets the extensions of opts.
func policies(opts *engine.Options, namespace string) registration {
	return func(mgr ctrl.Manager) error {
		namespaces, err := controllers.SetupPolicies(mgr, namespace, opts)
		if err != nil {
			return err
		}
		clientset, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return fmt.Errorf("creating the client of ServiceAccount tokens: %w", err)
		}
		account, err := extensions.OwnServiceAccount(context.Background(), clientset.AuthenticationV1())
		if err != nil {
			return err
		}
		tokens := &extensions.ServiceAccountTokens{ServiceAccounts: clientset.CoreV1(), ServiceAccount: account}
		return controllers.SetupExtensions(mgr, opts, namespaces, tokens)
	}
}

// addons registers one controller per add-on kind, with opts as they are by then.
func addons(opts *engine.Options) registration {
	return func(mgr ctrl.Manager) error {
		return controllers.SetupWithManager(mgr, *opts)
	}
}

// setupChecks adds the liveness and readiness checks.
func setupChecks(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", cacheSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}
	return nil
}

// channelCatalog returns the channels the manager reads: for the Builtin source, those
// embedded in the binary; for the Directory source, the directory it names, which must
// exist.
func channelCatalog(src config.Channels, defaultChannel string) (*channels.Catalog, error) {
	if src.Source != config.ChannelSourceDirectory {
		return channels.NewFSCatalog(builtinchannels.FS, "builtin", defaultChannel), nil
	}
	if info, err := os.Stat(src.Directory); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("the channels directory %q is not a directory", src.Directory)
	}
	dir, err := filepath.Abs(src.Directory)
	if err != nil {
		return nil, err
	}
	return channels.NewCatalog(dir, defaultChannel), nil
}

// cacheSynced is a ready check that passes once the manager's cache has started and every
// informer in it has synced: until then the manager would act on an empty picture of the
// cluster. Each probe waits at most a second.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		return nil
	}
}
