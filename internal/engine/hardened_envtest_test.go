package engine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// remotePackage writes the test-only package packages/coredns/<version> into the suite's
// channels directory: the files of CoreDNS 1.12.1 and, when remote is set, one more
// resources entry that names it.
func remotePackage(t *testing.T, version, remote string) {
	t.Helper()
	base := filepath.Join(source.Dir(), "packages", "coredns", newVersion)
	dir := filepath.Join(source.Dir(), "packages", "coredns", version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(base, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "kustomization.yaml" && remote != "" {
			if !strings.HasSuffix(string(data), "\n- poddisruptionbudget.yaml\n") {
				t.Fatalf("%s no longer ends with its resources list:\n%s", e.Name(), data)
			}
			data = append(data, []byte("- "+remote+"\n")...)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRefused waits until the add-on is Stalled with PackageRefused for its current
// generation, and returns the Stalled condition.
func waitRefused(t *testing.T, cr addonsv1alpha1.Addon) {
	t.Helper()
	ready := waitReason(t, cr, addonsv1alpha1.ReasonPackageRefused)
	g := NewWithT(t)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	stalled := meta.FindStatusCondition(cr.GetAddonStatus().Conditions, addonsv1alpha1.ConditionStalled)
	g.Expect(stalled).NotTo(BeNil(), "no Stalled condition")
	g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(stalled.Reason).To(Equal(addonsv1alpha1.ReasonPackageRefused))
}

// TestHardenedRenderReachesNoServer points a package's remote base at a server on
// loopback, as a plain URL and as a git-style URL. The add-on says why, with
// PackageRefused naming the reference; the server receives no request; nothing is
// applied for a new add-on, and nothing is changed or pruned for a running one. Fixing
// the package is picked up by the directory source's recheck, without a spec change.
func TestHardenedRenderReachesNoServer(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\n"))
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		remote string
	}{
		{name: "http", remote: srv.URL + "/manifests.yaml"},
		{name: "git", remote: "git::" + srv.URL + "/org/repo.git//base?ref=main"},
	} {
		t.Run(tc.name+" base of a new add-on", func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			version := "1.12.1-remote-" + ns
			remotePackage(t, version, tc.remote)

			cr := enginetest.NewCoreDNS(ns, version)
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			waitRefused(t, cr)
			ready := readyCondition(cr.GetAddonStatus())
			g.Expect(ready.Message).To(ContainSubstring(tc.remote))
			g.Expect(ready.Message).To(ContainSubstring("is a remote reference"))
			g.Expect(cr.Status.AppliedVersion).To(BeEmpty())
			g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &corev1.ServiceAccount{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the package's ServiceAccount was applied: %v", err)
			g.Expect(served.Load()).To(BeZero(), "the server received requests")

			// Fixing the package, and nothing else, lets the add-on through.
			remotePackage(t, version, "")
			waitApplied(t, cr, version)
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, &corev1.ServiceAccount{})).
				To(Succeed())
		})

		t.Run(tc.name+" base of an upgrade", func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			version := "1.12.1-remote-" + ns
			remotePackage(t, version, tc.remote)

			cr := enginetest.NewCoreDNS(ns, newVersion)
			createCoreDNS(t, cr)
			getAddon(g, cr)
			children := cr.Status.Inventory.Objects()
			g.Expect(children).NotTo(BeEmpty())
			before := uidsAndVersions(g, children)

			cr.Spec.Version = version
			g.Expect(k8sClient.Update(ctx, cr)).To(Succeed())
			waitRefused(t, cr)
			g.Expect(readyCondition(cr.GetAddonStatus()).Message).To(ContainSubstring(tc.remote))
			g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
			g.Expect(cr.Status.Inventory.Objects()).To(ConsistOf(children))
			g.Expect(uidsAndVersions(g, children)).To(Equal(before), "a child was changed or pruned")
			g.Expect(served.Load()).To(BeZero(), "the server received requests")
		})
	}
}

// uidsAndVersions maps each referenced object to its UID and resource version.
func uidsAndVersions(g Gomega, refs []addonsv1alpha1.ObjectReference) map[addonsv1alpha1.ObjectReference]string {
	out := map[addonsv1alpha1.ObjectReference]string{}
	for _, r := range refs {
		live, err := liveObject(r)
		g.Expect(err).NotTo(HaveOccurred(), "%s", r)
		out[r] = strings.Join([]string{string(live.GetUID()), live.GetResourceVersion()}, "/")
	}
	return out
}
