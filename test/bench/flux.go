package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
)

const implFlux = "flux"

// Flux's concurrency as in Flux's own benchmark (fluxcd/flux-benchmark,
// install-manifests/install/kustomization.yaml and RESULTS.md: source-controller
// --concurrent=10, kustomize-controller --concurrent=20); every other flag keeps its
// default.
const (
	fluxSourceConcurrency    = 10
	fluxKustomizeConcurrency = 20
)

// fluxRequestedAt is the annotation Flux reconciles on besides its interval and a
// generation change (what `flux reconcile` sets).
const fluxRequestedAt = "reconcile.fluxcd.io/requestedAt"

// fluxInterval is the interval of the GitRepository and of every Kustomization: longer
// than any run, so that no periodic reconcile falls into a measured phase. The no-op and
// drift phases ask for the reconcile an interval would make.
const fluxInterval = "1h"

// The bench's Flux source: one GitRepository in a namespace of its own, on a loopback git
// server, with one directory per instance.
const (
	fluxSourceNamespace = "flux-bench"
	fluxSourceName      = "coredns"
	fluxBranch          = "main"
)

var (
	fluxKustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	fluxGitRepositoryGVK = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}
)

// fluxPaths are what Flux's processes need from the bench; they stay the same across a
// restart, so that the artifact URL in the GitRepository's status stays valid.
type fluxPaths struct {
	// dir is the build of hack/toolchain.sh (binaries and crds/).
	dir string
	// storagePath and storageAddr are where source-controller keeps and serves artifacts.
	storagePath, storageAddr string
}

// fluxImpl is Flux's kustomize-controller and source-controller, applying for each
// instance the objects kaddons renders for it, from one GitRepository.
func fluxImpl() impl {
	return impl{
		name:       implFlux,
		label:      "Flux kustomize-controller",
		gvr:        fluxKustomizationGVR,
		kind:       "Kustomization",
		controller: "kustomization",
		// Flux's recorder observes every reconcile's duration, per object.
		perAddonMetric:  "gotk_reconcile_duration_seconds_count",
		maxN:            func(o options) int { return o.fluxMaxN },
		fullMaxN:        func(o options) int { return o.fluxFullMaxN },
		processes:       fluxProcesses,
		touchAnnotation: fluxRequestedAt,
		requestOnDrift:  true,
		setup:           setupFlux,
		crdDirs:         func(p procPaths) []string { return []string{filepath.Join(p.flux.dir, "crds")} },
		// Replaced by setupFlux once the revision is known.
		applied: func(*unstructured.Unstructured) bool { return false },
	}
}

// fluxProcesses are source-controller and kustomize-controller, on loopback ports.
func fluxProcesses(p procPaths) ([]procSpec, error) {
	addrs := make([]string, 4)
	for i := range addrs {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = addr
	}
	return []procSpec{
		{
			name: "source-controller", bin: filepath.Join(p.flux.dir, "source-controller"), metricsAddr: addrs[0],
			args: []string{
				"--enable-leader-election=false",
				"--metrics-addr=" + addrs[0], "--health-addr=" + addrs[1],
				"--storage-path=" + p.flux.storagePath,
				"--storage-addr=" + p.flux.storageAddr, "--storage-adv-addr=" + p.flux.storageAddr,
				"--concurrent=" + strconv.Itoa(fluxSourceConcurrency),
			},
		},
		{
			name: "kustomize-controller", bin: filepath.Join(p.flux.dir, "kustomize-controller"), metricsAddr: addrs[2],
			args: []string{
				"--enable-leader-election=false",
				"--metrics-addr=" + addrs[2], "--health-addr=" + addrs[3],
				"--concurrent=" + strconv.Itoa(fluxKustomizeConcurrency),
			},
		},
	}, nil
}

// fluxBuild finds the Flux build of hack/toolchain.sh; it returns a note saying how to
// build it when it is missing.
func fluxBuild(ctx context.Context, repo string) (dir, missing string) {
	out, err := exec.CommandContext(ctx, filepath.Join(repo, "hack", "toolchain.sh"), "dir", "flux").Output()
	if err != nil {
		return "", fmt.Sprintf("Flux was not measured: `hack/toolchain.sh dir flux` failed (%v)", err)
	}
	dir = strings.TrimSpace(string(out))
	for _, want := range []string{"source-controller", "kustomize-controller", "crds"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			return "", fmt.Sprintf("Flux was not measured: %s has no %s; build it with `hack/toolchain.sh build flux`", dir, want)
		}
	}
	return dir, ""
}

