//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// configFiles are the same settings in both versions of the configuration file: a
// registry mirror and a paused kind, whose effects the cluster shows.
var configFiles = map[string]string{
	"v1alpha1": `apiVersion: config.kaddons.dev/v1alpha1
kind: OperatorConfiguration
concurrency:
  default: 2
  perKind: {CoreDNS: 1}
registryMirror: mirror.e2e.example/k8s
pausedAddonKinds: [Dashboard]
logLevel: debug
trustedNamespaces: ["*"]
`,
	"v1beta1": `apiVersion: config.kaddons.dev/v1beta1
kind: OperatorConfiguration
manager:
  concurrency:
    default: 2
    perKind: {CoreDNS: 1}
runtime:
  imageRegistry:
    mirror: mirror.e2e.example/k8s
  pausedKinds: [Dashboard]
  logLevel: debug
  tenancy:
    trustedNamespaces: ["*"]
`,
}

// TestConfigFileVersions runs the manager with a v1alpha1 and with a v1beta1 file holding
// the same settings, and checks that both behave the same.
func TestConfigFileVersions(t *testing.T) {
	for _, version := range []string{"v1alpha1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(workDir, "config-"+version+".yaml")
			g.Expect(os.WriteFile(path, []byte(configFiles[version]), 0o600)).To(Succeed())

			suiteManager.stop()
			manager := newManager("config-"+version, "--config="+path)
			t.Cleanup(func() {
				manager.stop()
				ensureSomeManager(t)
			})
			g.Expect(manager.start()).To(Succeed())

			ns := newNamespace(t, "config")
			apply(t, coreDNSManifest(ns, newVersion, 1)+fmt.Sprintf(`---
apiVersion: addons.kaddons.dev/v1alpha1
kind: Dashboard
metadata: {name: dashboard, namespace: %s}
spec:
  targetNamespace: %s
`, ns, ns))

			cr := expectReady(t, ns)
			g.Expect(containerImage(getDeployment(g, ns))).To(Equal("mirror.e2e.example/k8s/coredns/coredns:v" + newVersion))
			g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))

			d := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard"}}
			ready := waitAddon(t, d, func(g Gomega, ready metav1.Condition) {
				g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonPaused))
			})
			g.Expect(ready.Message).To(Equal("reconciliation of every Dashboard is paused by the operator configuration"))
			g.Expect(d.Status.Inventory.Objects()).To(BeEmpty())
			g.Expect(manager.logHasLine("Starting manager", path, "mirror.e2e.example/k8s")).To(BeTrue())
		})
	}
}
