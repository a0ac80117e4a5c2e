package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/kaddons/kaddons/internal/channels"
)

// runPlugin runs the plugin in-process with args and stdin and returns its exit code,
// stdout and stderr.
func runPlugin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

// caseArgs returns the extra arguments a golden input names on a "# args:" line.
func caseArgs(t *testing.T, input string) []string {
	t.Helper()
	data, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "# args:"); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// TestRenderGolden renders every testdata/<case>.in.yaml and compares the output with
// testdata/<case>.out.yaml; WRITE_GOLDEN_OUTPUT=1 rewrites the outputs.
func TestRenderGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden inputs in testdata")
	}
	for _, input := range inputs {
		name := strings.TrimSuffix(filepath.Base(input), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			args := append([]string{"render", "-f", input, "-n", "kube-system"}, caseArgs(t, input)...)
			code, got, stderr := runPlugin(t, "", args...)
			if code != 0 {
				t.Fatalf("render exited %d: %s", code, stderr)
			}
			golden := filepath.Join("testdata", name+".out.yaml")
			if os.Getenv("WRITE_GOLDEN_OUTPUT") != "" {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading %s (WRITE_GOLDEN_OUTPUT=1 writes it): %v", golden, err)
			}
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("render of %s differs from %s (-want +got; WRITE_GOLDEN_OUTPUT=1 rewrites it):\n%s", input, golden, d)
			}
		})
	}
}

// decodeAll parses a YAML or JSON stream (a v1 List is unpacked) into objects.
func decodeAll(t *testing.T, data string) []map[string]any {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(data)))
	var out []map[string]any
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj["kind"] == "List" {
			for _, item := range obj["items"].([]any) {
				out = append(out, item.(map[string]any))
			}
			continue
		}
		out = append(out, obj)
	}
	return out
}

// TestRenderMatchesOperatorGolden checks that the plugin renders the same objects, in the
// same order, as the operator's own golden test for the same CoreDNS.
func TestRenderMatchesOperatorGolden(t *testing.T) {
	g := NewWithT(t)
	code, got, stderr := runPlugin(t, "", "render", "-f", filepath.Join("testdata", "coredns-defaults.in.yaml"))
	g.Expect(code).To(Equal(0), stderr)
	operator, err := os.ReadFile(filepath.Join("..", "..", "controllers", "testdata", "golden", "coredns-1.12.1-defaults.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	want, have := decodeAll(t, string(operator)), decodeAll(t, got)
	g.Expect(want).NotTo(BeEmpty())
	if d := cmp.Diff(want, have); d != "" {
		t.Errorf("the plugin and the operator's golden file differ (-operator +plugin):\n%s", d)
	}
	// JSON output holds the same objects.
	code, asJSON, stderr := runPlugin(t, "", "render", "-f", filepath.Join("testdata", "coredns-defaults.in.yaml"), "-o", "json")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(cmp.Diff(want, decodeAll(t, asJSON))).To(BeEmpty())
}

// TestRenderFlags checks what --default-channel, --channels and --registry-mirror change.
func TestRenderFlags(t *testing.T) {
	g := NewWithT(t)
	input := "apiVersion: addons.kaddons.dev/v1alpha1\nkind: MetricsServer\nmetadata: {name: ms, namespace: kube-system}\n"
	src := channels.NewCatalog(filepath.Join("..", "..", "channels"), "")
	for _, channel := range src.Channels() {
		resolved, err := src.Resolve("metrics-server", addonv1alpha1.CommonSpec{Channel: channel})
		g.Expect(err).NotTo(HaveOccurred())
		code, out, stderr := runPlugin(t, input, "render", "-f", "-", "--channels", filepath.Join("..", "..", "channels"),
			"--default-channel", channel)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(images(t, out)).To(ContainElement(HaveSuffix(":v"+resolved.Version)), "channel %s", channel)
	}

	code, out, stderr := runPlugin(t, input, "render", "-f", "-", "--registry-mirror", "mirror.example.com/k8s")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(images(t, out)).NotTo(BeEmpty())
	g.Expect(images(t, out)).To(HaveEach(HavePrefix("mirror.example.com/k8s/")))

	code, _, stderr = runPlugin(t, input, "render", "-f", "-", "--channels", filepath.Join("testdata", "missing"))
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("not a directory"))
}

// images returns the container images of every rendered workload.
func images(t *testing.T, out string) []string {
	t.Helper()
	var result []string
	for _, obj := range decodeAll(t, out) {
		containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
		for _, c := range containers {
			result = append(result, c.(map[string]any)["image"].(string))
		}
	}
	return result
}

// TestRenderErrors checks that bad input fails with exit code 1 and a message on stderr
// that names the add-on or the document, and prints nothing on stdout.
func TestRenderErrors(t *testing.T) {
	const header = "apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata: {name: dns, namespace: team-a}\n"
	for _, tc := range []struct {
		name, input string
		want        []string
	}{
		{name: "unknown version", input: header + "spec: {version: 0.0.1}\n", want: []string{"CoreDNS team-a/dns", `"0.0.1"`}},
		{name: "unknown channel", input: header + "spec: {channel: nightly}\n", want: []string{"CoreDNS team-a/dns", "nightly"}},
		{name: "patch matching nothing", input: header +
			"spec:\n  patches:\n  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: nothing}}\n",
			want: []string{"CoreDNS team-a/dns", "nothing"}},
		{name: "unknown field", input: header + "spec: {replica: 2}\n", want: []string{"stdin", "document 1", "replica"}},
		{name: "not an add-on", input: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", want: []string{"ConfigMap", "not an add-on"}},
		{name: "no add-ons", input: "# nothing\n", want: []string{"no add-on resources"}},
		{name: "twice", input: header + "---\n" + header, want: []string{"CoreDNS team-a/dns is given twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, out, stderr := runPlugin(t, tc.input, "render", "-f", "-")
			g.Expect(code).To(Equal(1))
			g.Expect(out).To(BeEmpty())
			for _, w := range tc.want {
				g.Expect(stderr).To(ContainSubstring(w))
			}
		})
	}
}

// TestRenderSeveralFiles checks that -f may repeat and that the objects come in file order.
func TestRenderSeveralFiles(t *testing.T) {
	g := NewWithT(t)
	one, two := filepath.Join("testdata", "coredns-defaults.in.yaml"), filepath.Join("testdata", "metrics-server-rapid-channel.in.yaml")
	_, first, _ := runPlugin(t, "", "render", "-f", one)
	_, second, _ := runPlugin(t, "", "render", "-f", two)
	code, both, stderr := runPlugin(t, "", "render", "-f", one, "-f", two)
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(decodeAll(t, both)).To(Equal(append(decodeAll(t, first), decodeAll(t, second)...)))
}

// TestRenderWaitsForClusterIP checks that a NodeLocalDNS following a CoreDNS without a
// spec.clusterIP cannot be rendered offline, and says so.
func TestRenderWaitsForClusterIP(t *testing.T) {
	g := NewWithT(t)
	input := "apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata: {name: coredns, namespace: kube-system}\n---\n" +
		"apiVersion: addons.kaddons.dev/v1alpha1\nkind: NodeLocalDNS\nmetadata: {name: nl, namespace: kube-system}\nspec: {coreDNSRef: {name: coredns}}\n"
	code, _, stderr := runPlugin(t, input, "render", "-f", "-")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(And(ContainSubstring("NodeLocalDNS kube-system/nl"), ContainSubstring("cluster IP")))
}
