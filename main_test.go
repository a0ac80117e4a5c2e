package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/config"
	"github.com/kaddons/kaddons/internal/engine"
)

func TestChannelSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	directory := func(path string) config.Channels {
		return config.Channels{Source: config.ChannelSourceDirectory, Directory: path}
	}
	for _, tc := range []struct {
		name     string
		src      config.Channels
		wantDir  string
		wantName string
		wantErr  string
	}{
		{name: "a directory", src: directory(dir), wantDir: dir, wantName: dir},
		{name: "a missing directory", src: directory(filepath.Join(dir, "missing")), wantErr: "is not a directory"},
		{name: "a file", src: directory(file), wantErr: "is not a directory"},
		{name: "builtin is embedded", src: config.Channels{Source: config.ChannelSourceBuiltin}, wantName: "builtin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := channelCatalog(tc.src, "rapid")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("channelCatalog(%+v) error = %v, want %q", tc.src, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Dir() != tc.wantDir || got.Name() != tc.wantName || got.DefaultChannel() != "rapid" {
				t.Fatalf("channelCatalog(%+v): Dir() = %q, Name() = %q, DefaultChannel() = %q; want %q, %q, rapid",
					tc.src, got.Dir(), got.Name(), got.DefaultChannel(), tc.wantDir, tc.wantName)
			}
		})
	}

	// The built-in channels work from a folder without channels/, as in the image.
	t.Chdir(t.TempDir())
	builtin, err := channelCatalog(config.Channels{Source: config.ChannelSourceBuiltin}, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := builtin.Resolve("coredns", addonv1alpha1.CommonSpec{})
	if err != nil {
		t.Fatalf("the built-in stable channel does not resolve coredns: %v", err)
	}
	if out, err := builtin.Render(r); err != nil || !strings.Contains(out, "kind: Deployment") {
		t.Fatalf("rendering coredns %s from the built-in channels: %v\n%s", r.Version, err, out)
	}
}

// parseFlags parses args as the manager's command line.
func parseFlags(t *testing.T, args ...string) (flags, map[string]bool) {
	t.Helper()
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var f flags
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f, explicitFlags(fs)
}

const (
	alphaFile = `apiVersion: config.kaddons.dev/v1alpha1
kind: OperatorConfiguration
metrics: {bindAddress: ":8443", secure: false}
health: {healthProbeBindAddress: ":9081"}
leaderElection: {leaderElect: true, resourceName: from-file, resourceNamespace: file-ns, leaseDuration: 30s}
concurrency: {default: 2, perKind: {CoreDNS: 8}}
manifests: {directory: /from/file}
defaultChannel: rapid
logLevel: debug
`
	betaFile = `apiVersion: config.kaddons.dev/v1beta1
kind: OperatorConfiguration
manager:
  metrics: {bindAddress: ":8443", secure: false}
  healthProbeBindAddress: ":9081"
  leaderElection: {enabled: true, id: from-file, namespace: file-ns, leaseDuration: 30s}
  concurrency: {default: 2, perKind: {CoreDNS: 8}}
channels: {directory: /from/file}
runtime:
  defaultChannel: rapid
  logLevel: debug
`
)

// fromFile sets what alphaFile and betaFile set.
func fromFile(c *config.Configuration) {
	c.Manager.Metrics = config.Metrics{BindAddress: ":8443", Secure: ptr.To(false)}
	c.Manager.HealthProbeBindAddress = ":9081"
	c.Manager.LeaderElection.Enabled = true
	c.Manager.LeaderElection.ID = "from-file"
	c.Manager.LeaderElection.Namespace = "file-ns"
	c.Manager.LeaderElection.LeaseDuration = 30 * time.Second
	c.Manager.Concurrency = config.Concurrency{Default: 2, PerKind: map[string]int32{"CoreDNS": 8}}
	c.Channels = config.Channels{Source: config.ChannelSourceDirectory, Directory: "/from/file"}
	c.Runtime.DefaultChannel = "rapid"
	c.Runtime.LogLevel = config.LogLevelDebug
}

