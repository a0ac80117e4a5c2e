package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewNames(t *testing.T) {
	for _, tc := range []struct {
		kind, plural string
		refused      bool
	}{
		{kind: "Example", plural: "examples"},
		{kind: "ExternalDNS", plural: "externaldnses"},
		{kind: "NodeProblemDetector", plural: "nodeproblemdetectors"},
		{kind: "Proxy", plural: "proxies"},
		{kind: "Gateway", plural: "gateways"},
		{kind: "Ingress2", plural: "ingress2s"},
		{kind: "", refused: true},
		{kind: "example", refused: true},
		{kind: "External-DNS", refused: true},
		{kind: "Ëxample", refused: true},
		{kind: "Foo Bar", refused: true},
		{kind: "A" + strings.Repeat("b", 50), refused: true},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			n, err := newNames(tc.kind)
			if tc.refused {
				if err == nil {
					t.Fatalf("%q was accepted", tc.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Plural != tc.plural || n.Lower != strings.ToLower(tc.kind) {
				t.Errorf("got plural %q, lower %q; want %q", n.Plural, n.Lower, tc.plural)
			}
		})
	}
}

// TestEditsAreIdempotent applies every edit to the repository's own lists twice: the
// first adds the kind, the second changes nothing.
func TestEditsAreIdempotent(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	n, err := newNames("Example")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edits() {
		t.Run(e.path, func(t *testing.T) {
			data, err := os.ReadFile(e.path)
			if err != nil {
				t.Fatal(err)
			}
			once, err := e.apply(string(data), n)
			if err != nil {
				t.Fatal(err)
			}
			if once == string(data) {
				t.Fatal("the first edit changed nothing")
			}
			if !strings.Contains(once, "Example") && !strings.Contains(once, "example") {
				t.Error("the edit does not name the kind")
			}
			twice, err := e.apply(once, n)
			if err != nil {
				t.Fatal(err)
			}
			if twice != once {
				t.Error("the second edit changed the file again")
			}
		})
	}
}

// TestRefusesExistingKinds checks that a kind the repository has is refused, whichever
// list or file names it.
func TestRefusesExistingKinds(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	for _, kind := range []string{"CoreDNS", "Coredns", "MetricsServer", "AddonSource", "AddonSpec", "Inventory"} {
		t.Run(kind, func(t *testing.T) {
			n, err := newNames(kind)
			if err != nil {
				t.Fatal(err)
			}
			if err := refuse(n); err == nil {
				t.Errorf("%s was not refused", kind)
			}
		})
	}
	n, err := newNames("Example")
	if err != nil {
		t.Fatal(err)
	}
	if err := refuse(n); err != nil {
		t.Errorf("a new kind was refused: %v", err)
	}
}

func TestAddToRoleLists(t *testing.T) {
	const role = `rules:
- apiGroups:
  - addons.kaddons.dev
  resources:
  - coredns
  - zebras
  verbs:
  - get
- apiGroups:
  - addons.kaddons.dev
  resources:
  - coredns/status
  verbs:
  - get
`
	n, err := newNames("Example")
	if err != nil {
		t.Fatal(err)
	}
	got, err := addToRoleLists(role, n)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(role, "  - coredns\n", "  - coredns\n  - examples\n", 1),
		"  - coredns/status\n", "  - coredns/status\n  - examples/status\n", 1)
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
