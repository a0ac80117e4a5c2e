// Command manager runs the kaddons operator: one controller per add-on kind, all sharing
// one engine, one cache and one set of channels.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/controllers/channels"
	"github.com/kaddons/kaddons/controllers/engine"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
}

// flags holds the command line. Names follow the kubebuilder scaffold where it has one.
type flags struct {
	metricsAddr          string
	probeAddr            string
	enableLeaderElection bool
	leaderElectionID     string
	leaderElectionNS     string
	secureMetrics        bool
	enableHTTP2          bool
	channelsDir          string
	defaultChannel       string
	concurrency          int
}

func main() {
	var f flags
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&f.enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. Enabling this will ensure there is only one active controller manager.")
	flag.StringVar(&f.leaderElectionID, "leader-election-id", "kaddons.addons.kaddons.dev", "The name of the leader election Lease.")
	flag.StringVar(&f.leaderElectionNS, "leader-election-namespace", "",
		"The namespace of the leader election Lease. Defaults to the manager's own namespace when it runs in a cluster.")
	flag.BoolVar(&f.secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	flag.BoolVar(&f.enableHTTP2, "enable-http2", false, "If set, HTTP/2 will be enabled for the metrics server.")
	flag.StringVar(&f.channelsDir, "channels", "", "The channels directory (channel files and packages/). "+
		"Defaults to the channels folder next to the binary, then ./channels.")
	flag.StringVar(&f.defaultChannel, "default-channel", channels.DefaultChannel,
		"The channel for add-ons that set neither spec.version nor spec.channel.")
	flag.IntVar(&f.concurrency, "max-concurrent-reconciles", engine.DefaultMaxConcurrentReconciles,
		"How many add-ons of one kind are reconciled in parallel.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	if err := run(f); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// run builds the manager, registers the add-on controllers and blocks until it stops.
func run(f flags) error {
	dir, err := channelsDir(f.channelsDir)
	if err != nil {
		return err
	}
	if f.concurrency < 1 {
		return fmt.Errorf("--max-concurrent-reconciles must be at least 1, not %d", f.concurrency)
	}

	var tlsOpts []func(*tls.Config)
	if !f.enableHTTP2 {
		// HTTP/2 stream cancellation and rapid reset (CVE-2023-44487, CVE-2023-39325).
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	metricsOptions := metricsserver.Options{
		BindAddress:   f.metricsAddr,
		SecureServing: f.secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if f.secureMetrics {
		// Scrapers authenticate with a token and need RBAC for GET /metrics
		// (config/rbac/metrics_reader_role.yaml).
		metricsOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions,
		WebhookServer:                 webhook.NewServer(webhook.Options{TLSOpts: tlsOpts}),
		HealthProbeBindAddress:        f.probeAddr,
		LeaderElection:                f.enableLeaderElection,
		LeaderElectionID:              f.leaderElectionID,
		LeaderElectionNamespace:       f.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         engine.CacheOptions(controllers.Definitions()...),
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	source := channels.NewSource(dir, f.defaultChannel)
	if err := controllers.SetupWithManager(mgr, engine.Options{Source: source, MaxConcurrentReconciles: f.concurrency}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}

	setupLog.Info("Starting manager", "channels", dir, "defaultChannel", f.defaultChannel)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// channelsDir finds the channels directory: the flag, else channels/ next to the binary
// (as the image lays it out), else ./channels.
func channelsDir(flagValue string) (string, error) {
	candidates := []string{flagValue}
	if flagValue == "" {
		candidates = []string{"channels"}
		if exe, err := os.Executable(); err == nil {
			candidates = append([]string{filepath.Join(filepath.Dir(exe), "channels")}, candidates...)
		}
	}
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && info.IsDir() {
			return filepath.Abs(c)
		}
	}
	if flagValue != "" {
		return "", fmt.Errorf("--channels %q is not a directory", flagValue)
	}
	return "", errors.New("no channels directory found next to the binary or in the working directory; set --channels")
}
