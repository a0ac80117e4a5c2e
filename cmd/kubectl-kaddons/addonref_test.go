package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// TestKindNames resolves the names an add-on kind answers to, from the API server's
// discovery: any case, plural, singular and short names.
func TestKindNames(t *testing.T) {
	kube := genericclioptions.NewConfigFlags(false)
	kube.KubeConfig = &testKubeconfig
	c, err := newCluster(kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
	}{
		{name: "coredns", want: "CoreDNS"},
		{name: "CoreDNS", want: "CoreDNS"},
		{name: "cdns", want: "CoreDNS"},
		{name: "metricsservers", want: "MetricsServer"},
		{name: "MetricsServer", want: "MetricsServer"},
		{name: "metricsserver", want: "MetricsServer"},
		{name: "ms", want: "MetricsServer"},
		{name: "kubeproxies", want: "KubeProxy"},
		{name: "NodeLocalDNS", want: "NodeLocalDNS"},
		{name: "addonsources", want: ""},
		{name: "deployments", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gvk, err := c.kinds.resolve(tc.name)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("resolve(%q) = %s, want an error", tc.name, gvk)
			case tc.want == "" && !strings.Contains(err.Error(), "the add-on kinds are CoreDNS, Dashboard,"):
				t.Errorf("resolve(%q): %v, want the known kinds named", tc.name, err)
			case tc.want != "" && (err != nil || gvk.Kind != tc.want || gvk.Group != addonGroup):
				t.Errorf("resolve(%q) = %s, %v; want %s", tc.name, gvk, err, tc.want)
			}
		})
	}
}

// TestCompletion completes KIND/NAME arguments with the add-ons of the namespace, and
// generates a shell's completion script.
func TestCompletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, addon := range []addonsv1alpha1.Addon{
		&addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}},
		&addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns-b"}},
		&addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}},
	} {
		g.Expect(testClient.Create(ctx, addon)).To(Succeed())
	}
	complete := func(args ...string) []string {
		code, out, stderr := runPlugin(t, "", append([]string{"__complete"}, args...)...)
		g.Expect(code).To(Equal(0), stderr)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		g.Expect(lines[len(lines)-1]).To(Equal(":4"), "ShellCompDirectiveNoFileComp:\n%s", out)
		return lines[:len(lines)-1]
	}
	flags := []string{"-n", ns, "--kubeconfig", testKubeconfig}
	for _, tc := range []struct {
		command, toComplete string
		want                []string
	}{
		{command: "tree", toComplete: "", want: []string{"coredns/coredns", "coredns/coredns-b", "metricsserver/metrics-server"}},
		{command: "reconcile", toComplete: "m", want: []string{"metricsserver/metrics-server"}},
		{command: "suspend", toComplete: "CoreDNS/coredns-", want: []string{"CoreDNS/coredns-b"}},
		{command: "resume", toComplete: "metricsservers/", want: []string{"metricsservers/metrics-server"}},
		{command: "events", toComplete: "dashboard/", want: []string{}},
	} {
		t.Run(tc.command+" "+tc.toComplete, func(t *testing.T) {
			got := complete(append(append([]string{tc.command}, flags...), tc.toComplete)...)
			NewWithT(t).Expect(got).To(ConsistOf(tc.want))
		})
	}

	t.Run("completion bash", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := runPlugin(t, "", "completion", "bash")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(out).To(ContainSubstring("__start_kubectl-kaddons"))
	})

	t.Run("kubectl_complete-kaddons calls __complete", func(t *testing.T) {
		g := NewWithT(t)
		// A stand-in kubectl-kaddons on PATH records the arguments it is given.
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "kubectl-kaddons"), []byte("#!/bin/sh\necho \"$@\"\n"), 0o700)).To(Succeed())
		cmd := exec.Command("./kubectl_complete-kaddons", "tree", "core")
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(string(out)).To(Equal("__complete tree core\n"))
	})
}
