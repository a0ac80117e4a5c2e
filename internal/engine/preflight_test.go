package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

// treeWithPackageMetadata copies the repository's channels into a temporary tree and
// gives coredns 1.12.1 a metadata.yaml with the given annotations ("" writes none).
func treeWithPackageMetadata(t *testing.T, annotations string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", "channels"))); err != nil {
		t.Fatal(err)
	}
	if annotations != "" {
		file := filepath.Join(dir, "packages", "coredns", "1.12.1", sources.PackageMetadataFile)
		if err := os.WriteFile(file, []byte("annotations:\n"+annotations), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestResolveAndPreflight runs an add-on with spec.sourceRef through resolve, permit and
// pre-flight: each refusal stops it with its own reason before render, so nothing is
// rendered, applied or pruned; an accepted source hands its artifact on.
func TestResolveAndPreflight(t *testing.T) {
	kubernetes := func(context.Context) (string, error) { return "v1.34.2", nil }
	for _, tc := range []struct {
		name        string
		sourceRef   string
		artifact    *sources.Artifact // served as AddonSource "platform"; nil serves none
		operator    OperatorIdentity
		wantReason  string // "" means the add-on passes pre-flight
		wantMessage string
	}{
		{name: "built-in packages need no source", operator: OperatorIdentity{ID: "kaddons", Version: "v1.0.0"}},
		{name: "a missing source", sourceRef: "platform", wantReason: addonsv1alpha1.ReasonSourceNotReady,
			wantMessage: "AddonSource platform does not exist or has not been fetched yet"},
		{name: "a source without metadata", sourceRef: "platform",
			artifact: &sources.Artifact{Revision: "v1", Digest: "sha256:aa"},
			operator: OperatorIdentity{ID: "kaddons", Version: "v1.0.0"}},
		{name: "another operator's bundle", sourceRef: "platform",
			artifact:   &sources.Artifact{Revision: "v1", Digest: "sha256:aa", Metadata: sources.Metadata{OperatorID: "other"}},
			operator:   OperatorIdentity{ID: "kaddons", Version: "v1.0.0"},
			wantReason: addonsv1alpha1.ReasonOperatorMismatch, wantMessage: "AddonSource platform"},
		{name: "a bundle for a newer operator", sourceRef: "platform",
			artifact:   &sources.Artifact{Revision: "v1", Digest: "sha256:aa", Metadata: sources.Metadata{MinOperatorVersion: "v2.0.0"}},
			operator:   OperatorIdentity{ID: "kaddons", Version: "v1.0.0"},
			wantReason: addonsv1alpha1.ReasonOperatorTooOld, wantMessage: "v2.0.0"},
		{name: "a bundle for other Kubernetes versions", sourceRef: "platform",
			artifact: &sources.Artifact{Revision: "v1", Digest: "sha256:aa",
				Metadata: sources.Metadata{KubernetesVersions: ">= 1.35.0"}},
			operator:   OperatorIdentity{Version: "v1.0.0", KubernetesVersion: kubernetes},
			wantReason: addonsv1alpha1.ReasonKubernetesVersionUnsupported, wantMessage: "v1.34.2"},
		{name: "a bundle whose Kubernetes range holds the cluster", sourceRef: "platform",
			artifact: &sources.Artifact{Revision: "v1", Digest: "sha256:aa",
				Metadata: sources.Metadata{KubernetesVersions: ">= 1.30.0, < 1.40.0"}},
			operator: OperatorIdentity{Version: "v1.0.0", KubernetesVersion: kubernetes}},
		{name: "a package's own metadata", sourceRef: "platform",
			artifact:   &sources.Artifact{Revision: "v1", Digest: "sha256:aa", Dir: "package-metadata"},
			operator:   OperatorIdentity{ID: "kaddons", Version: "v1.0.0"},
			wantReason: addonsv1alpha1.ReasonOperatorTooOld, wantMessage: "package coredns/1.12.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			registry := NewArtifactRegistry("")
			if tc.artifact != nil {
				a := *tc.artifact
				switch a.Dir {
				case "package-metadata":
					a.Dir = treeWithPackageMetadata(t, "  kaddons.dev.operator.min-version.v1: v3.0.0\n")
				default:
					a.Dir = treeWithPackageMetadata(t, "")
				}
				registry.Set("platform", &a, SourceTrust{AsOperator: true, Pinned: true})
			}
			r, _ := testReconciler(t, Options{Artifacts: registry, Operator: tc.operator})
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Generation: 1}}
			addon.Spec.CommonSpec = addonv1alpha1.CommonSpec{Version: "1.12.1"}
			addon.Spec.SourceRef = tc.sourceRef
			st := &reconcileState{addon: addon}
			out, _ := runPhases(context.Background(), st, phasesBetween(r.phases(), phaseResolve, phasePreflight))
			if tc.wantReason == "" {
				if out.stop {
					t.Fatalf("stopped with %s: %s", out.reason, out.message)
				}
				if tc.artifact != nil && (st.artifact.Digest != tc.artifact.Digest || st.catalog == r.catalog) {
					t.Errorf("source = %+v, want the artifact %s", st.artifact, tc.artifact.Digest)
				}
				if tc.artifact == nil && st.catalog != r.catalog {
					t.Errorf("channels = %v, want the built-in source", st.catalog.Name())
				}
				return
			}
			if !out.stop || out.reason != tc.wantReason {
				t.Fatalf("outcome = %s (%s), want %s", out.reason, out.message, tc.wantReason)
			}
			if !strings.Contains(out.message, tc.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", out.message, tc.wantMessage)
			}
			if out.class == classFailed || out.err != nil && out.reason != addonsv1alpha1.ReasonSourceNotReady {
				t.Errorf("a refusal is not a failure: class %d, err %v", out.class, out.err)
			}
			if st.rendered.objects != nil {
				t.Error("a refused add-on was rendered")
			}
		})
	}
}

