// Command bench measures the kaddons engine against a stock KDP reconciler, side by side
// on the same CoreDNS packages, against a real kube-apiserver and etcd, and writes
// docs/performance.md. It is a benchmark, not a test: targets are printed as PASS or
// MISS and never fail the run.
//
// Every measurement gets a fresh control plane (envtest, with the binaries that
// hack/toolchain.sh builds; KUBEBUILDER_ASSETS must point at them). The operator under
// test runs as a separate process whose kubeconfig points at a counting reverse proxy
// in this process, so that both operators are counted, and their memory measured, the
// same way. The stock reconciler is this same binary run with -role=stock.
//
// Run it with `make bench`, or for a quick look:
//
//	KUBEBUILDER_ASSETS=$(hack/toolchain.sh dir) go run ./test/bench -n 1,50 -unrelated 0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Roles of the binary: the benchmark itself, or the stock reconciler it starts.
const (
	roleBench = "bench"
	roleStock = "stock"
)

// options are the bench's command line.
type options struct {
	role string

	// Bench role.
	sizes     []int
	unrelated int
	impls     []string
	out       string
	repo      string
	manager   string
	// baselineManager, when set, is a second kaddons manager binary measured beside
	// manager in the same rounds (-baseline-manager), labelled baselineLabel.
	baselineManager, baselineLabel string
	// profile: capture a CPU profile of every kaddons manager during its create phase.
	profile          bool
	kaddonsFlags     []string
	quiet            time.Duration
	timeout          time.Duration
	stockConcurrency int
	// stockMaxN is the largest N the stock KDP rows run at; extraMaxN caps the size of
	// the unrelated-objects and OCI runs.
	stockMaxN, extraMaxN int
	// fluxMaxN is the largest N the Flux rows run at, fluxFullMaxN the largest of its full
	// runs; fluxDir is Flux's build.
	fluxMaxN, fluxFullMaxN int
	fluxDir                string
	skipRender             bool
	oci, onlyOCI           bool
	// kaddonsConfig is the configuration file runBench writes for the kaddons manager.
	kaddonsConfig string
	// memoryLimit is the kaddons manager's GOMEMLIMIT, as its Deployment sets it, resolved
	// from memoryLimitFlag (-memory-limit).
	memoryLimit     memoryLimit
	memoryLimitFlag string
	keep            bool
	// repeat is how many times kaddons is measured at the sizes from repeatMinN up.
	repeat, repeatMinN int

	// Stock role.
	stock stockOptions
}

