package server

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// shutdownTimeout bounds the wait for the calls in flight on SIGTERM, within a Pod's
// default grace period of 30s.
const shutdownTimeout = 20 * time.Second

// Options are the flags every example extension has.
type Options struct {
	// Name is the name of the AddonExtension that registers the extension: the tokens
	// it accepts are for its audience.
	Name string
	// Settings is the settings file.
	Settings string
	// BindAddress is where the server listens.
	BindAddress string
	// TLSCert and TLSKey are the serving certificate and its key.
	TLSCert, TLSKey string
	// SelfSignedCertDir holds a self-signed certificate for TLSNames, generated when
	// missing; it replaces TLSCert and TLSKey.
	SelfSignedCertDir string
	// TLSNames are the comma-separated names of a generated certificate.
	TLSNames string
	// Kubeconfig authenticates the TokenReviews; empty is the in-cluster config.
	Kubeconfig string
	// AllowedUser is the only user whose calls are answered.
	AllowedUser string
	// LogLevel is the lowest level logged: debug, info, warn or error.
	LogLevel string
}

// AddFlags registers the options as flags of fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Name, "name", "", "the name of the AddonExtension that registers this extension (required): "+
		"only tokens for its audience, "+Audience("<name>")+", are accepted")
	fs.StringVar(&o.Settings, "settings", "", "the settings file, YAML or JSON (required); it is read again when it changes")
	fs.StringVar(&o.BindAddress, "bind-address", ":8443", "the address the HTTPS server listens on")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "the PEM serving certificate (with its chain); read again when it changes")
	fs.StringVar(&o.TLSKey, "tls-key", "", "the PEM key of --tls-cert")
	fs.StringVar(&o.SelfSignedCertDir, "self-signed-cert-dir", "", "instead of --tls-cert and --tls-key: a folder with "+
		CertFile+" and "+KeyFile+"; when they do not exist, a self-signed certificate for --tls-names is written there, "+
		"and "+CertFile+" is the AddonExtension's caBundle")
	fs.StringVar(&o.TLSNames, "tls-names", "127.0.0.1,localhost", "the comma-separated IP addresses and DNS names of a "+
		"certificate --self-signed-cert-dir generates, such as <service>.<namespace>.svc")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "the kubeconfig the TokenReviews are created with (create on "+
		"tokenreviews is all they need); empty: the in-cluster config of the Pod's ServiceAccount")
	fs.StringVar(&o.AllowedUser, "allowed-user", DefaultAllowedUser, "the only user whose calls are answered: "+
		"kaddons' ServiceAccount")
	fs.StringVar(&o.LogLevel, "log-level", "info", "the lowest level logged: debug, info, warn or error")
}

// Validate checks the options that need no file.
func (o *Options) Validate() error {
	var problems []string
	if o.Name == "" {
		problems = append(problems, "--name is required")
	}
	if o.Settings == "" {
		problems = append(problems, "--settings is required")
	}
	if o.AllowedUser == "" {
		problems = append(problems, "--allowed-user must not be empty")
	}
	switch {
	case o.SelfSignedCertDir != "" && (o.TLSCert != "" || o.TLSKey != ""):
		problems = append(problems, "set either --self-signed-cert-dir or --tls-cert and --tls-key")
	case o.SelfSignedCertDir == "" && (o.TLSCert == "" || o.TLSKey == ""):
		problems = append(problems, "set --tls-cert and --tls-key, or --self-signed-cert-dir")
	case o.SelfSignedCertDir != "" && len(o.names()) == 0:
		problems = append(problems, "--tls-names must name at least one IP address or DNS name")
	}
	if _, err := o.level(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (o *Options) names() []string {
	var names []string
	for n := range strings.SplitSeq(o.TLSNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

func (o *Options) level() (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return 0, fmt.Errorf("--log-level: %w", err)
	}
	return level, nil
}

// Main runs an extension called program: it parses the flags, reads the settings file
// with parse, and serves handlers (built from the settings) until SIGTERM or SIGINT. It
// exits the process: 2 for bad flags, 1 when the extension cannot start or fails.
func Main[T any](program, about string, parse func([]byte) (T, error), handlers func(*Settings[T], *slog.Logger) Handlers) {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	var opts Options
	opts.AddFlags(fs)
	fs.Usage = func() {
		out := fs.Output()
		_, _ = fmt.Fprintf(out, "%s: %s\n\nUsage: %s --name NAME --settings FILE "+
			"(--tls-cert FILE --tls-key FILE | --self-signed-cert-dir DIR) [flags]\n\n", program, about, program)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := opts.Validate(); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		fs.Usage()
		os.Exit(2)
	}
	level, _ := opts.level()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("extension", opts.Name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, program, opts, log, parse, handlers); err != nil {
		log.Error("exiting", "error", err)
		stop()
		os.Exit(1)
	}
	log.Info("stopped")
}

// run serves until ctx is done.
func run[T any](ctx context.Context, program string, opts Options, log *slog.Logger, parse func([]byte) (T, error),
	handlers func(*Settings[T], *slog.Logger) Handlers) error {
	settings := &Settings[T]{Path: opts.Settings, Parse: parse, Log: log}
	if _, _, err := settings.Get(); err != nil {
		return err
	}
	cfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "kaddons-example-extension-" + program
	reviews, err := authenticationv1client.NewForConfig(cfg)
	if err != nil {
		return err
	}
	tlsConfig, err := serverTLS(opts, log)
	if err != nil {
		return err
	}
	srv := &Server{
		Auth: &Authenticator{Reviewer: ClientTokenReviewer{Client: reviews}, Audience: Audience(opts.Name),
			AllowedUser: opts.AllowedUser},
		Handlers: handlers(settings, log),
		Revision: settings.Revision,
		Log:      log,
	}
	log.Info("starting", "audience", Audience(opts.Name), "allowedUser", opts.AllowedUser, "settings", opts.Settings)
	return Serve(ctx, log, opts.BindAddress, tlsConfig, srv)
}

// restConfig is the config of kubeconfig, or the in-cluster config when it is empty.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig, and not in a Pod: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// serverTLS is the TLS of the server: the certificate of --tls-cert and --tls-key, or
// that of --self-signed-cert-dir, generated when missing.
func serverTLS(opts Options, log *slog.Logger) (*tls.Config, error) {
	certPath, keyPath := opts.TLSCert, opts.TLSKey
	if opts.SelfSignedCertDir != "" {
		var err error
		if certPath, keyPath, err = EnsureSelfSigned(opts.SelfSignedCertDir, opts.names()); err != nil {
			return nil, fmt.Errorf("the self-signed certificate: %w", err)
		}
		log.Info("serving a self-signed certificate", "cert", certPath)
	}
	reloader, err := newCertReloader(certPath, keyPath, log)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: reloader.GetCertificate}, nil
}

// Serve serves handler over TLS on addr until ctx is done, then shuts down gracefully:
// it stops accepting and waits up to 20s for the calls in flight.
func Serve(ctx context.Context, log *slog.Logger, addr string, tlsConfig *tls.Config, handler http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return serve(ctx, log, ln, tlsConfig, handler)
}

// serve is Serve on a listener.
func serve(ctx context.Context, log *slog.Logger, ln net.Listener, tlsConfig *tls.Config, handler http.Handler) error {
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	log.Info("serving", "address", ln.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: waiting for the calls in flight", "timeout", shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