// TestSourceRegistry: one channels Source per digest, shared by every AddonSource with
// it; a failed source keeps its artifact; a removed one has none.
func TestSourceRegistry(t *testing.T) {
	dir := treeWithPackageMetadata(t, "")
	r := NewArtifactRegistry("")
	a := &sources.Artifact{Revision: "v1", Digest: "sha256:aa", Dir: dir}
	if !r.Set("one", a, SourceTrust{}) || !r.Set("two", a, SourceTrust{}) {
		t.Fatal("Set of a new artifact reported no change")
	}
	if r.Set("one", a, SourceTrust{}) {
		t.Error("Set of the same artifact reported a change")
	}
	one, err1 := r.Lookup("one")
	two, err2 := r.Lookup("two")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if one.Catalog != two.Catalog {
		t.Error("two sources with one digest have two channels Sources")
	}
	r.Fail("one", "FetchFailed", "connection refused")
	if got, err := r.Lookup("one"); err != nil || got.Digest != "sha256:aa" {
		t.Errorf("after a failed fetch Lookup = %+v, %v; want the last artifact", got, err)
	}
	r.Remove("one")
	if _, err := r.Lookup("one"); err == nil {
		t.Error("a removed source still has an artifact")
	}
	r.Fail("three", "VerificationFailed", "no signature")
	if _, err := r.Lookup("three"); err == nil || !strings.Contains(err.Error(), "VerificationFailed: no signature") {
		t.Errorf("Lookup of a failed source = %v, want its reason", err)
	}
}

// TestClusterVersionIsCached: the discovery request is made once per TTL.
func TestClusterVersionIsCached(t *testing.T) {
	calls := 0
	get := ClusterVersion(serverVersionFunc(func() (*version.Info, error) {
		calls++
		return &version.Info{GitVersion: "v1.34.2"}, nil
	}), 1<<62)
	for range 3 {
		if v, err := get(context.Background()); err != nil || v != "v1.34.2" {
			t.Fatalf("version = %q, %v", v, err)
		}
	}
	if calls != 1 {
		t.Errorf("discovery called %d times, want 1", calls)
	}
}

type serverVersionFunc func() (*version.Info, error)

func (f serverVersionFunc) ServerVersion() (*version.Info, error) { return f() }
