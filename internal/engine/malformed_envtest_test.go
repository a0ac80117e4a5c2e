package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// heapBound is the most the test process's heap (the suite's manager included) may grow
// while a test feeds the operator an alias bomb: expanded, the bomb takes tens of GiB.
const heapBound = 256 << 20

// aliasBomb returns a YAML mapping, indented by indent, of nine anchors l0..l8: l0 a list
// of nine scalars, every further one a list of nine aliases to the one before. Expanded,
// l8 holds 9^9 (387 420 489) scalars; as written, it takes under a kilobyte.
func aliasBomb(indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n", indent)
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "%sl%d: &l%d [%s]\n", indent, i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), ", "))
	}
	return b.String()
}

// watchHeap fails the test process if its heap grows by heapBound or more until the
// returned function is called, which reports the peak growth. A panic is the only way
// to stop the expansion of a bomb in the manager before it takes the machine's memory.
func watchHeap(t *testing.T) (stop func() uint64) {
	t.Helper()
	var start runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&start)
	done := make(chan struct{})
	var peak atomic.Uint64
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc <= start.HeapAlloc {
				continue
			}
			growth := m.HeapAlloc - start.HeapAlloc
			if growth > peak.Load() {
				peak.Store(growth)
			}
			if growth >= heapBound {
				panic(fmt.Sprintf("%s: the heap grew by %d MiB, past the bound of %d MiB", t.Name(), growth>>20, heapBound>>20))
			}
		}
	}()
	return func() uint64 {
		close(done)
		t.Logf("heap growth peaked at %d KiB", peak.Load()>>10)
		return peak.Load()
	}
}

// TestMalformedPackagesReachTheCondition adds to the suite's channels directory a channel
// file that is not YAML, one that lists a version without a package, a package holding a
// file that is not YAML, and a package holding a nine-level alias bomb, and points an
// add-on at each. The suite's manager ends each add-on with the Stalled reason the engine
// gives (read back from the API server), in Ready and in Stalled, with a message that
// names the channel or the file; nothing is applied, and the heap of the test process
// (the manager's included) stays bounded.
func TestMalformedPackagesReachTheCondition(t *testing.T) {
	for _, tc := range []struct {
		name string
		// breakSource adds the malformed files to the suite's channels directory, named
		// after suffix, and points cr at them.
		breakSource func(t *testing.T, suffix string, cr *addonsv1alpha1.CoreDNS)
		reason      string
		// message is what Ready and Stalled say; SUFFIX stands for suffix.
		message string
	}{
		{
			name: "a channel file that is not YAML",
			breakSource: func(t *testing.T, suffix string, cr *addonsv1alpha1.CoreDNS) {
				cr.Spec.Channel = "malformed-" + suffix
				addToSource(t, cr.Spec.Channel, "manifests:\n- name: coredns\n  version: [1.12.1\n")
			},
			reason:  addonsv1alpha1.ReasonChannelNotFound,
			message: `channel "malformed-SUFFIX" is not a valid channel file`,
		},
		{
			name: "a channel file that lists a version without a package",
			breakSource: func(t *testing.T, suffix string, cr *addonsv1alpha1.CoreDNS) {
				cr.Spec.Channel = "missing-" + suffix
				addToSource(t, cr.Spec.Channel, "manifests:\n- name: coredns\n  version: 9.9.9-"+suffix+"\n")
			},
			reason:  addonsv1alpha1.ReasonVersionNotFound,
			message: `coredns has no version "9.9.9-SUFFIX"`,
		},
		{
			name: "a package file that is not YAML",
			breakSource: func(t *testing.T, suffix string, cr *addonsv1alpha1.CoreDNS) {
				cr.Spec.Version = newVersion + "-malformed-" + suffix
				pkg := copyPackage(t, cr.Spec.Version)
				writeFile(t, filepath.Join(pkg, "service.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: kube-dns\n")
			},
			reason:  addonsv1alpha1.ReasonRenderFailed,
			message: "building package coredns/" + newVersion + "-malformed-SUFFIX: accumulating resources from 'service.yaml'",
		},
		{
			name: "a package file that is an alias bomb",
			breakSource: func(t *testing.T, suffix string, cr *addonsv1alpha1.CoreDNS) {
				cr.Spec.Version = newVersion + "-laughs-" + suffix
				pkg := copyPackage(t, cr.Spec.Version)
				writeFile(t, filepath.Join(pkg, "laughs.yaml"),
					"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: laughs\n  annotations:\n"+aliasBomb("    "))
				appendFile(t, filepath.Join(pkg, "kustomization.yaml"), "- laughs.yaml\n")
			},
			reason: addonsv1alpha1.ReasonPackageTooLarge,
			message: fmt.Sprintf("package coredns/%s-laughs-SUFFIX: laughs.yaml: YAML aliases expand to more than %d nodes",
				newVersion, channels.MaxAliasNodes),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := newNamespace(t)
			suffix := ns[strings.LastIndex(ns, "-")+1:]
			cr := enginetest.NewCoreDNS(ns, "")
			tc.breakSource(t, suffix, cr)
			message := strings.ReplaceAll(tc.message, "SUFFIX", suffix)

			stop := watchHeap(t)
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			ready := waitReason(t, cr, tc.reason)
			g.Expect(stop()).To(BeNumerically("<", heapBound))

			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Message).To(ContainSubstring(message))
			stalled := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionStalled)
			g.Expect(stalled).NotTo(BeNil(), "no Stalled condition: %v", cr.Status.Conditions)
			g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(stalled.Reason).To(Equal(tc.reason))
			g.Expect(stalled.Message).To(ContainSubstring(message))
			g.Expect(cr.Status.AppliedVersion).To(BeEmpty())
			g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())
			deployments := &appsv1.DeploymentList{}
			g.Expect(k8sClient.List(ctx, deployments, client.InNamespace(ns))).To(Succeed())
			g.Expect(deployments.Items).To(BeEmpty(), "nothing is applied")
		})
	}
}

// addToSource writes a file into the suite's channels directory and removes it after t.
func addToSource(t *testing.T, name, content string) {
	t.Helper()
	path := filepath.Join(source.Dir(), name)
	writeFile(t, path, content)
	t.Cleanup(func() { _ = os.Remove(path) })
}

// copyPackage copies the CoreDNS package of newVersion in the suite's channels directory
// to version, removed after t, and returns its folder.
func copyPackage(t *testing.T, version string) string {
	t.Helper()
	pkg := filepath.Join(source.Dir(), "packages", "coredns", version)
	if err := os.CopyFS(pkg, os.DirFS(filepath.Join(source.Dir(), "packages", "coredns", newVersion))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pkg) })
	return pkg
}

// writeFile writes content to path.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendFile appends content to the file at path.
func appendFile(t *testing.T, path, content string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(data)+content)
}