func main() {
	// A flag set of its own: KDP's packages register global flags (--channel,
	// --private-registry, ...) that mean nothing here.
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var o options
	var sizes, impls, kaddonsFlags, memLimit string
	fs.StringVar(&o.role, "role", roleBench, "bench runs the benchmark; stock runs the stock KDP reconciler (started by the bench itself).")
	fs.StringVar(&sizes, "n", "1,50,200,500", "Comma-separated numbers of CoreDNS instances to measure.")
	fs.IntVar(&o.stockMaxN, "stock-max-n", 500,
		"The largest -n size the stock KDP rows run at (they take minutes per size); 0 runs them at every size.")
	fs.IntVar(&o.fluxMaxN, "flux-max-n", 500, "The largest -n size the Flux rows run at; 0 runs them at every size.")
	fs.IntVar(&o.fluxFullMaxN, "flux-full-max-n", 50,
		"The largest -n size at which Flux's no-op, drift and restart phases run (each reconciles every Kustomization "+
			"again); above it only its create phase and memory are measured. 0 runs them at every size.")
	fs.IntVar(&o.extraMaxN, "extra-max-n", 1000,
		"The unrelated-objects and OCI runs go at the largest -n size up to this one (the smallest size when none is); 0 means the largest.")
	fs.IntVar(&o.unrelated, "unrelated", 5000,
		"Unrelated Deployments and ConfigMaps created before a second kaddons run at the largest N; 0 skips that run.")
	fs.StringVar(&impls, "impl", strings.Join(implNames(), ","), "Comma-separated implementations to measure.")
	fs.StringVar(&o.out, "out", "docs/performance.md", "The report to write, relative to -repo; empty prints it instead.")
	fs.StringVar(&o.repo, "repo", ".", "The kaddons repository (for channels/, config/crd and the manager's sources).")
	fs.StringVar(&o.manager, "manager", "", "A kaddons manager binary to use instead of building one from -repo.")
	fs.StringVar(&o.baselineManager, "baseline-manager", "",
		"A second kaddons manager binary (e.g. one built from an older commit) measured beside the one under test, "+
			"in the same rounds on the same machine; the report compares the two side by side.")
	fs.StringVar(&o.baselineLabel, "baseline-label", "kaddons (baseline)", "How the report names the -baseline-manager build.")
	fs.BoolVar(&o.profile, "profile", false,
		"Capture a CPU profile (pprof, --profiler-address) of every kaddons manager during its create phase; "+
			"the report lists the top entries of the reported run at the largest size, and -keep keeps the profiles.")
	fs.StringVar(&kaddonsFlags, "kaddons-flags", "", "Extra flags for the kaddons manager, space-separated (e.g. --max-concurrent-reconciles=8).")
	fs.DurationVar(&o.quiet, "quiet", 2*time.Second, "How long the operator must send no request for a phase to count as finished.")
	fs.DurationVar(&o.timeout, "phase-timeout", 15*time.Minute, "The longest any one phase may take.")
	fs.IntVar(&o.stockConcurrency, "stock-concurrency", 1,
		"MaxConcurrentReconciles of the stock reconciler (1, the controller-runtime default the KDP guestbook example runs with).")
	fs.BoolVar(&o.skipRender, "skip-render", false, "Skip the render micro-benchmarks.")
	fs.BoolVar(&o.oci, "oci", true, "Also run kaddons with every add-on on one OCI AddonSource at the largest N, counting the bundle's pulls.")
	fs.BoolVar(&o.onlyOCI, "only-oci", false, "Run only the one-OCI-source scenario, at every -n size.")
	fs.StringVar(&memLimit, "memory-limit", "",
		"The kaddons manager's memory limit (e.g. 256Mi), passed as GOMEMLIMIT in bytes as the Deployment's downward API does; "+
			"empty reads limits.memory of config/manager/manager.yaml; none sets no GOMEMLIMIT.")
	fs.IntVar(&o.repeat, "repeat", 3,
		"How many times kaddons is measured at each size from -repeat-min-n up, in rounds over those sizes, each on a fresh control plane; "+
			"the run with the median applied time is reported, with every run's applied time.")
	fs.IntVar(&o.repeatMinN, "repeat-min-n", growthBaseN, "The smallest size at which kaddons is measured -repeat times.")
	fs.BoolVar(&o.keep, "keep", false, "Keep the work directory (operator logs, request traces, kubeconfigs) after the run.")
	o.stock.bindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	o.kaddonsFlags = strings.Fields(kaddonsFlags)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch o.role {
	case roleStock:
		err = runStock(ctx, o.stock)
	case roleBench:
		if o.sizes, err = parseSizes(sizes); err == nil {
			if o.impls, err = parseImpls(impls); err == nil {
				o.memoryLimitFlag = memLimit
				if o.baselineManager != "" {
					addBaseline(&o)
				}
				err = runBench(ctx, o)
			}
		}
	default:
		err = fmt.Errorf("unknown -role %q: use bench or stock", o.role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// parseSizes parses the -n list.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-n: %q is not a positive number", f)
		}
		sizes = append(sizes, n)
	}
	if len(sizes) == 0 {
		return nil, errors.New("-n names no size")
	}
	return sizes, nil
}

// parseImpls parses the -impl list.
func parseImpls(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		name := strings.TrimSpace(f)
		if _, ok := implByName(name); !ok {
			return nil, fmt.Errorf("-impl: unknown implementation %q (known: %s)", name, strings.Join(implNames(), ", "))
		}
		out = append(out, name)
	}
	return out, nil
}
