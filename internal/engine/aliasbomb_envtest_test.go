package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/enginetest"
)

// TestAliasBombInPatchesIsRefused sends a CoreDNS whose spec.patches holds a nine-level
// alias bomb every way one can reach the operator: as YAML to the API server (which
// decodes it), through a client that converts YAML to JSON first (kubectl, the plugin),
// and, were a patch's raw bytes ever YAML, to the engine's patch parser (it reads JSON
// only, so no alias is ever expanded). Each refuses it, the heap of the test process (the
// suite's manager included) stays bounded, and no add-on is created.
func TestAliasBombInPatchesIsRefused(t *testing.T) {
	ns := newNamespace(t)
	manifest := func(name string) string {
		return "apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
			"\nspec:\n  version: " + newVersion + "\n  patches:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata:\n" +
			"      name: coredns\n    data:\n" + aliasBomb("      ")
	}

	t.Run("the API server decodes the YAML", func(t *testing.T) {
		g := NewWithT(t)
		httpClient, err := rest.HTTPClientFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		url := fmt.Sprintf("%s/apis/addons.kaddons.dev/v1alpha1/namespaces/%s/coredns", strings.TrimSuffix(cfg.Host, "/"), ns)
		stop := watchHeap(t)
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader([]byte(manifest("over-the-wire"))))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/yaml")
		resp, err := httpClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(stop()).To(BeNumerically("<", heapBound))
		t.Logf("the API server answered %d: %s", resp.StatusCode, body)
		g.Expect(resp.StatusCode).To(BeNumerically(">=", 400), "the API server accepted the bomb: %s", body)
		g.Expect(resp.StatusCode).To(BeNumerically("<", 500), "the API server failed rather than refused: %s", body)
		g.Expect(string(body)).To(ContainSubstring("excessive aliasing"))
		err = k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "over-the-wire"}, &addonsv1alpha1.CoreDNS{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the add-on exists: %v", err)
	})

	t.Run("a client converts the YAML to JSON first", func(t *testing.T) {
		g := NewWithT(t)
		stop := watchHeap(t)
		_, err := yaml.YAMLToJSON([]byte(manifest("converted")))
		g.Expect(stop()).To(BeNumerically("<", heapBound))
		g.Expect(err).To(MatchError(ContainSubstring("excessive aliasing")))
	})

	t.Run("the engine reads a patch as JSON only", func(t *testing.T) {
		g := NewWithT(t)
		cr := enginetest.NewCoreDNS(ns, newVersion)
		cr.Spec.Patches = []*runtime.RawExtension{{Raw: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\ndata:\n" +
			aliasBomb("  "))}}
		stop := watchHeap(t)
		err := engine.ApplyPatches(context.Background(), engine.RenderInput{Addon: cr}, &engine.Objects{})
		g.Expect(stop()).To(BeNumerically("<", heapBound))
		g.Expect(channels.ReasonOf(err)).To(Equal(addonsv1alpha1.ReasonInvalidPatch), "%v", err)
		g.Expect(err).To(MatchError(ContainSubstring("patches[0] is not an object")))
	})
}
