package main

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// TestEvents creates Events regarding two add-ons and a ConfigMap: events KIND/NAME
// lists the add-on's, events without an argument every add-on's, oldest first, with the
// messages made printable.
func TestEvents(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	now := time.Now()
	regarding := func(apiVersion, kind, name string) corev1.ObjectReference {
		return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name}
	}
	addonAPI := addonsv1alpha1.GroupVersion.String()
	for i, e := range []struct {
		name, typ, reason, note string
		regarding               corev1.ObjectReference
		age                     time.Duration
	}{
		{name: "applied", typ: corev1.EventTypeNormal, reason: "Applied", note: "applied 7 objects",
			regarding: regarding(addonAPI, "CoreDNS", "coredns"), age: 10 * time.Minute},
		{name: "failed", typ: corev1.EventTypeWarning, reason: "ApplyFailed", note: "Deployment coredns" + clearScreen + ": refused\nby the server",
			regarding: regarding(addonAPI, "CoreDNS", "coredns"), age: 4 * time.Minute},
		{name: "other-addon", typ: corev1.EventTypeNormal, reason: "Applied", note: "applied 3 objects",
			regarding: regarding(addonAPI, "MetricsServer", "metrics-server"), age: 6 * time.Minute},
		{name: "not-an-addon", typ: corev1.EventTypeNormal, reason: "Created", note: "a ConfigMap",
			regarding: regarding("v1", "ConfigMap", "coredns"), age: 2 * time.Minute},
	} {
		ev := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: e.name},
			EventTime:  metav1.NewMicroTime(now.Add(-e.age)), ReportingController: "kaddons.dev/test", ReportingInstance: "test",
			Action: "Reconcile", Type: e.typ, Reason: e.reason, Note: e.note, Regarding: e.regarding,
		}
		g.Expect(testClient.Create(ctx, ev)).To(Succeed(), "event %d", i)
	}
	events := func(args ...string) []string {
		code, out, stderr := runPlugin(t, "", append([]string{"events", "-n", ns, "--kubeconfig", testKubeconfig}, args...)...)
		g.Expect(code).To(Equal(0), stderr)
		expectPrintable(t, out, "\n")
		return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	}

	lines := events("coredns/coredns")
	g.Expect(lines).To(HaveLen(3), strings.Join(lines, "\n"))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}))
	g.Expect(lines[1]).To(MatchRegexp(`^10m\s+Normal\s+Applied\s+CoreDNS/coredns\s+applied 7 objects$`))
	g.Expect(lines[2]).To(MatchRegexp(`^4m\s+Warning\s+ApplyFailed\s+CoreDNS/coredns\s+Deployment coredns\\x1b\[2J\\x1b\[H: refused by the server$`))

	lines = events()
	g.Expect(lines).To(HaveLen(4), strings.Join(lines, "\n"))
	g.Expect(lines[1]).To(ContainSubstring("CoreDNS/coredns"))
	g.Expect(lines[2]).To(MatchRegexp(`\sMetricsServer/metrics-server\s`))
	g.Expect(lines[3]).To(ContainSubstring("ApplyFailed"))

	code, out, stderr := runPlugin(t, "", "events", "dashboard/none", "-n", ns, "--kubeconfig", testKubeconfig)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(out).To(BeEmpty())
	g.Expect(stderr).To(Equal("No events found.\n"))
}
