package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Terminal escapes a cluster-provided string may carry.
const (
	clearScreen = "\x1b[2J\x1b[H"                        // ESC[2J: clear the screen, cursor home
	osc52       = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\a" // OSC 52: set the clipboard
	overwrite   = "\rReady   all good"                   // \r: print over the line so far
	csi8bit     = "\u009b31m"                            // C1 CSI: 8-bit form of ESC[
	rtlOverride = "\u202egnp.exe"                        // bidi override: reorders what follows
	nonUTF8     = "\x9b31m"                              // a raw C1 byte, not UTF-8
)

// hostile is each escape, for the table tests.
var hostile = map[string]string{
	"ESC[2J": clearScreen, "OSC 52": osc52, "carriage return": overwrite, "8-bit CSI": csi8bit,
	"bidi override": rtlOverride, "raw C1 byte": nonUTF8,
}

// expectPrintable fails when out holds a control or bidi formatting character other than
// those in keep, or a byte that is not UTF-8.
func expectPrintable(t *testing.T, out, keep string) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			t.Fatalf("byte %d (%#x) is not UTF-8 in:\n%q", i, out[i], out)
		}
		if (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)) && !strings.ContainsRune(keep, r) {
			t.Fatalf("control character %U at byte %d in:\n%q", r, i, out)
		}
	}
}

func TestPrintableJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "plain JSON is kept", in: `{"a":"b \u001b c"}`, want: `{"a":"b \u001b c"}`},
		{name: "DEL", in: "{\"a\":\"x\x7fy\"}", want: `{"a":"x\u007fy"}`},
		{name: "8-bit CSI", in: "{\"a\":\"" + csi8bit + "\"}", want: `{"a":"\u009b31m"}`},
		{name: "bidi override", in: "{\"a\":\"" + rtlOverride + "\"}", want: `{"a":"\u202egnp.exe"}`},
		{name: "non-ASCII letters are kept", in: `{"a":"日本"}`, want: `{"a":"日本"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(printableJSON([]byte(tc.in)))
			if got != tc.want {
				t.Errorf("printableJSON(%q) = %q, want %q", tc.in, got, tc.want)
			}
			var before, after any
			if err := json.Unmarshal([]byte(tc.in), &before); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(got), &after); err != nil || !reflect.DeepEqual(before, after) {
				t.Errorf("printableJSON(%q) reads back as %v (%v), want %v", tc.in, after, err, before)
			}
			expectPrintable(t, got, "")
		})
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		name, in, keep, want string
	}{
		{name: "plain text is kept", in: "CoreDNS kube-system/coredns: 2/2 ready", want: "CoreDNS kube-system/coredns: 2/2 ready"},
		{name: "non-ASCII letters are kept", in: "añadido 日本 \uFFFD", want: "añadido 日本 \uFFFD"},
		{name: "ESC[2J", in: "a" + clearScreen + "b", want: `a\x1b[2J\x1b[Hb`},
		{name: "OSC 52", in: osc52, want: `\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07`},
		{name: "carriage return", in: "x" + overwrite, want: `x\x0dReady   all good`},
		{name: "8-bit CSI", in: csi8bit, want: `\x9b31m`},
		{name: "DEL", in: "a\x7fb", want: `a\x7fb`},
		{name: "bidi override", in: rtlOverride, want: `\u202egnp.exe`},
		{name: "a byte that is not UTF-8", in: nonUTF8, want: `\x9b31m`},
		{name: "tabs and newlines in a cell", in: "a\tb\nc", want: `a\x09b\x0ac`},
		{name: "tabs and newlines kept in text", in: "a\tb\nc\r\x1b", keep: keepLines, want: "a\tb\nc\\x0d\\x1b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := printable(tc.in, tc.keep)
			if got != tc.want {
				t.Errorf("printable(%q, %q) = %q, want %q", tc.in, tc.keep, got, tc.want)
			}
			expectPrintable(t, got, tc.keep)
		})
	}
}

// TestGetPrintsNoControlCharacters lists add-ons whose name, version, reason and Ready
// message (which quotes names from spec.patches raw) carry terminal escapes. The table
// keeps its rows and columns, and holds no control character. A fake client serves them:
// the API server would refuse some of these names.
func TestGetPrintsNoControlCharacters(t *testing.T) {
	for escape, seq := range hostile {
		t.Run(escape, func(t *testing.T) {
			g := NewWithT(t)
			cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coredns" + seq}}
			cr.Status.AppliedVersion = "1.12.1" + seq
			cr.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason:  addonsv1alpha1.ReasonPatchTargetNotFound + seq,
				Message: "patches[0] targets Deployment cordns" + seq + "\tx\ny, which the package does not contain"}}
			other := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cr, other).WithStatusSubresource(cr).Build()
			var out, errOut bytes.Buffer
			g.Expect(getAddons(context.Background(), c, "ns", getOptions{}, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})).To(Succeed())

			expectPrintable(t, out.String(), "\n")
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			g.Expect(lines).To(HaveLen(3), "a header and one row per add-on:\n%s", out.String())
			// JSON, on the way through the client, turns a byte that is not UTF-8 into U+FFFD.
			name := printable(strings.ToValidUTF8("coredns"+seq, "\uFFFD"), keepNone)
			g.Expect(lines[1]).To(MatchRegexp(`^ns +CoreDNS +` + regexp.QuoteMeta(name) + ` `))
			// Whitespace in a message (\r, \t, \n among it) is folded into single spaces.
			g.Expect(lines[1]).To(MatchRegexp(`cordns\S* .*x y, which the package does not contain$`))
			g.Expect(strings.Fields(lines[2])[:3]).To(Equal([]string{"ns", "CoreDNS", "plain"}))
		})
	}
}

// TestPluginOutputHoldsNoControlCharacters runs get, version, diff and render with
// terminal escapes in what the API server returns (a Ready condition's message, the
// operator Deployment's image, a live ConfigMap the diff shows) and in an error message.
// stdout and stderr hold no control character besides newlines and tabs.
func TestPluginOutputHoldsNoControlCharacters(t *testing.T) {
	ctx := context.Background()
	escapes := clearScreen + osc52 + overwrite + csi8bit + rtlOverride

	t.Run("get", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		cr.Status.Conditions = []metav1.Condition{{Type: addonsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: addonsv1alpha1.ReasonPatchTargetNotFound, LastTransitionTime: metav1.Now(),
			Message: "patches[0] targets Deployment cordns" + escapes + ", which the package does not contain"}}
		g.Expect(testClient.Status().Update(ctx, cr)).To(Succeed())

		code, out, stderr := runPlugin(t, "", "get", "-n", ns, "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(0), stderr)
		expectPrintable(t, out, "\n")
		expectPrintable(t, stderr, keepLines)
		g.Expect(out).To(ContainSubstring(`cordns\x1b[2J\x1b[H\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07 Ready all good\x9b31m\u202egnp.exe,`))

		// -o json escapes them as JSON does, and reads back to the message as written.
		code, out, stderr = runPlugin(t, "", "get", "-n", ns, "-o", "json", "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(0), stderr)
		expectPrintable(t, out, "\n")
		var list struct {
			Items []addonsv1alpha1.CoreDNS `json:"items"`
		}
		g.Expect(json.Unmarshal([]byte(out), &list)).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		g.Expect(list.Items[0].Status.Conditions[0].Message).To(Equal(cr.Status.Conditions[0].Message))

		// -o yaml shows them escaped, as diff does.
		code, out, stderr = runPlugin(t, "", "get", "-n", ns, "-o", "yaml", "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(0), stderr)
		expectPrintable(t, out, "\n")
		g.Expect(out).To(ContainSubstring(`\x1b[2J`))
	})

	t.Run("version", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		labels := map[string]string{"app.kubernetes.io/name": "kaddons", "control-plane": "controller-manager"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kaddons-controller-manager", Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager",
						Image: "example.com/kaddons:v1" + escapes}}},
				},
			},
		}
		if err := testClient.Create(ctx, d); err != nil {
			// The API server decides what an image may hold; an escape it refuses never
			// reaches the plugin.
			t.Skipf("the API server refuses the image: %v", err)
		}
		code, out, stderr := runPlugin(t, "", "version", "--operator-namespace", ns, "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(0), stderr)
		expectPrintable(t, out, "\n")
		g.Expect(out).To(ContainSubstring(`Operator Version: v1\x1b[2J\x1b[H\x1b]52;c;`))
	})

	t.Run("diff", func(t *testing.T) {
		// The add-on's inventory lists a ConfigMap it no longer renders, which carries
		// its labels: diff shows it whole, as pruned, escapes and all.
		g := NewWithT(t)
		ns := newNamespace(t)
		input := coreDNSInput(ns, "")
		applyRendered(t, input)
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}}
		cr.Spec.Version = "1.12.1"
		g.Expect(testClient.Create(ctx, cr)).To(Succeed())
		cr.Status.Inventory = addonsv1alpha1.NewInventory([]addonsv1alpha1.ObjectReference{
			{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "extra"}})
		g.Expect(testClient.Status().Update(ctx, cr)).To(Succeed())
		extra := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extra", Annotations: map[string]string{"note": escapes},
				Labels: map[string]string{ssa.LabelManagedBy: ssa.ManagedByValue, ssa.LabelKind: "coredns",
					ssa.LabelName: "coredns", ssa.LabelNamespace: ns}},
			Data: map[string]string{"evil": escapes, "multi": "line one" + escapes + "\nline two\n"},
		}
		g.Expect(testClient.Create(ctx, extra)).To(Succeed())

		code, out, stderr := runPlugin(t, input, "diff", "-f", "-", "--kubeconfig", testKubeconfig)
		g.Expect(code).To(Equal(diffFound), "stdout: %s\nstderr: %s", out, stderr)
		expectPrintable(t, out, keepLines)
		expectPrintable(t, stderr, keepLines)
		g.Expect(out).To(ContainSubstring("--- live/v1.ConfigMap." + ns + ".extra"))
		g.Expect(out).To(ContainSubstring("line two"))
	})

	t.Run("errors", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		// A patch whose target name carries the escapes: the error quotes it.
		input := coreDNSInput(ns, "  patches:\n  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: \"cordns"+
			strings.NewReplacer("\x1b", `\e`, "\a", `\a`, "\r", `\r`, "\u009b", `\x9b`, "\u202e", `\u202e`).Replace(escapes)+
			"\"}}\n")
		code, out, stderr := runPlugin(t, input, "render", "-f", "-")
		g.Expect(code).NotTo(Equal(0), "stdout: %s", out)
		expectPrintable(t, stderr, keepLines)
		g.Expect(stderr).To(ContainSubstring(`cordns\x1b[2J`))
	})
}