func TestConfigure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		want    func(*config.Configuration) // applied to the defaults
		wantErr string                      // FILE stands for the file's path
	}{
		{name: "no file, no flags: the defaults", want: func(*config.Configuration) {}},
		{
			name: "no file: the flags",
			args: []string{"--metrics-bind-address=:8080", "--metrics-secure=false", "--leader-elect",
				"--channels=/from/flag", "--max-concurrent-reconciles=1", "--default-channel=rapid"},
			want: func(c *config.Configuration) {
				c.Manager.Metrics = config.Metrics{BindAddress: ":8080", Secure: ptr.To(false)}
				c.Manager.LeaderElection.Enabled = true
				c.Manager.Concurrency.Default = 1
				c.Channels = config.Channels{Source: config.ChannelSourceDirectory, Directory: "/from/flag"}
				c.Runtime.DefaultChannel = "rapid"
			},
		},
		{name: "a v1alpha1 file, no flags: the file", file: alphaFile, want: fromFile},
		{name: "a v1beta1 file, no flags: the file", file: betaFile, want: fromFile},
		{
			name: "flags given override the file, even with their default values",
			file: alphaFile,
			args: []string{"--metrics-bind-address=:9443", "--metrics-secure=true", "--health-probe-bind-address=0",
				"--leader-election-id=from-flag", "--leader-election-namespace=flag-ns",
				"--max-concurrent-reconciles=3", "--default-channel=stable", "--enable-http2"},
			want: func(c *config.Configuration) {
				fromFile(c)
				c.Manager.Metrics = config.Metrics{BindAddress: ":9443", Secure: ptr.To(true)}
				c.Manager.HealthProbeBindAddress = "0"
				c.Manager.LeaderElection.ID = "from-flag"
				c.Manager.LeaderElection.Namespace = "flag-ns"
				c.Manager.Concurrency.Default = 3 // perKind still applies to CoreDNS
				c.Runtime.DefaultChannel = "stable"
			},
		},
		{
			name: "--leader-elect=false overrides leader election in the file",
			file: betaFile,
			args: []string{"--leader-elect=false"},
			want: func(c *config.Configuration) {
				fromFile(c)
				c.Manager.LeaderElection.Enabled = false
			},
		},
		{
			name: "an empty --channels selects the built-in channels over the file's directory",
			file: alphaFile,
			args: []string{"--channels="},
			want: func(c *config.Configuration) {
				fromFile(c)
				c.Channels = config.Channels{Source: config.ChannelSourceBuiltin}
			},
		},
		{
			name:    "an invalid flag is named",
			args:    []string{"--max-concurrent-reconciles=0"},
			wantErr: "invalid command-line flags: --max-concurrent-reconciles: Invalid value: 0: must be at least 1",
		},
		{
			name: "an invalid flag over a file is named",
			file: alphaFile,
			args: []string{"--metrics-bind-address=8443", "--default-channel=../x"},
			wantErr: `invalid command-line flags: [--metrics-bind-address: Invalid value: "8443": must be "0" (off) or host:port, such as ":8443", ` +
				`--default-channel: Invalid value: "../x": must be a channel name: letters, digits, '.', '_', '+' or '-', at most 63 characters]`,
		},
		{
			name: "a loopback --profiler-address",
			args: []string{"--profiler-address=127.0.0.1:6060"},
			want: func(*config.Configuration) {},
		},
		{
			name: "a --profiler-address on every interface is named with the rule",
			args: []string{"--profiler-address=:6060", "--max-concurrent-reconciles=0"},
			wantErr: `invalid command-line flags: [--max-concurrent-reconciles: Invalid value: 0: must be at least 1, ` +
				`--profiler-address: Invalid value: ":6060": the host must be a loopback address: pprof has no authentication, ` +
				`so it must listen on a loopback host (127.0.0.0/8, ::1 or localhost), such as 127.0.0.1:6060, ` +
				`and be reached through kubectl port-forward]`,
		},
		{
			name:    "an invalid file names the file and the field",
			file:    alphaFile + "resyncInterval: 1s\n",
			wantErr: `configuration file FILE is invalid: resyncInterval: Invalid value: "1s": must be 0 (off) or at least 10s`,
		},
		{
			name:    "a misspelt field names the file and the field",
			file:    alphaFile + "defaultChanel: stable\n",
			wantErr: `configuration file FILE: unknown field "defaultChanel" (did you mean "defaultChannel"?)`,
		},
		{
			name:    "a kind the manager does not run",
			file:    betaFile + "  pausedKinds: [Dashboard]\n",
			wantErr: `configuration file FILE is invalid: runtime.pausedKinds[0]: Unsupported value: "Dashboard": supported values: "CoreDNS"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			path := ""
			if tc.file != "" {
				path = filepath.Join(t.TempDir(), "kaddons.yaml")
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"--config=" + path}, args...)
			}
			f, set := parseFlags(t, args...)
			got, err := configure(f, set, []string{"CoreDNS"})
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "FILE", path)
				if err == nil || err.Error() != want {
					t.Fatalf("configure() error =\n  %v\nwant\n  %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := &config.Configuration{}
			config.Default(want)
			tc.want(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("configure() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlagDefaults checks that every flag's default is the configuration's default, so
// that leaving a setting out of the file and not giving its flag mean the same.
func TestFlagDefaults(t *testing.T) {
	f, _ := parseFlags(t)
	all := map[string]bool{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	(&flags{}).bind(fs)
	fs.VisitAll(func(fl *flag.Flag) { all[fl.Name] = true })

	fromFlags := &config.Configuration{}
	applyFlags(fromFlags, f, all)
	config.Default(fromFlags)
	defaults := &config.Configuration{}
	config.Default(defaults)
	if diff := cmp.Diff(defaults, fromFlags); diff != "" {
		t.Errorf("flag defaults differ from the configuration's (-config +flags):\n%s", diff)
	}
	if config.DefaultChannel != channels.DefaultChannel {
		t.Errorf("config.DefaultChannel = %q, channels.DefaultChannel = %q", config.DefaultChannel, channels.DefaultChannel)
	}
	if config.DefaultConcurrency != engine.DefaultMaxConcurrentReconciles {
		t.Errorf("config.DefaultConcurrency = %d, engine.DefaultMaxConcurrentReconciles = %d",
			config.DefaultConcurrency, engine.DefaultMaxConcurrentReconciles)
	}
}

func TestZapLevel(t *testing.T) {
	for _, tc := range []struct {
		level config.LogLevel
		want  zapcore.Level
	}{
		{level: config.LogLevelError, want: zapcore.ErrorLevel},
		{level: config.LogLevelInfo, want: zapcore.InfoLevel},
		{level: config.LogLevelDebug, want: zapcore.DebugLevel},
	} {
		if got := zapLevel(tc.level); got != tc.want {
			t.Errorf("zapLevel(%q) = %v, want %v", tc.level, got, tc.want)
		}
	}
}

// TestCacheSyncedReadyCheck runs the ready check against a real informer cache whose API
// server holds back the first list: the check fails before the cache starts and while it
// waits for that list, and passes once the list is answered and the informer has synced.
func TestCacheSyncedReadyCheck(t *testing.T) {
	release := make(chan struct{})
	lists := make(chan struct{}, 16)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/configmaps" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		switch {
		case q.Get("watch") != "" && q.Get("sendInitialEvents") == "true":
			// No streaming lists here: the reflector falls back to list and watch.
			http.Error(w, "streaming lists are not served", http.StatusBadRequest)
		case q.Get("watch") != "":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			lists <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`))
		}
	}))
	t.Cleanup(server.Close)
	// Unblock a list still held when the test ends, so that the server can close.
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	c, err := cache.New(&rest.Config{Host: server.URL}, cache.Options{Scheme: scheme, Mapper: mapper, HTTPClient: server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	check := cacheSynced(c)
	probe := func() error {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/readyz/readyz", nil)
		return check(req)
	}

	if err := probe(); err == nil || !strings.Contains(err.Error(), "have not synced") {
		t.Fatalf("before the cache starts: check = %v, want an error saying the caches have not synced", err)
	}
	go func() { _ = c.Start(ctx) }()
	select {
	case <-lists:
	case <-time.After(30 * time.Second):
		t.Fatal("the informer never listed ConfigMaps")
	}
	if err := probe(); err == nil {
		t.Fatal("while the first list is held back: check passed, want an error")
	}
	close(release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probe()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the list was answered: check = %v, want it to pass", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestValidateProfilerAddress: pprof listens only on a loopback host. An empty host
// (":6060") and 0.0.0.0 listen on every interface; a routable address or a name on
// whatever it is or resolves to.
func TestValidateProfilerAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantErr string // "" when the address is accepted
	}{
		{addr: ""}, // off
		{addr: "127.0.0.1:6060"},
		{addr: "127.1.2.3:6060"},
		{addr: "[::1]:6060"},
		{addr: "[::ffff:127.0.0.1]:6060"},
		{addr: "localhost:6060"},
		{addr: "LOCALHOST:6060"},
		{addr: "127.0.0.1:0"},
		{addr: ":6060", wantErr: "the host must be a loopback address"},
		{addr: "0.0.0.0:6060", wantErr: "the host must be a loopback address"},
		{addr: "[::]:6060", wantErr: "the host must be a loopback address"},
		{addr: "10.0.0.5:6060", wantErr: "the host must be a loopback address"},
		{addr: "[2001:db8::1]:6060", wantErr: "the host must be a loopback address"},
		{addr: "[::ffff:10.0.0.5]:6060", wantErr: "the host must be a loopback address"},
		{addr: "kaddons.example.com:6060", wantErr: "the host must be a loopback address"},
		{addr: "localhost.example.com:6060", wantErr: "the host must be a loopback address"},
		{addr: "127.0.0.1", wantErr: "must be host:port"},
		{addr: "::1:6060", wantErr: "must be host:port"},
		{addr: "127.0.0.1:pprof", wantErr: "the port must be a number from 0 to 65535"},
		{addr: "127.0.0.1:70000", wantErr: "the port must be a number from 0 to 65535"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err := validateProfilerAddress(tc.addr)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validateProfilerAddress(%q) = %v, want nil", tc.addr, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validateProfilerAddress(%q) = nil, want %q", tc.addr, tc.wantErr)
			}
			msg := err.Error()
			for _, want := range []string{"--profiler-address", tc.wantErr, "loopback host (127.0.0.0/8, ::1 or localhost)"} {
				if !strings.Contains(msg, want) {
					t.Errorf("validateProfilerAddress(%q) = %q, want it to contain %q", tc.addr, msg, want)
				}
			}
		})
	}
}

// TestManagerRefusesARemoteProfilerAddress runs the manager's main with
// --profiler-address=0.0.0.0:6060, in a process of its own: it exits non-zero before it
// contacts any cluster, saying on stderr which flag and what rule.
func TestManagerRefusesARemoteProfilerAddress(t *testing.T) {
	if os.Getenv("KADDONS_RUN_MAIN") == "1" {
		os.Args = []string{"manager", "--profiler-address=0.0.0.0:6060"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestManagerRefusesARemoteProfilerAddress$")
	cmd.Env = append(os.Environ(), "KADDONS_RUN_MAIN=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the manager ended with %v, want a non-zero exit; stderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"--profiler-address", "0.0.0.0:6060", "the host must be a loopback address",
		"loopback host (127.0.0.0/8, ::1 or localhost)"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr.String())
		}
	}
}
