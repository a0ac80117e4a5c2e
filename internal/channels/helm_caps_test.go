package channels

import (
	"testing"

	"github.com/kaddons/kaddons/internal/channels/helm"
)

// TestHelmChartCapsArePackageCaps checks that a Helm chart package is capped as any
// package: the chart renderer cannot import this package (the catalog will import it),
// so it holds its own copy of the caps.
func TestHelmChartCapsArePackageCaps(t *testing.T) {
	if helm.MaxChartBytes != MaxPackageBytes || helm.MaxChartFiles != MaxPackageFiles || helm.MaxObjects != MaxPlainPackageObjects {
		t.Errorf("helm caps %d bytes, %d files, %d objects; package caps %d bytes, %d files, %d objects",
			helm.MaxChartBytes, helm.MaxChartFiles, helm.MaxObjects, MaxPackageBytes, MaxPackageFiles, MaxPlainPackageObjects)
	}
}
