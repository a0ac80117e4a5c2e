package channels

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// heapBound is the most heap a test that feeds an alias bomb may grow by. The bomb
// expands to hundreds of millions of nodes (tens of gigabytes) if anything expands it.
const heapBound = 256 << 20

// aliasBomb returns a YAML mapping, indented by indent, of levels anchors l0..l<levels-1>:
// l0 a list of width scalars, every further one a list of width aliases to the one
// before. Expanded, its last anchor holds width^levels scalars.
func aliasBomb(indent string, levels, width int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sl0: &l0 [%s]\n", indent, strings.TrimSuffix(strings.Repeat("lol,", width), ","))
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "%sl%d: &l%d [%s]\n", indent, i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", i-1), width), ","))
	}
	return b.String()
}

// billionLaughs is a custom resource whose spec is a nine-level alias bomb of nine:
// 387 420 489 scalars once expanded, from under a kilobyte of YAML.
var billionLaughs = "apiVersion: example.com/v1\nkind: Laugh\nmetadata:\n  name: lol\nspec:\n" + aliasBomb("  ", 9, 9)

// withBoundedHeap runs fn and fails the test if the heap grows by heapBound or more
// meanwhile: measured after fn from runtime.MemStats (TotalAlloc, everything allocated),
// and watched while fn runs (HeapAlloc), so that an expansion ends the test with a
// message rather than the machine's memory.
func withBoundedHeap(t *testing.T, fn func()) {
	t.Helper()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	var peak atomic.Uint64
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			if m.HeapAlloc > before.HeapAlloc+heapBound {
				// fn cannot be stopped from here, and would take the machine's memory.
				panic(fmt.Sprintf("the heap grew by %d MiB, past the bound of %d MiB",
					(m.HeapAlloc-before.HeapAlloc)>>20, heapBound>>20))
			}
		}
	}()
	fn()
	close(done)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB; heap peak %d KiB above the start", allocated>>10, (max(peak.Load(), before.HeapAlloc)-before.HeapAlloc)>>10)
	if allocated >= heapBound {
		t.Errorf("allocated %d MiB, want less than %d MiB", allocated>>20, heapBound>>20)
	}
}

// TestRenderRefusesAliasBombs: a package whose YAML aliases would expand to hundreds of
// millions of nodes (a "billion laughs") is refused with PackageTooLarge naming the file,
// whether kustomize or the plain path would build it and wherever the bomb sits, and the
// refusal allocates a bounded amount of memory.
func TestRenderRefusesAliasBombs(t *testing.T) {
	plain := kustomization + "resources:\n- laugh.yaml\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		file  string
	}{
		{name: "a plain package's resource", files: map[string]string{"kustomization.yaml": plain, "laugh.yaml": billionLaughs},
			file: "laugh.yaml"},
		{name: "a resource kustomize builds",
			files: map[string]string{"kustomization.yaml": plain + "namePrefix: x-\n", "laugh.yaml": billionLaughs},
			file:  "laugh.yaml"},
		{name: "the second document of a file",
			files: map[string]string{"kustomization.yaml": plain, "laugh.yaml": configMap + "---\n" + billionLaughs},
			file:  "laugh.yaml"},
		{name: "an inline patch of the kustomization",
			files: map[string]string{"kustomization.yaml": kustomization + "resources:\n- configmap.yaml\npatches:\n- patch: |\n" +
				"    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: demo\n    data:\n" + aliasBomb("      ", 9, 9),
				"configmap.yaml": configMap},
			file: "kustomization.yaml"},
		{name: "the kustomization itself",
			files: map[string]string{"kustomization.yaml": plain + "commonAnnotations:\n" + aliasBomb("  ", 9, 9), "laugh.yaml": configMap},
			file:  "kustomization.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := packageTree(t, tc.files)
			var err error
			withBoundedHeap(t, func() {
				_, err = NewCatalog(dir, "").Render(Resolved{Addon: "demo", Version: "1.0.0"})
			})
			if got := ReasonOf(err); got != addonsv1alpha1.ReasonPackageTooLarge {
				t.Fatalf("Render: reason %s (%v), want %s", got, err, addonsv1alpha1.ReasonPackageTooLarge)
			}
			want := fmt.Sprintf("package demo/1.0.0: %s: YAML aliases expand to more than %d nodes", tc.file, MaxAliasNodes)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestParseChannelRefusesAnAliasBomb: a channel file that is an alias bomb is refused
// (go-yaml's own check on aliasing, as it decodes) within bounded memory.
func TestParseChannelRefusesAnAliasBomb(t *testing.T) {
	var err error
	withBoundedHeap(t, func() {
		_, err = ParseChannel([]byte("manifests:\n- name: coredns\n  version: 1.0.0\nbomb:\n" + aliasBomb("  ", 9, 9)))
	})
	if err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("ParseChannel error = %v, want go-yaml's excessive aliasing", err)
	}
}

// TestRenderExpandsModestAliases: anchors as manifests use them (a block repeated with an
// alias, a merge key) still build, expanded.
func TestRenderExpandsModestAliases(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  labels: &labels\n    app: demo\n    tier: dns\n" +
		"  annotations:\n    <<: *labels\n    extra: \"yes\"\ndata:\n  key: value\n"
	for _, k := range []string{kustomization + "resources:\n- configmap.yaml\n", kustomization + "resources:\n- configmap.yaml\nnamePrefix: x-\n"} {
		out, err := NewCatalog(packageTree(t, map[string]string{"kustomization.yaml": k, "configmap.yaml": doc}), "").
			Render(Resolved{Addon: "demo", Version: "1.0.0"})
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		if strings.Count(out, "tier: dns") != 2 || !strings.Contains(out, "extra: \"yes\"") {
			t.Errorf("the aliases are not expanded:\n%s", out)
		}
	}
}

// TestAliasBudget counts what aliases add, anchors counted once each, against the cap.
func TestAliasBudget(t *testing.T) {
	// list is an anchored list of 999 scalars: 1000 nodes with the list itself.
	list := "a: &a [" + strings.TrimSuffix(strings.Repeat("x,", 999), ",") + "]\n"
	aliases := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "b%d: *a\n", i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name    string
		data    string
		wantErr bool
	}{
		{name: "no aliases", data: list},
		{name: "at the cap: 100 aliases of 1000 nodes", data: list + aliases(MaxAliasNodes/1000)},
		{name: "one alias over the cap", data: list + aliases(MaxAliasNodes/1000+1), wantErr: true},
		{name: "over the cap over several documents", data: list + aliases(60) + "---\n" + list + aliases(41), wantErr: true},
		// Five levels of seven add 7*8 + 7*57 + 7*400 + 7*2801 = 22862 nodes, a sixth 137256.
		{name: "nested anchors count expanded", data: aliasBomb("", 5, 7)},
		{name: "one level deeper is over", data: aliasBomb("", 6, 7), wantErr: true},
		{name: "in a string value", data: "patch: |\n" + indent(aliasBomb("", 9, 9), "  "), wantErr: true},
		{name: "a string without aliases", data: "patch: \"a & b * c\"\n"},
		{name: "YAML that does not parse is left to the build", data: "a: [\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkAliases("demo/1.0.0", []packageFile{{name: "f.yaml", data: []byte(tc.data)}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkAliases error = %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && ReasonOf(err) != addonsv1alpha1.ReasonPackageTooLarge {
				t.Errorf("reason = %s, want %s", ReasonOf(err), addonsv1alpha1.ReasonPackageTooLarge)
			}
		})
	}
}

// indent prefixes every line of s with prefix.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix) + "\n"
}
