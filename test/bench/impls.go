package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	benchv1alpha1 "github.com/kaddons/kaddons/test/bench/api/v1alpha1"
)

// impl is one operator under test.
type impl struct {
	// name is the -impl name; label is how the report names it.
	name, label string
	// gvr and kind are the add-on resource the operator reconciles.
	gvr  schema.GroupVersionResource
	kind string
	// controller is the controller's name in controller_runtime_reconcile_total.
	controller string
	// perAddonMetric, when set, names a metric of the operator with one series per add-on
	// (labels kind, namespace and name), which appears when the add-on's first reconcile in
	// the process finishes: the cold start's per-add-on signal.
	perAddonMetric string
	// pprof is whether the operator's command serves pprof on procPaths.profilerAddr.
	pprof bool
	// command returns the operator's command line, given the bench's paths.
	command func(p procPaths) (string, []string)
	// env returns what the operator's environment adds to the bench's.
	env func(p procPaths) []string
	// processes, when set, replaces command and env: the operator's processes.
	processes func(p procPaths) ([]procSpec, error)
	// applied reports whether an add-on reports the applied version for its generation.
	applied func(u *unstructured.Unstructured) bool
	// maxN returns the largest N the implementation runs at, from the options; 0 is no
	// limit. fullMaxN, when set, is the largest N of its full runs (the steady-state
	// phases); above it, only the create phase and the memory are measured.
	maxN, fullMaxN func(o options) int
	// spec is every add-on's spec; nil is an empty spec (the default channel's version
	// from the operator's own packages).
	spec map[string]any
	// instanceSpec, when set, adds the fields of the add-on in namespace to spec.
	instanceSpec func(namespace string) map[string]any
	// touchAnnotation is the annotation the no-op phase changes; empty is
	// bench.kaddons.dev/touched.
	touchAnnotation string
	// requestOnDrift: the operator does not watch what it applied, so the drift phase
	// asks for a reconcile of the drifted add-on (its touchAnnotation), as its interval
	// would.
	requestOnDrift bool
	// setup, when set, prepares the run once the operator is ready and before the create
	// phase.
	setup func(ctx context.Context, s *scenario) error
	// crdDirs lists the CRDs the control plane needs besides kaddons' and the bench's.
	crdDirs func(p procPaths) []string
}

// procPaths are what an operator process needs from the bench.
type procPaths struct {
	repo, manager, metricsAddr string
	// baselineManager is the -baseline-manager binary.
	baselineManager string
	// profilerAddr is where the kaddons manager serves pprof (--profiler-address), so that
	// the bench can ask it for a garbage collection before reading its live heap.
	profilerAddr string
	// kaddonsConfig is the kaddons manager's configuration file.
	kaddonsConfig    string
	stockConcurrency int
	// kaddonsFlags are extra flags for the kaddons manager.
	kaddonsFlags []string
	// memoryLimit is the kaddons manager's GOMEMLIMIT.
	memoryLimit memoryLimit
	// flux is where Flux's processes are and keep their artifacts.
	flux fluxPaths
}

// coreDNS is the add-on's component name, and the name of its Deployment and of
// kaddons' controller for it.
const coreDNS = "coredns"

const (
	implKaddons       = "kaddons"
	implStockDirect   = "stock-direct"
	implStockApplySet = "stock-applyset"
)

// impls lists the implementations in report order.
var impls = []impl{
	{
		name:       implKaddons,
		label:      "kaddons",
		gvr:        addonsv1alpha1.GroupVersion.WithResource("coredns"),
		kind:       "CoreDNS",
		controller: coreDNS,
		// The engine sets it at the end of every reconcile (docs/lifecycle.md).
		perAddonMetric: "kaddons_addon_ready",
		pprof:          true,
		command: func(p procPaths) (string, []string) {
			args := append([]string{
				"--channels", filepath.Join(p.repo, "channels"),
				"--metrics-bind-address", p.metricsAddr, "--metrics-secure=false",
				"--health-probe-bind-address=0",
				"--config", p.kaddonsConfig,
				"--profiler-address", p.profilerAddr,
			}, p.kaddonsFlags...)
			return p.manager, args
		},
		// The Deployment's downward API: GOMEMLIMIT is the container's memory limit.
		env:     func(p procPaths) []string { return p.memoryLimit.env() },
		applied: kaddonsApplied,
	},
	stockImpl(implStockDirect, "stock KDP, DirectApplier", "direct"),
	stockImpl(implStockApplySet, "stock KDP, ApplySet applier", "applyset"),
	fluxImpl(),
}

