package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"
)

// FuzzLoad feeds arbitrary files to Load. A file is either refused with an error that
// names it, or loads into a configuration that is valid, already defaulted, and written
// back in either version loads again unchanged.
func FuzzLoad(f *testing.F) {
	for _, file := range []string{
		"testdata/minimal.yaml",
		"testdata/v1alpha1.yaml",
		"testdata/v1beta1.yaml",
		"../../config/manager/controller_manager_config.yaml",
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	const alpha = "apiVersion: config.kaddons.dev/v1alpha1\nkind: OperatorConfiguration\n"
	for _, seed := range []string{
		alpha + "leaderElection:\n  leaseDurration: 30s\n",
		alpha + "logLevel: debug\nlogLevel: info\n",
		alpha + "leaderElection:\n  leaseDuration: soon\n",
		alpha + "concurrency:\n  default: 1\n  perKind:\n    CoreDNS: -1\n",
		alpha + "---\n" + alpha,
		"- a list\n",
	} {
		f.Add([]byte(seed))
	}
	kinds := []string{"CoreDNS", "Dashboard", "MetricsServer", "NodeLocalDNS"}

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path, WithKinds(kinds...))
		if err != nil {
			if c != nil {
				t.Fatalf("Load returned a configuration with the error %v", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file %s: %v", path, err)
			}
			return
		}

		if errs := Validate(c); len(errs) > 0 {
			t.Fatalf("Load accepted an invalid configuration: %v", errs.ToAggregate())
		}
		defaulted := c.DeepCopy()
		Default(defaulted)
		if diff := cmp.Diff(c, defaulted); diff != "" {
			t.Fatalf("Load returned a configuration that defaulting changes (-loaded +defaulted):\n%s", diff)
		}

		for version, file := range map[string]any{"v1alpha1": ToV1alpha1(c), "v1beta1": ToV1beta1(c)} {
			out, err := yaml.Marshal(file)
			if err != nil {
				t.Fatalf("%s: %v", version, err)
			}
			again := filepath.Join(dir, version+".yaml")
			if err := os.WriteFile(again, out, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Load(again, WithKinds(kinds...))
			if err != nil {
				t.Fatalf("the configuration written as %s does not load: %v\n%s", version, err, out)
			}
			// An empty list or map is written as nothing and read back as nil.
			if diff := cmp.Diff(c, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("the configuration changed through %s (-loaded +reloaded):\n%s\n%s", version, diff, out)
			}
		}
	})
}
