package helm

import (
	"strings"
	"testing"
	"testing/fstest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestFormatWidth(t *testing.T) {
	for _, tc := range []struct {
		format string
		ints   []int64
		want   int64
	}{
		{"plain", nil, 0},
		{"%s-%d", nil, 0},
		{"%08d", nil, 8},
		{"%-40s|%.3f", nil, 40},
		{"%12.100f", nil, 100},
		{"%*d", []int64{1000, 1}, 1000},
		{"%.*f", []int64{7}, 7},
		{"%[2]*[1]d", []int64{1, 30}, 30},
		{"100%%", nil, 0},
		{"%99999999999999999999d", nil, 1 << 40},
	} {
		if got := formatWidth(tc.format, tc.ints); got != tc.want {
			t.Errorf("formatWidth(%q, %v) = %d, want %d", tc.format, tc.ints, got, tc.want)
		}
	}
}

// TestFunctionBudget checks that templates whose functions make more than
// maxFunctionBytes in all stop there, though each call and the rendered output stay
// under their caps.
func TestFunctionBudget(t *testing.T) {
	defer func(v int64) { maxFunctionBytes = v }(maxFunctionBytes)
	maxFunctionBytes = 1 << 20
	fsys := fstest.MapFS{
		"chart/Chart.yaml": {Data: []byte("apiVersion: v2\nname: test\nversion: 0.1.0\n")},
		// Each call makes 10 KiB, which the template drops: 200 of them pass 1 MiB.
		"chart/templates/loop.yaml": {Data: []byte(`{{ range until 200 }}{{ $_ := repeat 10240 "x" | upper }}{{ end }}`)},
	}
	res, err := Render(t.Context(), Request{Chart: fsys, Dir: "chart", Key: "test/0.1.0", ReleaseName: "demo", Namespace: "apps"})
	if err == nil {
		t.Fatalf("rendered %d objects", len(res.Objects))
	}
	if ReasonOf(err) != addonsv1alpha1.ReasonPackageTooLarge || !strings.Contains(err.Error(), "the template functions made more than 1048576 bytes") {
		t.Errorf("error %v, want PackageTooLarge on the function budget", err)
	}
}

func TestSubchartArchive(t *testing.T) {
	for name, want := range map[string]bool{
		"charts/redis-1.0.0.tgz":              true,
		"charts/app/charts/redis-1.0.0.tgz":   true,
		"charts/_skipped.tgz":                 false,
		"charts/.hidden.tgz":                  false,
		"files/redis.tgz":                     false,
		"charts/app/files/redis.tgz":          false,
		"charts/redis-1.0.0.tar.gz":           false,
		"charts/app/charts/redis/values.yaml": false,
	} {
		if got := subchartArchive(name); got != want {
			t.Errorf("subchartArchive(%q) = %v, want %v", name, got, want)
		}
	}
}
