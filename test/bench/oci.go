package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// ociRepository and ociTag name the bundle in the scenario's registry; ociSourceName is
// the AddonSource every add-on of the scenario names.
const (
	ociRepository = "platform/addons"
	ociTag        = "stable"
	ociSourceName = "bench-oci"
)

// ociRun is the one-OCI-source scenario at one size: N add-ons with spec.sourceRef on one
// AddonSource, whose bundle an in-process registry on 127.0.0.1 serves.
type ociRun struct {
	n      int
	create createResult
	// digest is the pushed bundle's manifest digest; onDigest counts the add-ons whose
	// status.source.digest is that digest once all are applied.
	digest   string
	onDigest int
	// layerGETs (bundle pulls), configGETs and manifestGETs count the registry's reads of
	// the bundle by digest; resolutions count the HEAD and GET requests of the tag.
	layerGETs, configGETs, manifestGETs, resolutions int
}

// ociRegistry is an in-process registry with two doors: the operator pulls through the
// counted one; the bench pushes through the other.
type ociRegistry struct {
	pull, push *httptest.Server

	mu     sync.Mutex
	counts map[string]int
}

// startOCIRegistry starts the registry on two loopback ports.
func startOCIRegistry() *ociRegistry {
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r := &ociRegistry{counts: map[string]int{}}
	r.pull = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			r.mu.Lock()
			r.counts[req.Method+" "+req.URL.Path]++
			r.mu.Unlock()
		}
		handler.ServeHTTP(w, req)
	}))
	r.push = httptest.NewServer(handler)
	return r
}

func (r *ociRegistry) close() {
	r.pull.Close()
	r.push.Close()
}

// ociRef returns the bundle's reference through door.
func ociRef(door *httptest.Server) string {
	return strings.TrimPrefix(door.URL, "http://") + "/" + ociRepository + ":" + ociTag
}

// count returns how many method requests the pull door served for the repository's kind
// ("manifests" or "blobs") and reference.
func (r *ociRegistry) count(method, kind, reference string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[method+" /v2/"+ociRepository+"/"+kind+"/"+reference]
}

// pushedBundle is what the scenario pushed: the manifest, configuration and layer digests.
type pushedBundle struct{ digest, config, layer string }

