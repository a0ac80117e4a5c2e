// Package charttest locates the upstream Helm charts that tests render and apply
// unmodified: charts in the archives of Go modules, in the module cache.
package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The upstream chart the tests render unmodified: metrics-server's own chart, in the
// archive of its Go module (charts/metrics-server, chart 3.12.2 of metrics-server
// 0.7.2), located in the module cache. The sum pins the archive as go.sum would; the
// module is no dependency of kaddons, so that its go.mod stays as it is.
const (
	MetricsServerModule  = "sigs.k8s.io/metrics-server"
	MetricsServerVersion = "v0.8.0"
	MetricsServerSum     = "h1:Zlsi3sBWEtFKCD3+xSysThvXyLQ363rUAlqpnsY5JwI="
	// MetricsServerChart is the chart's folder in the module.
	MetricsServerChart = "charts/metrics-server"
	// MetricsServerChartVersion is the version in the chart's Chart.yaml.
	MetricsServerChartVersion = "3.12.2"
)

// ModuleDir returns the folder of module@version in the module cache, downloading it
// from the module proxy when the cache does not hold it yet (with a warm cache, no
// network), and fails t when it cannot. See Download.
func ModuleDir(t testing.TB, module, version, sum string) string {
	t.Helper()
	dir, err := Download(module, version, sum)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Download returns the folder of module@version in the module cache, downloading it from
// the module proxy when the cache does not hold it yet. It runs `go mod download` outside
// any module, so that it neither reads nor touches kaddons' go.mod, and checks the
// archive's hash against sum.
func Download(module, version, sum string) (string, error) {
	dir, err := os.MkdirTemp("", "charttest-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	if jsonErr := json.Unmarshal(out, &info); jsonErr != nil || err != nil || info.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %v %s %s", module, version, err, info.Error, stderr.String())
	}
	if info.Sum != sum {
		return "", fmt.Errorf("%s@%s has the hash %s, want %s", module, version, info.Sum, sum)
	}
	return info.Dir, nil
}

// MetricsServer returns the module folder that holds metrics-server's chart at
// MetricsServerChart, and the chart's folder on disk.
func MetricsServer(t testing.TB) (module, chart string) {
	t.Helper()
	module = ModuleDir(t, MetricsServerModule, MetricsServerVersion, MetricsServerSum)
	return module, filepath.Join(module, MetricsServerChart)
}
