// Command manager runs the kaddons operator: one controller per add-on kind, all sharing
// one engine, one cache and one set of channels.
package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/config"
	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/version"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(configv1alpha1.AddToScheme(scheme))
}

// flags holds the command line. Names follow the kubebuilder scaffold where it has one.
// Apart from --config and --enable-http2, every flag overrides a setting of the
// configuration file, and only when it is given explicitly.
type flags struct {
	configFile           string
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
	operatorID           string
	sourceCacheDir       string
	sourceCacheBytes     int64
	profilerAddr         string
	printVersion         bool
}

// bind registers the flags on fs. Their defaults are the configuration's defaults, so
// leaving a setting out of the file and not giving its flag mean the same.
func (f *flags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.configFile, "config", "", "The configuration file (kind OperatorConfiguration, apiVersion "+
		"config.kaddons.dev/v1alpha1 or v1beta1). Flags given explicitly override its settings.")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", config.DefaultMetricsBindAddress, "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", config.DefaultHealthProbeBindAddress, "The address the probe endpoint binds to.")
	fs.BoolVar(&f.enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. Enabling this will ensure there is only one active controller manager.")
	fs.StringVar(&f.leaderElectionID, "leader-election-id", config.DefaultLeaderElectionID, "The name of the leader election Lease.")
	fs.StringVar(&f.leaderElectionNS, "leader-election-namespace", "",
		"The namespace of the leader election Lease. Defaults to the manager's own namespace when it runs in a cluster.")
	fs.BoolVar(&f.secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "If set, HTTP/2 will be enabled for the metrics server.")
	fs.StringVar(&f.channelsDir, "channels", "", "The channels directory (channel files and packages/). "+
		"Defaults to the channels built into the binary.")
	fs.StringVar(&f.defaultChannel, "default-channel", config.DefaultChannel,
		"The channel for add-ons that set neither spec.version nor spec.channel.")
	fs.IntVar(&f.concurrency, "max-concurrent-reconciles", config.DefaultConcurrency,
		"How many add-ons of one kind are reconciled in parallel. Per-kind bounds in the configuration file still apply.")
	fs.StringVar(&f.operatorID, "operator-id", sources.DefaultOperatorID,
		"The operator's id: a bundle whose metadata names another operator id is refused (OperatorMismatch).")
	fs.StringVar(&f.sourceCacheDir, "source-cache-dir", filepath.Join(os.TempDir(), "kaddons-sources"),
		"Where fetched AddonSource artifacts are extracted and cached by digest (an emptyDir in the Deployment).")
	fs.Int64Var(&f.sourceCacheBytes, "source-cache-bytes", sources.DefaultCacheBytes,
		"The bound on the bytes kept in --source-cache-dir; each source's current revision is kept even over it.")
	fs.StringVar(&f.profilerAddr, "profiler-address", "",
		"The address (host:port) to serve Go's pprof profiles on, for example 127.0.0.1:6060. Empty, the default, serves none.")
	fs.BoolVar(&f.printVersion, "version", false, "Print the operator's version and exit.")
}

// defaultGCPercent is the manager's GOGC unless the environment sets one. The manager's
// live heap is mostly its caches, which change slowly; Go's default of 100 lets the heap
// grow to twice that between collections, and RSS follows the peak. 50 keeps the heap
// within one and a half times its live size for some more collector CPU, which the
// manager has to spare: its requests, not its CPU, bound how fast it applies.
const defaultGCPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	var f flags
	f.bind(flag.CommandLine)
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	set := explicitFlags(flag.CommandLine)
	if f.printVersion {
		fmt.Printf("kaddons %s (revision %s)\n", version.Version, version.Revision)
		return
	}

	// The configuration sets the level once it is loaded, unless --zap-log-level did.
	level := uberzap.NewAtomicLevel()
	logLevel := "--zap-log-level=" + flag.Lookup("zap-log-level").Value.String()
	if !set["zap-log-level"] {
		opts.Level = level
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	cfg, err := configure(f, set, addonKinds())
	if err != nil {
		setupLog.Error(err, "Invalid configuration")
		os.Exit(1)
	}
	if !set["zap-log-level"] {
		level.SetLevel(zapLevel(cfg.Runtime.LogLevel))
		logLevel = string(cfg.Runtime.LogLevel)
	}

	// The OperatorConfig's log level applies unless --zap-log-level was given.
	setLevel := func(l config.LogLevel) {
		if !set["zap-log-level"] {
			level.SetLevel(zapLevel(l))
		}
	}
	if err := run(f, cfg, logLevel, setLevel); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// explicitFlags returns the names of the flags given on the command line, as opposed to
// those left at their defaults.
func explicitFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// addonKinds lists the kinds of the add-ons this manager runs.
func addonKinds() []string {
	defs := controllers.Definitions()
	kinds := make([]string, 0, len(defs))
	for _, def := range defs {
		gvk, err := apiutil.GVKForObject(def.Prototype, scheme)
		utilruntime.Must(err)
		kinds = append(kinds, gvk.Kind)
	}
	return kinds
}

// configure builds the configuration: the defaults, overridden by the file named by
// --config, overridden in turn by the flags in set, those given explicitly.
func configure(f flags, set map[string]bool, kinds []string) (*config.Configuration, error) {
	cfg := &config.Configuration{}
	config.Default(cfg)
	if f.configFile != "" {
		loaded, err := config.Load(f.configFile, config.WithKinds(kinds...))
		if err != nil {
			return nil, err
		}
		cfg = loaded
	}
	applyFlags(cfg, f, set)
	errs := config.Validate(cfg)
	for _, e := range errs {
		if name, ok := flagOf[e.Field]; ok {
			e.Field = "--" + name
		}
	}
	if err := validateProfilerAddress(f.profilerAddr); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid command-line flags: %w", errs.ToAggregate())
	}
	return cfg, nil
}

