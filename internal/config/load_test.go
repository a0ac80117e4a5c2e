package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

// sample is the configuration that testdata/v1alpha1.yaml and testdata/v1beta1.yaml hold.
func sample() *Configuration {
	return &Configuration{
		Manager: Manager{
			Metrics:                Metrics{BindAddress: ":8443", Secure: ptr.To(false)},
			HealthProbeBindAddress: ":9081",
			LeaderElection: LeaderElection{
				Enabled:       true,
				ID:            "kaddons-leader",
				Namespace:     "kaddons-system",
				LeaseDuration: 30 * time.Second,
				RenewDeadline: 20 * time.Second,
				RetryPeriod:   5 * time.Second,
			},
			CacheSyncPeriod: time.Hour,
			Concurrency: Concurrency{
				Default: 2,
				PerKind: map[string]int32{"CoreDNS": 1, "MetricsServer": 3, "Dashboard": 1, "NodeLocalDNS": 8},
			},
		},
		Channels: Channels{Source: ChannelSourceDirectory, Directory: "/var/lib/kaddons/channels"},
		Runtime: Runtime{
			DefaultChannel: "rapid",
			RegistryMirror: "registry.example.com:5000/mirror/k8s",
			PausedKinds:    []string{"Dashboard"},
			ResyncInterval: 15 * time.Minute,
			LogLevel:       LogLevelDebug,
		},
	}
}

func TestLoadSamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		want *Configuration
	}{
		{file: "testdata/v1alpha1.yaml", want: sample()},
		{file: "testdata/v1beta1.yaml", want: sample()},
		{file: "testdata/minimal.yaml", want: defaulted()},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Load(tc.file, WithKinds("CoreDNS", "Dashboard", "MetricsServer", "NodeLocalDNS"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Load(%s) mismatch (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

// TestLoadShippedFiles loads the file config/manager ships and every example file in
// docs/configuration.md, so that neither drifts from the API.
func TestLoadShippedFiles(t *testing.T) {
	files := []string{"../../config/manager/controller_manager_config.yaml"}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	dir := t.TempDir()
	for i, m := range examples {
		if !strings.Contains(m[1], "kind: OperatorConfiguration") {
			continue
		}
		path := filepath.Join(dir, fmt.Sprintf("docs-example-%d.yaml", i))
		if err := os.WriteFile(path, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	if len(files) < 3 {
		t.Fatalf("found %d example files in docs/configuration.md, want one per version", len(files)-1)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Error(err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	const (
		alpha = "apiVersion: config.kaddons.dev/v1alpha1\nkind: OperatorConfiguration\n"
		beta  = "apiVersion: config.kaddons.dev/v1beta1\nkind: OperatorConfiguration\n"
	)
	for _, tc := range []struct {
		name string
		file string
		want string // FILE stands for the file's path
	}{
		{
			name: "unknown field",
			file: alpha + "metrics:\n  port: 8443\n",
			want: `configuration file FILE: unknown field "metrics.port"`,
		},
		{
			name: "misspelt field",
			file: alpha + "leaderElection:\n  leaseDurration: 30s\n",
			want: `configuration file FILE: unknown field "leaderElection.leaseDurration" (did you mean "leaderElection.leaseDuration"?)`,
		},
		{
			name: "field in the wrong case",
			file: beta + "manager:\n  LeaderElection:\n    enabled: true\n",
			want: `configuration file FILE: unknown field "manager.LeaderElection" (did you mean "manager.leaderElection"?)`,
		},
		{
			name: "v1beta1 field in a v1alpha1 file",
			file: alpha + "runtime:\n  logLevel: debug\n",
			want: `configuration file FILE: unknown field "runtime"`,
		},
		{
			name: "several unknown fields",
			file: alpha + "logLevl: debug\nmetrics:\n  secur: true\n",
			want: `configuration file FILE: unknown field "logLevl" (did you mean "logLevel"?), ` +
				`unknown field "metrics.secur" (did you mean "metrics.secure"?)`,
		},
		{
			name: "duplicate field",
			file: alpha + "logLevel: debug\nlogLevel: info\n",
			want: `configuration file FILE: not valid YAML: yaml: unmarshal errors: line 4: key "logLevel" already set in map`,
		},
		{
			name: "string for a boolean",
			file: alpha + "leaderElection:\n  leaderElect: maybe\n",
			want: `configuration file FILE: leaderElection.leaderElect: Invalid value: "maybe": must be true or false`,
		},
		{
			name: "number for a duration",
			file: beta + "manager:\n  leaderElection:\n    leaseDuration: 30\n",
			want: `configuration file FILE: manager.leaderElection.leaseDuration: Invalid value: 30: must be a duration, such as "15s", "10m" or "1h30m"`,
		},
		{
			name: "malformed duration",
			file: alpha + "syncPeriod: 1 hour\n",
			want: `configuration file FILE: syncPeriod: Invalid value: "1 hour": must be a duration, such as "15s", "10m" or "1h30m"`,
		},
		{
			name: "string for a number in a map",
			file: alpha + "concurrency:\n  perKind:\n    CoreDNS: two\n",
			want: `configuration file FILE: concurrency.perKind[CoreDNS]: Invalid value: "two": must be a whole number that fits in 32 bits`,
		},
		{
			name: "number too large",
			file: beta + "manager:\n  concurrency:\n    default: 3000000000\n",
			want: `configuration file FILE: manager.concurrency.default: Invalid value: 3000000000: must be a whole number that fits in 32 bits`,
		},
		{
			name: "string for a list",
			file: beta + "runtime:\n  pausedKinds: CoreDNS\n",
			want: `configuration file FILE: runtime.pausedKinds: Invalid value: "CoreDNS": must be a list`,
		},
		{
			name: "list for a mapping",
			file: alpha + "metrics:\n- bindAddress: :8443\n",
			want: `configuration file FILE: metrics: Invalid value: [{"bindAddress":":8443"}]: must be a mapping`,
		},
		{
			name: "unknown apiVersion",
			file: "apiVersion: config.kaddons.dev/v1\nkind: OperatorConfiguration\n",
			want: `configuration file FILE: apiVersion "config.kaddons.dev/v1" is not supported; supported: ` +
				`kind OperatorConfiguration with apiVersion config.kaddons.dev/v1alpha1 or config.kaddons.dev/v1beta1`,
		},
		{
			name: "unknown kind",
			file: "apiVersion: config.kaddons.dev/v1alpha1\nkind: OperatorConfig\n",
			want: `configuration file FILE: kind "OperatorConfig" is not supported; supported: ` +
				`kind OperatorConfiguration with apiVersion config.kaddons.dev/v1alpha1 or config.kaddons.dev/v1beta1`,
		},
		{
			name: "no apiVersion",
			file: "kind: OperatorConfiguration\nlogLevel: debug\n",
			want: `configuration file FILE: apiVersion and kind must be set; supported: ` +
				`kind OperatorConfiguration with apiVersion config.kaddons.dev/v1alpha1 or config.kaddons.dev/v1beta1`,
		},
		{
			name: "apiVersion not a string",
			file: "apiVersion: 1\nkind: OperatorConfiguration\n",
			want: `configuration file FILE: apiVersion: Invalid value: 1: must be a string`,
		},
		{
			name: "empty file",
			file: "# nothing yet\n",
			want: `configuration file FILE: the file is empty`,
		},
		{
			name: "two documents",
			file: alpha + "---\n" + alpha,
			want: `configuration file FILE: the file holds 2 YAML documents; it must hold one`,
		},
		{
			name: "not a mapping",
			file: "- apiVersion: config.kaddons.dev/v1alpha1\n",
			want: `configuration file FILE: the file must be a YAML mapping of apiVersion, kind and the settings`,
		},
		{
			name: "not YAML",
			file: alpha + "metrics: [\n",
			want: `configuration file FILE: not valid YAML: yaml: line 3: did not find expected node content`,
		},
		{
			name: "invalid value in v1alpha1 names the v1alpha1 field",
			file: alpha + "leaderElection:\n  leaseDuration: 1s\n",
			want: `configuration file FILE is invalid: leaderElection.leaseDuration: Invalid value: "1s": must be greater than renewDeadline (10s)`,
		},
		{
			name: "invalid value in v1beta1 names the v1beta1 field",
			file: beta + "manager:\n  leaderElection:\n    leaseDuration: 1s\n",
			want: `configuration file FILE is invalid: manager.leaderElection.leaseDuration: Invalid value: "1s": must be greater than renewDeadline (10s)`,
		},
		{
			name: "renamed fields in v1alpha1",
			file: alpha + "leaderElection:\n  resourceName: Leader\nregistryMirror: http://mirror\npausedAddonKinds: [Dashbord]\n",
			want: `configuration file FILE is invalid: [leaderElection.resourceName: Invalid value: "Leader": a lowercase RFC 1123 subdomain ` +
				`must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), ` +
				`registryMirror: Invalid value: "http://mirror": must be a registry host with an optional port and path, ` +
				`such as registry.example.com/mirror, without a scheme, tag, digest or trailing slash, ` +
				`pausedAddonKinds[0]: Unsupported value: "Dashbord": supported values: "CoreDNS", "Dashboard"]`,
		},
		{
			name: "renamed fields in v1beta1",
			file: beta + "manager:\n  leaderElection:\n    id: Leader\nruntime:\n  imageRegistry:\n    mirror: http://mirror\n  pausedKinds: [Dashbord]\n",
			want: `configuration file FILE is invalid: [manager.leaderElection.id: Invalid value: "Leader": a lowercase RFC 1123 subdomain ` +
				`must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character ` +
				`(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), ` +
				`runtime.imageRegistry.mirror: Invalid value: "http://mirror": must be a registry host with an optional port and path, ` +
				`such as registry.example.com/mirror, without a scheme, tag, digest or trailing slash, ` +
				`runtime.pausedKinds[0]: Unsupported value: "Dashbord": supported values: "CoreDNS", "Dashboard"]`,
		},
		{
			name: "channels directory with the Builtin source",
			file: alpha + "manifests:\n  source: Builtin\n  directory: /channels\n",
			want: `configuration file FILE is invalid: manifests.directory: Forbidden: must be empty when source is Builtin`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kaddons.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, WithKinds("CoreDNS", "Dashboard"))
			want := strings.ReplaceAll(tc.want, "FILE", path)
			if err == nil || err.Error() != want {
				t.Errorf("Load() error =\n  %v\nwant\n  %s", err, want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := Load(path)
	want := "reading the configuration file: open " + path + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("Load() error = %v, want %s", err, want)
	}
}

func TestAPIVersions(t *testing.T) {
	want := []string{"config.kaddons.dev/v1alpha1", "config.kaddons.dev/v1beta1"}
	if diff := cmp.Diff(want, APIVersions()); diff != "" {
		t.Errorf("APIVersions() mismatch (-want +got):\n%s", diff)
	}
}
