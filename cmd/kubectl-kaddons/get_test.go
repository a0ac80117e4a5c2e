package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// createReady creates addon and writes its status as the operator would for its current
// generation: applied version, Ready and Upgradeable conditions, an available version.
func createReady(t *testing.T, addon addonsv1alpha1.Addon, version string) {
	t.Helper()
	ctx := context.Background()
	if err := testClient.Create(ctx, addon); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, addon, version, metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled, version+" is ready")
}

// writeStatus writes addon's status (applied version and a Ready condition) for the
// generation it has now, through the status subresource.
func writeStatus(t *testing.T, addon addonsv1alpha1.Addon, version string, ready metav1.ConditionStatus, reason, message string) {
	t.Helper()
	s := addon.GetAddonStatus()
	s.AppliedVersion = version
	s.AvailableVersion = "9.9.9"
	s.ObservedGeneration = addon.GetGeneration()
	s.Conditions = []metav1.Condition{
		{Type: addonsv1alpha1.ConditionReady, Status: ready, Reason: reason, Message: message,
			ObservedGeneration: addon.GetGeneration(), LastTransitionTime: metav1.Now()},
		{Type: addonsv1alpha1.ConditionUpgradeable, Status: metav1.ConditionFalse, Reason: addonsv1alpha1.ReasonNextKubernetesVersionUnsupported,
			Message: "no", ObservedGeneration: addon.GetGeneration(), LastTransitionTime: metav1.Now()},
	}
	if err := testClient.Status().Update(context.Background(), addon); err != nil {
		t.Fatal(err)
	}
}

func TestGet(t *testing.T) {
	ns := newNamespace(t)
	coredns := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
	coredns.Spec.Channel = "stable"
	createReady(t, coredns, "1.12.1")
	ms := &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}}
	ms.Spec.Suspend = true
	createReady(t, ms, "0.7.2")
	get := func(args ...string) (int, string, string) {
		return runPlugin(t, "", append([]string{"get", "-n", ns, "--kubeconfig", testKubeconfig}, args...)...)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		header []string
		rows   [][]string // the first fields of each row
	}{
		{name: "table", header: []string{"NAMESPACE", "KIND", "NAME", "VERSION", "READY", "REASON", "MESSAGE"},
			rows: [][]string{{ns, "CoreDNS", "coredns", "1.12.1", "True", "Reconciled", "1.12.1"},
				{ns, "MetricsServer", "metrics-server", "0.7.2", "True", "Reconciled", "0.7.2"}}},
		{name: "wide", args: []string{"-o", "wide"},
			header: []string{"NAMESPACE", "KIND", "NAME", "VERSION", "CHANNEL", "AVAILABLE", "READY", "UPGRADEABLE", "SUSPENDED", "AGE",
				"REASON", "MESSAGE"},
			rows: [][]string{{ns, "CoreDNS", "coredns", "1.12.1", "stable", "9.9.9", "True", "False", "false"},
				{ns, "MetricsServer", "metrics-server", "0.7.2", "<none>", "9.9.9", "True", "False", "true"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, out, stderr := get(tc.args...)
			g.Expect(code).To(Equal(0), stderr)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			g.Expect(lines).To(HaveLen(1+len(tc.rows)), out)
			g.Expect(strings.Fields(lines[0])).To(Equal(tc.header))
			for i, want := range tc.rows {
				g.Expect(strings.Fields(lines[1+i])[:len(want)]).To(Equal(want), out)
			}
		})
	}

	t.Run("json is a List of the add-ons", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := get("-o", "json")
		g.Expect(code).To(Equal(0), stderr)
		var list unstructured.UnstructuredList
		g.Expect(list.UnmarshalJSON([]byte(out))).To(Succeed(), out)
		g.Expect(list.GetKind()).To(Equal("List"))
		g.Expect(list.Items).To(HaveLen(2))
		g.Expect(list.Items[0].GetKind()).To(Equal("CoreDNS"))
		g.Expect(list.Items[0].GetAPIVersion()).To(Equal(addonsv1alpha1.GroupVersion.String()))
		version, _, _ := unstructured.NestedString(list.Items[0].Object, "status", "appliedVersion")
		g.Expect(version).To(Equal("1.12.1"))
		g.Expect(list.Items[1].GetName()).To(Equal("metrics-server"))
	})

	t.Run("yaml is a List of the add-ons", func(t *testing.T) {
		g := NewWithT(t)
		code, out, stderr := get("-o", "yaml")
		g.Expect(code).To(Equal(0), stderr)
		var list map[string]any
		g.Expect(yaml.Unmarshal([]byte(out), &list)).To(Succeed(), out)
		g.Expect(list).To(HaveKeyWithValue("kind", "List"))
		g.Expect(list["items"]).To(HaveLen(2))
		g.Expect(out).To(ContainSubstring("name: metrics-server"))
	})

	t.Run("an unknown format is an error", func(t *testing.T) {
		g := NewWithT(t)
		code, _, stderr := get("-o", "xml")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`--output must be wide, yaml or json, not "xml"`))
	})
}

// TestGetReadyChecksTheGeneration bumps the spec of a Ready add-on: until the operator
// writes a status for the new generation, READY is Unknown, not the old True.
func TestGetReadyChecksTheGeneration(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
	createReady(t, cr, "1.12.1")
	g.Expect(cr.Generation).To(BeEquivalentTo(1))

	cr.Spec.Replicas = ptr.To[int32](3)
	g.Expect(testClient.Update(ctx, cr)).To(Succeed())
	g.Expect(cr.Generation).To(BeEquivalentTo(2))

	code, out, stderr := runPlugin(t, "", "get", "-n", ns, "--kubeconfig", testKubeconfig)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+coredns\s+1\.12\.1\s+Unknown\s+` + reasonNotObserved +
		`\s+generation 2 not observed yet \(generation 1 was Ready=True, Reconciled: 1\.12\.1 is ready\)$`))

	// The operator catches up.
	writeStatus(t, cr, "1.12.1", metav1.ConditionTrue, addonsv1alpha1.ReasonReconciled, "caught up")
	code, out, stderr = runPlugin(t, "", "get", "-n", ns, "--kubeconfig", testKubeconfig)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+coredns\s+1\.12\.1\s+True\s+Reconciled\s+caught up$`))
}

func TestReadinessOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		generation int64
		status     map[string]any
		want       readiness
	}{
		{name: "no status", generation: 1, want: readiness{status: "Unknown"}},
		{name: "ready for the generation", generation: 2,
			status: map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled",
				"message": "ok", "observedGeneration": int64(2)}}},
			want: readiness{status: "True", reason: "Reconciled", message: "ok"}},
		{name: "ready for an older generation", generation: 3,
			status: map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled",
				"message": "ok", "observedGeneration": int64(2)}}},
			want: readiness{status: "Unknown", reason: reasonNotObserved,
				message: "generation 3 not observed yet (generation 2 was Ready=True, Reconciled: ok)"}},
		{name: "status.observedGeneration when the condition has none", generation: 3,
			status: map[string]any{"observedGeneration": int64(1), "conditions": []any{map[string]any{"type": "Ready", "status": "False",
				"reason": "ApplyFailed", "message": "no"}}},
			want: readiness{status: "Unknown", reason: reasonNotObserved,
				message: "generation 3 not observed yet (generation 1 was Ready=False, ApplyFailed: no)"}},
		{name: "no observed generation at all", generation: 3,
			status: map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "no"}}},
			want:   readiness{status: "False", reason: "ApplyFailed", message: "no"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetGeneration(tc.generation)
			if tc.status != nil {
				u.Object["status"] = tc.status
			}
			if got := readinessOf(u); got != tc.want {
				t.Errorf("readinessOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer that a command writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGetWatch lists an empty namespace with --watch, then creates and changes an
// add-on: each change prints a row, and cancelling the context ends the command with 0.
func TestGetWatch(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, output := range []string{"", "json"} {
		watchCtx, cancel := context.WithCancel(ctx)
		var out, errOut syncBuffer
		done := make(chan int)
		args := []string{"get", "-n", ns, "--watch", "--kubeconfig", testKubeconfig}
		if output != "" {
			args = append(args, "-o", output)
		}
		go func() {
			done <- runContext(watchCtx, args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		}()
		// An add-on created before the watches start shows in the list instead, alike.
		name := "watched-" + output
		if output == "" {
			name = "watched"
		}
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		writeStatus(t, cr, "1.12.1", metav1.ConditionFalse, addonsv1alpha1.ReasonApplying, "applying "+name)

		if output == "" {
			g.Eventually(out.String, 30*time.Second, 100*time.Millisecond).Should(
				MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+watched\s+1\.12\.1\s+False\s+Applying\s+applying watched$`))
			g.Expect(strings.Count(out.String(), "NAMESPACE")).To(Equal(1), "one header:\n%s", out.String())
		} else {
			g.Eventually(out.String, 30*time.Second, 100*time.Millisecond).Should(ContainSubstring(`"message": "applying ` + name + `"`))
		}
		cancel()
		g.Eventually(done, 30*time.Second).Should(Receive(Equal(0)), errOut.String())
		g.Expect(testClient.Delete(ctx, cr, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	}
}

// goneOnce is a client whose first watch of each kind reports at once that its resource
// version is gone (410), as a server does after compacting it away; later watches pass.
type goneOnce struct {
	client.WithWatch
	mu   sync.Mutex
	seen map[string]bool
}

func (g *goneOnce) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	kind := list.GetObjectKind().GroupVersionKind().Kind
	g.mu.Lock()
	first := !g.seen[kind]
	g.seen[kind] = true
	g.mu.Unlock()
	if !first {
		return g.WithWatch.Watch(ctx, list, opts...)
	}
	status := apierrors.NewResourceExpired("too old resource version").Status()
	w := watch.NewFakeWithChanSize(1, false)
	w.Error(&status)
	return w, nil
}

// TestGetWatchListsAgainWhenGone checks that get --watch survives a watch whose resource
// version expired: it lists the kinds again, prints the add-ons as they are, and goes on
// printing changes, instead of ending with the 410.
func TestGetWatchListsAgainWhenGone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before"}}
	createReady(t, cr, "1.12.0")
	c, err := client.NewWithWatch(testCfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	gone := &goneOnce{WithWatch: c, seen: map[string]bool{}}

	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- getAddons(watchCtx, gone, ns, getOptions{watch: true}, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
	}()
	row := `(?m)^` + ns + `\s+CoreDNS\s+before\s+1\.12\.0\s+True\s`
	// Listed once at the start and once more after the 410.
	g.Eventually(func() int { return len(regexp.MustCompile(row).FindAllString(out.String(), -1)) }, 30*time.Second, 100*time.Millisecond).
		Should(Equal(2), "output:\n%s", out.String())
	g.Consistently(done, time.Second).ShouldNot(Receive(), "get --watch ended after the 410")

	after := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after"}}
	createReady(t, after, "1.12.1")
	g.Eventually(out.String, 30*time.Second, 100*time.Millisecond).Should(MatchRegexp(`(?m)^` + ns + `\s+CoreDNS\s+after\s+1\.12\.1\s+True\s`))
	cancel()
	g.Eventually(done, 30*time.Second).Should(Receive(BeNil()), errOut.String())
}