// validateProfilerAddress checks --profiler-address: empty (off), or host:port with a
// loopback host (an address of 127.0.0.0/8, ::1, or localhost). pprof has no
// authentication and shows the manager's heap, Secrets included, so it must not listen
// where anything but the pod itself (or, with hostNetwork, the node itself) reaches it:
// an empty host (":6060") or 0.0.0.0 listens on every interface, a routable address or
// a name on whatever it resolves to.
func validateProfilerAddress(addr string) *field.Error {
	if addr == "" {
		return nil
	}
	invalid := func(detail string) *field.Error {
		return field.Invalid(field.NewPath("--profiler-address"), addr, detail+
			": pprof has no authentication, so it must listen on a loopback host (127.0.0.0/8, ::1 or localhost), "+
			"such as 127.0.0.1:6060, and be reached through kubectl port-forward")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalid("must be host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return invalid("the port must be a number from 0 to 65535")
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return invalid("the host must be a loopback address")
	}
	return nil
}

// flagOf names the flag that overrides each setting, by the setting's field path, so
// that a validation error caused by a flag names the flag.
var flagOf = map[string]string{
	"manager.metrics.bindAddress":      "metrics-bind-address",
	"manager.healthProbeBindAddress":   "health-probe-bind-address",
	"manager.leaderElection.id":        "leader-election-id",
	"manager.leaderElection.namespace": "leader-election-namespace",
	"manager.concurrency.default":      "max-concurrent-reconciles",
	"runtime.defaultChannel":           "default-channel",
}

// applyFlags overrides the settings of cfg with the flags in set. A flag left at its
// default does not override the file, but one given with its default value does.
func applyFlags(cfg *config.Configuration, f flags, set map[string]bool) {
	m := &cfg.Manager
	if set["metrics-bind-address"] {
		m.Metrics.BindAddress = f.metricsAddr
	}
	if set["metrics-secure"] {
		m.Metrics.Secure = ptr.To(f.secureMetrics)
	}
	if set["health-probe-bind-address"] {
		m.HealthProbeBindAddress = f.probeAddr
	}
	if set["leader-elect"] {
		m.LeaderElection.Enabled = f.enableLeaderElection
	}
	if set["leader-election-id"] {
		m.LeaderElection.ID = f.leaderElectionID
	}
	if set["leader-election-namespace"] {
		m.LeaderElection.Namespace = f.leaderElectionNS
	}
	if set["max-concurrent-reconciles"] {
		m.Concurrency.Default = int32(max(min(f.concurrency, math.MaxInt32), math.MinInt32))
	}
	if set["channels"] {
		cfg.Channels = config.Channels{Source: config.ChannelSourceBuiltin}
		if f.channelsDir != "" {
			cfg.Channels = config.Channels{Source: config.ChannelSourceDirectory, Directory: f.channelsDir}
		}
	}
	if set["default-channel"] {
		cfg.Runtime.DefaultChannel = f.defaultChannel
	}
}

// zapLevel returns the zap level that logs level and everything more severe.
func zapLevel(level config.LogLevel) zapcore.Level {
	switch level {
	case config.LogLevelError:
		return zapcore.ErrorLevel
	case config.LogLevelDebug:
		return zapcore.DebugLevel // logr's V(1)
	default:
		return zapcore.InfoLevel
	}
}

// run builds the manager, registers the reconcilers and checks, and blocks until the
// manager stops.
func run(f flags, cfg *config.Configuration, logLevel string, setLevel func(config.LogLevel)) error {
	catalog, err := channelCatalog(cfg.Channels, cfg.Runtime.DefaultChannel)
	if err != nil {
		return err
	}
	namespace := operatorNamespace()
	mgr, sealer, err := newManager(f, cfg.Manager, namespace)
	if err != nil {
		return err
	}
	shared := reconcilerOptions{flags: f, cfg: cfg, catalog: catalog, sealer: sealer, namespace: namespace, setLevel: setLevel}
	if err := setupReconcilers(mgr, shared); err != nil {
		return err
	}
	if err := setupChecks(mgr); err != nil {
		return err
	}
	logStart(f, cfg, catalog, logLevel, namespace)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// logStart logs the settings the manager starts with, the file's and the flags' merged.
func logStart(f flags, cfg *config.Configuration, catalog *channels.Catalog, logLevel, namespace string) {
	m, le := cfg.Manager, cfg.Manager.LeaderElection
	setupLog.Info("Starting manager", "version", version.Version, "revision", version.Revision,
		"config", f.configFile, "channels", catalog.Name(),
		"defaultChannel", cfg.Runtime.DefaultChannel, "registryMirror", cfg.Runtime.RegistryMirror,
		"pausedKinds", cfg.Runtime.PausedKinds, "resyncInterval", cfg.Runtime.ResyncInterval.String(),
		"logLevel", logLevel, "policyNamespace", namespace, "operatorID", f.operatorID, "sourceCacheDir", f.sourceCacheDir,
		"trustedNamespaces", cfg.Runtime.Trusted(namespace), "defaultServiceAccountName", cfg.Runtime.DefaultServiceAccountName,
		"concurrency", m.Concurrency.Default, "concurrencyPerKind", m.Concurrency.PerKind,
		"leaderElection", le.Enabled, "cacheSyncPeriod", m.CacheSyncPeriod.String())
}
