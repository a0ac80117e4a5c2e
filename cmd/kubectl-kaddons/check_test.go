package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// checkChannels writes a channels folder whose coredns 1.0.0 supports Kubernetes below
// 1.38 and 2.0.0 from 1.30 on, and whose kube-proxy 1.37.2 declares no range.
func checkChannels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"stable": "manifests:\n- name: coredns\n  version: 2.0.0\n",
		"packages/coredns/1.0.0/kustomization.yaml":     "resources: []\n",
		"packages/coredns/1.0.0/metadata.yaml":          "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.21.0 <1.38.0'\n",
		"packages/coredns/2.0.0/kustomization.yaml":     "resources: []\n",
		"packages/coredns/2.0.0/metadata.yaml":          "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.30.0'\n",
		"packages/kube-proxy/1.37.2/kustomization.yaml": "resources: []\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// createApplied creates addon and records version as its status.appliedVersion, as the
// operator would once it applied it.
func createApplied(t *testing.T, addon addonsv1alpha1.Addon, version string) {
	t.Helper()
	ctx := context.Background()
	if err := testClient.Create(ctx, addon); err != nil {
		t.Fatal(err)
	}
	addon.GetAddonStatus().AppliedVersion = version
	if err := testClient.Status().Update(ctx, addon); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	ns := newNamespace(t)
	channelsDir := checkChannels(t)
	createApplied(t, &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns}}, "1.0.0")
	createApplied(t, &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}, "2.0.0")
	createApplied(t, &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: ns}}, "1.37.2")
	if err := testClient.Create(context.Background(), &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	check := func(version string) (int, map[string]string, string) {
		code, out, stderr := runPlugin(t, "", "check", "--kubernetes-version", version, "-n", ns, "--channels", channelsDir,
			"--kubeconfig", testKubeconfig)
		rows := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			fields := strings.Fields(line)
			rows[fields[1]+"/"+fields[2]] = strings.Join(fields[3:], " ")
		}
		return code, rows, stderr
	}

	// 1.38: the CoreDNS on 1.0.0 blocks, and check names the version to move to.
	code, rows, stderr := check("1.38")
	if code != 1 || !strings.Contains(stderr, "1 add-on(s) would block an upgrade to Kubernetes 1.38") {
		t.Errorf("check 1.38 exited %d with %q, want 1 and the count of blocking add-ons", code, stderr)
	}
	for name, want := range map[string]string{
		"CoreDNS/old":          ">=1.21.0 <1.38.0 BLOCKS move to 2.0.0 (spec.version, or a channel that lists it) before the upgrade",
		"CoreDNS/new":          ">=1.30.0 OK",
		"CoreDNS/pending":      "- NOT-APPLIED nothing is applied yet",
		"KubeProxy/kube-proxy": "- OK",
	} {
		if got := rows[name]; !strings.HasSuffix(got, want) {
			t.Errorf("check 1.38: %s is %q, want it to end with %q", name, got, want)
		}
	}

	// 1.37: nothing blocks, and the exit status says so.
	if code, rows, stderr := check("v1.37.4"); code != 0 || stderr != "" || !strings.HasSuffix(rows["CoreDNS/old"], " OK") {
		t.Errorf("check v1.37.4 exited %d (%q), rows %v; want 0 and every add-on OK", code, stderr, rows)
	}

	// 1.29 (a downgrade of the cluster): 2.0.0 needs 1.30, and check names the version that fits.
	if _, rows, _ := check("1.29"); !strings.HasSuffix(rows["CoreDNS/new"], "BLOCKS move to 1.0.0 (spec.version, or a channel that lists it) before the upgrade") {
		t.Errorf("check 1.29: CoreDNS/new is %q, want it to name 1.0.0", rows["CoreDNS/new"])
	}

	// A version that is not one is refused before anything is read.
	if code, _, stderr := check("next"); code != 1 || !strings.Contains(stderr, `--kubernetes-version "next" is not a Kubernetes version`) {
		t.Errorf("check next exited %d with %q", code, stderr)
	}
}