// pushChannels builds a bundle of the repository's channels tree, the one the manager
// embeds, and pushes it.
func (r *ociRegistry) pushChannels(ctx context.Context, repo string) (pushedBundle, error) {
	img, _, err := publish.Build(filepath.Join(repo, "channels"), publish.BuildOptions{})
	if err != nil {
		return pushedBundle{}, fmt.Errorf("building the bundle: %w", err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return pushedBundle{}, err
	}
	if len(manifest.Layers) != 1 {
		return pushedBundle{}, fmt.Errorf("the bundle has %d layers, not 1", len(manifest.Layers))
	}
	ref, err := publish.Push(ctx, img, ociRef(r.push), publish.RegistryOptions{Insecure: true})
	if err != nil {
		return pushedBundle{}, fmt.Errorf("pushing the bundle: %w", err)
	}
	return pushedBundle{digest: ref.DigestStr(), config: manifest.Config.Digest.String(), layer: manifest.Layers[0].Digest.String()}, nil
}

// measureOCI runs the scenario at size n: the kaddons manager with a source cache of its
// own, one oci AddonSource, then n add-ons that name it, until all are applied.
func measureOCI(ctx context.Context, o options, n int, work string) (r ociRun, err error) {
	r.n = n
	im, _ := implByName(implKaddons)
	im.name = implKaddons + "-oci"
	im.spec = map[string]any{"sourceRef": ociSourceName}
	// A fresh cache: a bundle left by an earlier run would not be pulled at all.
	flags := append(slices.Clone(o.kaddonsFlags), "--source-cache-dir="+filepath.Join(work, fmt.Sprintf("oci-cache-n%d", n)))
	s := &scenario{o: o, im: im, size: n, work: work,
		paths: procPaths{repo: o.repo, manager: o.manager, stockConcurrency: o.stockConcurrency, kaddonsFlags: flags,
			kaddonsConfig: o.kaddonsConfig, memoryLimit: o.memoryLimit}}
	reg := startOCIRegistry()
	defer func() {
		err = errors.Join(err, s.close())
		reg.close()
	}()
	bundle, err := reg.pushChannels(ctx, o.repo)
	if err != nil {
		return r, err
	}
	r.digest = bundle.digest
	if err := s.start(ctx); err != nil {
		return r, err
	}
	src := &addonsv1alpha1.AddonSource{
		ObjectMeta: metav1.ObjectMeta{Name: ociSourceName},
		// Pinned by the digest just pushed, and trusted as the operator's own packages:
		// the add-ons are in trusted namespaces. The registry is on 127.0.0.1.
		Spec: addonsv1alpha1.AddonSourceSpec{ApplyAsOperator: true, InsecureLoopback: true,
			OCI: &addonsv1alpha1.OCISource{URL: ociRef(reg.pull), Insecure: true, Digest: bundle.digest}},
	}
	if err := s.cluster.client.Create(ctx, src); err != nil {
		return r, fmt.Errorf("creating AddonSource %s: %w", src.Name, err)
	}
	pctx, cancel := s.phaseContext(ctx)
	defer cancel()
	if r.create, err = createAddons(pctx, s.cluster, im, n); err != nil {
		return r, fmt.Errorf("create phase: %w (%s)", err, s.readyMessages(ctx))
	}
	if err := s.proxy.waitQuiet(pctx, o.quiet); err != nil {
		return r, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(im.gvr.GroupVersion().WithKind(im.kind + "List"))
	if err := s.cluster.client.List(pctx, list); err != nil {
		return r, fmt.Errorf("listing the add-ons: %w", err)
	}
	for _, u := range list.Items {
		if d, _, _ := unstructured.NestedString(u.Object, "status", "source", "digest"); d == bundle.digest {
			r.onDigest++
		}
	}
	r.layerGETs = reg.count(http.MethodGet, "blobs", bundle.layer)
	r.configGETs = reg.count(http.MethodGet, "blobs", bundle.config)
	r.manifestGETs = reg.count(http.MethodGet, "manifests", bundle.digest)
	r.resolutions = reg.count(http.MethodHead, "manifests", ociTag) + reg.count(http.MethodGet, "manifests", ociTag)
	return r, nil
}

// readyMessages returns the Ready conditions of the AddonSource and of the first add-on:
// why the add-ons are not applied.
func (s *scenario) readyMessages(ctx context.Context) string {
	src := &addonsv1alpha1.AddonSource{}
	srcReady := "not read"
	if err := s.cluster.client.Get(ctx, client.ObjectKey{Name: ociSourceName}, src); err == nil {
		srcReady = conditionText(meta.FindStatusCondition(src.Status.Conditions, addonsv1alpha1.ConditionReady))
	}
	ns, name := addonRef(0)
	addon := &addonsv1alpha1.CoreDNS{}
	addonReady := "not read"
	if err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, addon); err == nil {
		addonReady = conditionText(meta.FindStatusCondition(addon.Status.Conditions, addonsv1alpha1.ConditionReady))
	}
	return fmt.Sprintf("AddonSource %s Ready: %s; %s/%s Ready: %s", ociSourceName, srcReady, ns, name, addonReady)
}

// conditionText formats a condition as "status reason: message".
func conditionText(c *metav1.Condition) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

// measureOCI performs the scenario at size n and records it, or its failure.
func (res *results) measureOCI(ctx context.Context, o options, n int, work string) {
	fmt.Printf("bench: kaddons, one OCI source, N=%d\n", n)
	started := time.Now()
	r, err := measureOCI(ctx, o, n, work)
	if err != nil {
		fmt.Printf("    FAILED: %v\n", err)
		res.failures = append(res.failures, fmt.Sprintf("kaddons on one OCI source at N=%d: %v", n, err))
		return
	}
	fmt.Printf("    applied in %s, %d/%d on the bundle's digest, %d bundle pull(s) (run took %s)\n", r.create.wall.Round(time.Millisecond),
		r.onDigest, r.n, r.layerGETs, time.Since(started).Round(time.Second))
	res.oci = append(res.oci, r)
}

// ociRows is the report's table of the scenario.
func (res *results) ociRows() [][]string {
	rows := make([][]string, 0, 1+len(res.oci))
	rows = append(rows, []string{"N", colApplied, "On the bundle's digest", "Bundle pulls (layer GETs)", "Configuration GETs",
		"Manifest GETs by digest", "Tag resolutions"})
	for _, r := range res.oci {
		rows = append(rows, []string{fmt.Sprint(r.n), r.create.wall.Round(time.Millisecond).String(), fmt.Sprintf("%d/%d", r.onDigest, r.n),
			fmt.Sprint(r.layerGETs), fmt.Sprint(r.configGETs), fmt.Sprint(r.manifestGETs), fmt.Sprint(r.resolutions)})
	}
	return rows
}

// ociTarget: every add-on on one OCI source applies the bundle's digest, pulled once.
func (res *results) ociTarget() string {
	if len(res.oci) == 0 {
		return "MISS add-ons on one OCI source make one bundle pull: not measured"
	}
	pass := true
	parts := make([]string, 0, len(res.oci))
	for _, r := range res.oci {
		pass = pass && r.layerGETs == 1 && r.manifestGETs == 1 && r.onDigest == r.n
		parts = append(parts, fmt.Sprintf("N=%d: %d pull(s), %d/%d on the digest", r.n, r.layerGETs, r.onDigest, r.n))
	}
	return verdict(pass, "add-ons on one OCI source make one bundle pull; %s", strings.Join(parts, "; "))
}

// withSpec returns a copy of spec for one add-on.
func withSpec(spec map[string]any) map[string]any {
	if spec == nil {
		return map[string]any{}
	}
	return maps.Clone(spec)
}