// newFluxPaths allocates the source-controller storage of one run.
func newFluxPaths(o options, work string, n int) (fluxPaths, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return fluxPaths{}, err
	}
	path := filepath.Join(work, fmt.Sprintf("flux-storage-n%d", n))
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fluxPaths{}, fmt.Errorf("creating the Flux storage: %w", err)
	}
	return fluxPaths{dir: o.fluxDir, storagePath: path, storageAddr: addr}, nil
}

// setupFlux publishes what kaddons would apply for each of the run's instances in one git
// repository, one directory per instance, creates the GitRepository and waits until
// source-controller has its artifact; from then on each Kustomization the create phase
// creates applies one directory.
func setupFlux(ctx context.Context, s *scenario) error {
	started := time.Now()
	tree := filepath.Join(s.work, fmt.Sprintf("flux-repo-n%d", s.size))
	if err := renderInstances(ctx, s, tree); err != nil {
		return err
	}
	server, err := gittestserver.NewTempGitServer()
	if err != nil {
		return fmt.Errorf("creating the git server: %w", err)
	}
	s.cleanups = append(s.cleanups, func() error { return os.RemoveAll(server.Root()) })
	server.AutoCreate()
	if err := server.StartHTTP(); err != nil {
		return fmt.Errorf("starting the git server: %w", err)
	}
	s.cleanups = append(s.cleanups, func() error { server.StopHTTP(); return nil })
	url := server.HTTPAddress() + "/bench/coredns.git"
	commit, err := commitTree(ctx, tree, url)
	if err != nil {
		return err
	}
	revision := fluxBranch + "@sha1:" + commit
	if err := createGitRepository(ctx, s, url); err != nil {
		return err
	}
	if err := waitArtifact(ctx, s, revision); err != nil {
		return err
	}
	s.im.applied = func(u *unstructured.Unstructured) bool { return fluxApplied(u, revision) }
	s.im.instanceSpec = fluxKustomizationSpec
	fmt.Printf("    Flux source ready at %s in %s\n", revision, time.Since(started).Round(time.Millisecond))
	return nil
}

// fluxKustomizationSpec is the Kustomization of the instance in namespace: its directory
// of the one GitRepository, pruned, not waited for, with Flux's defaults otherwise.
func fluxKustomizationSpec(namespace string) map[string]any {
	return map[string]any{
		"interval": fluxInterval,
		"path":     "./" + namespace,
		"prune":    true,
		"wait":     false,
		"sourceRef": map[string]any{
			"kind": fluxGitRepositoryGVK.Kind, "name": fluxSourceName, "namespace": fluxSourceNamespace,
		},
	}
}

// fluxApplied: the Kustomization is Ready for its generation with revision applied.
func fluxApplied(u *unstructured.Unstructured, revision string) bool {
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	return observed == u.GetGeneration() && applied == revision && readyTrue(u)
}

// readyTrue reports whether u's Ready condition is True for its generation.
func readyTrue(u *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		observed, _, _ := unstructured.NestedInt64(m, "observedGeneration")
		return m["status"] == string(metav1.ConditionTrue) && (observed == 0 || observed == u.GetGeneration())
	}
	return false
}