// stockImpl describes the stock reconciler run with one of KDP's appliers.
func stockImpl(name, label, applier string) impl {
	return impl{
		name:       name,
		label:      label,
		gvr:        benchv1alpha1.GroupVersion.WithResource("stockcoredns"),
		kind:       "StockCoreDNS",
		controller: "stockcoredns",
		maxN:       func(o options) int { return o.stockMaxN },
		command: func(p procPaths) (string, []string) {
			self, err := os.Executable()
			if err != nil {
				self = os.Args[0]
			}
			return self, []string{
				"-role=stock", "-applier=" + applier,
				"-channels-dir=" + filepath.Join(p.repo, "channels"),
				"-metrics-addr=" + p.metricsAddr,
				"-concurrency=" + strconv.Itoa(p.stockConcurrency),
			}
		},
		applied: stockApplied,
	}
}

// runsAt reports whether the implementation runs at size n.
func (im impl) runsAt(o options, n int) bool {
	if im.maxN == nil {
		return true
	}
	limit := im.maxN(o)
	return limit <= 0 || n <= limit
}

// fullAt reports whether the implementation's run at size n measures the steady state.
func (im impl) fullAt(o options, n int) bool {
	if im.fullMaxN == nil {
		return true
	}
	limit := im.fullMaxN(o)
	return limit <= 0 || n <= limit
}

// implNames lists the -impl names.
func implNames() []string {
	names := make([]string, 0, len(impls))
	for _, i := range impls {
		names = append(names, i.name)
	}
	return names
}

// implByName returns the implementation called name.
func implByName(name string) (impl, bool) {
	for _, i := range impls {
		if i.name == name {
			return i, true
		}
	}
	return impl{}, false
}

// kaddonsApplied: status.appliedVersion is set and status.observedGeneration is the
// current generation.
func kaddonsApplied(u *unstructured.Unstructured) bool {
	version, _, _ := unstructured.NestedString(u.Object, "status", "appliedVersion")
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return version != "" && observed == u.GetGeneration()
}

// stockApplied is KDP's equivalent: KDP writes status.observedGeneration after every
// reconcile, and a phase computed from the children only when the apply succeeded
// (otherwise "Applying", "InternalError" or "VersionMismatch").
func stockApplied(u *unstructured.Unstructured) bool {
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	switch phase {
	case "", "Applying", "InternalError", "VersionMismatch":
		return false
	}
	return observed == u.GetGeneration()
}

// newAddon returns add-on number i of kind, in its own namespace, with the
// implementation's spec.
func (im impl) newAddon(namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(im.gvr.GroupVersion().WithKind(im.kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	spec := withSpec(im.spec)
	if im.instanceSpec != nil {
		maps.Copy(spec, im.instanceSpec(namespace))
	}
	u.Object["spec"] = spec
	return u
}

// touchKey is the annotation the no-op phase changes on im's add-ons.
func (im impl) touchKey() string {
	if im.touchAnnotation != "" {
		return im.touchAnnotation
	}
	return "bench.kaddons.dev/touched"
}

// resourcePath is the API path of the add-on collection across namespaces, which the
// operator watches once its caches start.
func (im impl) resourcePath() string {
	return fmt.Sprintf("/apis/%s/%s/%s", im.gvr.Group, im.gvr.Version, im.gvr.Resource)
}