// renderInstances writes, for every instance of the run, the objects kaddons' engine
// renders for a CoreDNS with an empty spec in that instance's namespace, into
// dir/<namespace>/coredns.yaml: the same objects and names (the ClusterRole and its
// binding suffixed with the namespace), without kaddons' own labels, which would claim
// the objects for kaddons.
func renderInstances(ctx context.Context, s *scenario, dir string) error {
	src := channels.NewCatalog(filepath.Join(s.o.repo, "channels"), "")
	r, err := engine.NewWithClients(controllers.CoreDNSDefinition(), engine.Options{Catalog: src}, engine.Clients{
		Client: s.cluster.client, Reader: s.cluster.client, Scheme: benchScheme, Mapper: s.cluster.client.RESTMapper(),
		Recorder: &events.FakeRecorder{},
	})
	if err != nil {
		return fmt.Errorf("creating the kaddons engine to render: %w", err)
	}
	for i := range s.size {
		ns, name := addonRef(i)
		obj := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("flux-" + ns), Generation: 1}}
		objects, err := r.Render(ctx, obj)
		if err != nil {
			return fmt.Errorf("rendering CoreDNS %s/%s: %w", ns, name, err)
		}
		docs := make([]string, 0, len(objects.Items))
		for _, o := range objects.Items {
			u := o.UnstructuredObject().DeepCopy()
			u.SetLabels(withoutKaddonsLabels(u.GetLabels()))
			data, err := yaml.Marshal(u.Object)
			if err != nil {
				return err
			}
			docs = append(docs, string(data))
		}
		if err := os.MkdirAll(filepath.Join(dir, ns), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, ns, "coredns.yaml"), []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
			return fmt.Errorf("writing the objects of %s: %w", ns, err)
		}
	}
	return nil
}

// withoutKaddonsLabels drops the labels kaddons adds to what it applies.
func withoutKaddonsLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, addonsv1alpha1.GroupVersion.Group+"/") || (k == "app.kubernetes.io/managed-by" && v == "kaddons") {
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// commitTree makes dir a git work tree, commits everything on main, pushes it to url and
// returns the commit's hash.
func commitTree(ctx context.Context, dir, url string) (string, error) {
	const quiet = "--quiet"
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=kaddons bench", "GIT_AUTHOR_EMAIL=bench@kaddons.dev",
			"GIT_COMMITTER_NAME=kaddons bench", "GIT_COMMITTER_EMAIL=bench@kaddons.dev", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	for _, args := range [][]string{
		{"init", quiet, "--initial-branch=" + fluxBranch},
		{"add", "--all"},
		{"commit", quiet, "-m", "CoreDNS instances as kaddons renders them"},
		{"push", quiet, url, fluxBranch},
	} {
		if _, err := git(args...); err != nil {
			return "", err
		}
	}
	return git("rev-parse", "HEAD")
}

// createGitRepository creates the namespace of the source and the GitRepository at url.
func createGitRepository(ctx context.Context, s *scenario, url string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxSourceNamespace}}
	if err := s.cluster.client.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	repo := &unstructured.Unstructured{}
	repo.SetGroupVersionKind(fluxGitRepositoryGVK)
	repo.SetNamespace(fluxSourceNamespace)
	repo.SetName(fluxSourceName)
	repo.Object["spec"] = map[string]any{"interval": fluxInterval, "url": url, "ref": map[string]any{"branch": fluxBranch}}
	if err := s.cluster.client.Create(ctx, repo); err != nil {
		return fmt.Errorf("creating GitRepository %s/%s: %w", fluxSourceNamespace, fluxSourceName, err)
	}
	return nil
}

// waitArtifact waits until the GitRepository is Ready with an artifact of revision.
func waitArtifact(ctx context.Context, s *scenario, revision string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		repo := &unstructured.Unstructured{}
		repo.SetGroupVersionKind(fluxGitRepositoryGVK)
		err := s.cluster.client.Get(ctx, types.NamespacedName{Namespace: fluxSourceNamespace, Name: fluxSourceName}, repo)
		if err == nil {
			got, _, _ := unstructured.NestedString(repo.Object, "status", "artifact", "revision")
			if got == revision && readyTrue(repo) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GitRepository %s/%s has no artifact of %s (%s; log: %s): %w", fluxSourceNamespace, fluxSourceName,
				revision, gitRepositoryReady(s, repo), s.op.logs(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// gitRepositoryReady formats the Ready condition of a GitRepository read last.
func gitRepositoryReady(_ *scenario, repo *unstructured.Unstructured) string {
	raw, _, _ := unstructured.NestedSlice(repo.Object, "status", "conditions")
	var conditions []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := metav1.Condition{}
		c.Type, _ = m["type"].(string)
		status, _ := m["status"].(string)
		c.Status = metav1.ConditionStatus(status)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		conditions = append(conditions, c)
	}
	return "Ready: " + conditionText(meta.FindStatusCondition(conditions, "Ready"))
}
