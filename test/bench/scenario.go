package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// run is one operator at one size on a fresh control plane.
type run struct {
	impl      impl
	n         int
	unrelated int

	// create: from the first create until every add-on is applied, then until quiet.
	create createResult
	// walls are the applied times of every run of a repeated measurement, shortest
	// first, of which this run's is the median; nil for a single run.
	walls        []time.Duration
	createCounts tally
	createServer serverDelta
	// profile is the operator's CPU profile over the create phase, with -profile.
	profile cpuProfile

	// After the create phase settled.
	mem        memory
	heap       float64
	liveHeap   float64
	goroutines float64
	// memLimit is the soft memory limit the operator's Go runtime reports.
	memLimit float64
	watches  int

	// Steady state; measured only on full runs.
	full    bool
	touch   steady
	restart steady
	cold    coldStart
	drift   drift
}

// steady is a phase in which no add-on's desired state changes.
type steady struct {
	reconciles float64
	counts     tally
	// writes lists the operator's writes other than Events.
	writes []string
	server serverDelta
}

// reconcileRequests returns the requests a reconcile makes itself: everything but
// discovery and the informers' lists and watches, which a restart cannot avoid.
func (s steady) reconcileRequests() int {
	return s.counts.requests() - s.counts.byVerb[verbDiscovery] - s.counts.byVerb[verbList]
}

// drift is the correction of one edited child.
type drift struct {
	counts    tally
	writes    []string
	server    serverDelta
	corrected time.Duration
}

// scenario runs everything one run needs and holds what must be cleaned up.
type scenario struct {
	o    options
	im   impl
	size int
	// unrelated is the number of unrelated objects created before the operator.
	unrelated int
	work      string
	paths     procPaths

	cluster *cluster
	proxy   *countingProxy
	op      *operator
	kube    string
	// trace logs every proxied request when -keep is set.
	trace *os.File
	// cleanups run when the scenario closes, last added first.
	cleanups []func() error
}

// measure performs one run: a fresh control plane, optionally unrelated objects, the
// operator, then the create phase and, when full, the steady-state phases.
func measure(ctx context.Context, o options, im impl, n, unrelated int, full bool, work string) (r run, err error) {
	s := &scenario{o: o, im: im, size: n, unrelated: unrelated, work: work,
		paths: procPaths{repo: o.repo, manager: o.manager, baselineManager: o.baselineManager, stockConcurrency: o.stockConcurrency, kaddonsFlags: o.kaddonsFlags,
			kaddonsConfig: o.kaddonsConfig, memoryLimit: o.memoryLimit}}
	defer func() { err = errors.Join(err, s.close()) }()
	r = run{impl: im, n: n, unrelated: unrelated, full: full}
	if im.name == implFlux {
		if s.paths.flux, err = newFluxPaths(o, work, n); err != nil {
			return r, err
		}
	}

	if err := s.start(ctx); err != nil {
		return r, err
	}
	if err := s.createPhase(ctx, &r); err != nil {
		return r, fmt.Errorf("create phase: %w", err)
	}
	if err := s.settledState(ctx, &r); err != nil {
		return r, err
	}
	if !full {
		return r, nil
	}
	// A failed steady-state phase leaves the create phase's numbers valid: report the
	// run without its steady state.
	if r.touch, err = s.touchPhase(ctx); err != nil {
		r.full = false
		return r, fmt.Errorf("no-op phase: %w", err)
	}
	if r.drift, err = s.driftPhase(ctx); err != nil {
		r.full = false
		return r, fmt.Errorf("drift phase: %w", err)
	}
	if r.restart, r.cold, err = s.restartPhase(ctx); err != nil {
		r.full = false
		return r, fmt.Errorf("restart phase: %w", err)
	}
	return r, nil
}

// start brings up the control plane, the unrelated objects, the proxy and the operator.
func (s *scenario) start(ctx context.Context) error {
	var err error
	var crds []string
	if s.im.crdDirs != nil {
		crds = s.im.crdDirs(s.paths)
	}
	if s.cluster, err = startCluster(s.o.repo, crds...); err != nil {
		return err
	}
	if s.unrelated > 0 {
		started := time.Now()
		if err := createUnrelated(ctx, s.cluster, s.unrelated); err != nil {
			return err
		}
		fmt.Printf("    created %d unrelated objects in %s\n", s.unrelated, time.Since(started).Round(time.Millisecond))
	}
	forwardWith, err := s.cluster.operatorConfig(ctx)
	if err != nil {
		return err
	}
	if s.proxy, err = newCountingProxy(forwardWith); err != nil {
		return err
	}
	if s.o.keep {
		f, err := os.Create(filepath.Join(s.work, s.logName(".requests")))
		if err != nil {
			return fmt.Errorf("creating the request trace: %w", err)
		}
		s.trace = f
		s.proxy.traceTo(f)
	}
	s.kube = filepath.Join(s.work, s.logName(".kubeconfig"))
	if err := writeKubeconfig(s.kube, s.proxy.URL(), s.proxy.CAData()); err != nil {
		return err
	}
	return s.startOperator(ctx)
}

// startOperator starts the operator and waits until it is ready and idle.
func (s *scenario) startOperator(ctx context.Context) error {
	var err error
	if s.op, err = startOperator(s.im, s.paths, s.kube, s.work, s.logName("")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.op.waitReady(ctx, s.proxy, s.o.quiet); err != nil {
		return err
	}
	if s.im.setup == nil {
		return nil
	}
	if err := s.im.setup(ctx, s); err != nil {
		return err
	}
	return s.proxy.waitQuiet(ctx, s.o.quiet)
}

// close stops whatever start started, in reverse order.
func (s *scenario) close() error {
	var errs []error
	if s.op != nil {
		errs = append(errs, s.op.stop())
	}
	if s.proxy != nil {
		errs = append(errs, s.proxy.Close())
	}
	if s.cluster != nil {
		errs = append(errs, s.cluster.stop())
	}
	if s.trace != nil {
		errs = append(errs, s.trace.Close())
	}
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, s.cleanups[i]())
	}
	return errors.Join(errs...)
}

// window counts what the operator and the API server did while fn ran, after fn
// returns and the operator has gone quiet.
func (s *scenario) window(ctx context.Context, fn func(ctx context.Context) error) (tally, []string, serverDelta, error) {
	before, err := s.cluster.scrape(ctx)
	if err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	s.traceAddon(ctx, "before")
	cpuBefore, err := sampleCPU(s.op)
	if err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	m := s.proxy.mark()
	if err := fn(ctx); err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	if err := s.proxy.waitQuiet(ctx, s.o.quiet); err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	counts, writes := s.proxy.since(m)
	cpuAfter, err := sampleCPU(s.op)
	if err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	s.traceAddon(ctx, "after")
	after, err := s.cluster.scrape(ctx)
	if err != nil {
		return tally{}, nil, serverDelta{}, err
	}
	d := delta(before, after)
	d.cpu = cpuAfter.sub(cpuBefore)
	if s.trace != nil {
		_, _ = fmt.Fprintf(s.trace, "--- etcd writes by resource, the bench's own included: %v\n", d.etcdByResource)
	}
	return counts, writes, d, nil
}

// traceAddon writes the first add-on's status into the request trace, when there is one,
// so that a status write in the trace can be explained.
func (s *scenario) traceAddon(ctx context.Context, label string) {
	if s.trace == nil {
		return
	}
	ns, name := addonRef(0)
	u := s.im.newAddon(ns, name)
	if err := s.cluster.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		_, _ = fmt.Fprintf(s.trace, "--- %s: reading %s/%s: %v\n", label, ns, name, err)
		return
	}
	status, _ := json.Marshal(u.Object["status"])
	_, _ = fmt.Fprintf(s.trace, "--- %s: generation %d, status %s\n", label, u.GetGeneration(), status)
}

// phaseContext bounds one phase.
func (s *scenario) phaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.timeout)
}

// createPhase creates the add-ons and waits until all are applied.
func (s *scenario) createPhase(ctx context.Context, r *run) error {
	ctx, cancel := s.phaseContext(ctx)
	defer cancel()
	var pr *profiler
	if s.o.profile && s.im.pprof {
		pr = startProfiler(ctx, s.op.procs[0], s.work, s.logName("-create-cpu"))
	}
	var err error
	r.createCounts, _, r.createServer, err = s.window(ctx, func(ctx context.Context) error {
		r.create, err = createAddons(ctx, s.cluster, s.im, r.n)
		return err
	})
	if pr != nil {
		var perr error
		r.profile, perr = pr.finish(ctx)
		err = errors.Join(err, perr)
	}
	return err
}

// settledState records memory, goroutines and open watches after the create phase.
func (s *scenario) settledState(ctx context.Context, r *run) error {
	var err error
	if r.mem, err = s.op.memory(); err != nil {
		return err
	}
	// After the RSS: a collection frees heap pages, but the runtime returns them to the
	// system only later.
	if err := s.op.collectGarbage(ctx); err != nil {
		return err
	}
	m, err := s.op.metrics(ctx)
	if err != nil {
		return err
	}
	r.goroutines = m.goroutines
	r.heap = m.heap
	r.liveHeap = m.liveHeap
	r.memLimit = m.memLimit
	r.watches = s.proxy.watches()
	return nil
}

// touchPhase changes an annotation on every add-on and counts the reconciles that follow.
func (s *scenario) touchPhase(ctx context.Context) (steady, error) {
	ctx, cancel := s.phaseContext(ctx)
	defer cancel()
	start, err := s.op.metrics(ctx)
	if err != nil {
		return steady{}, err
	}
	var st steady
	var done float64
	st.counts, st.writes, st.server, err = s.window(ctx, func(ctx context.Context) error {
		if err := touchAddons(ctx, s.cluster, s.im, s.size, time.Now().Format(time.RFC3339Nano)); err != nil {
			return err
		}
		done, err = s.op.waitReconciles(ctx, s.proxy, start.reconciles+float64(s.size), s.o.quiet)
		return err
	})
	st.reconciles = done - start.reconciles
	st.writes = withoutEvents(st.writes)
	return st, err
}

// logName names an operator log of this run.
func (s *scenario) logName(suffix string) string {
	if s.unrelated > 0 {
		suffix = "-unrelated" + suffix
	}
	return fmt.Sprintf("%s-n%d%s", s.im.name, s.size, suffix)
}

// driftReplicas is what the drift phase sets the first add-on's Deployment to; the
// package asks for 2.
const driftReplicas = 5

// driftPhase edits one child of the first add-on and waits until it is corrected.
func (s *scenario) driftPhase(ctx context.Context) (drift, error) {
	ctx, cancel := s.phaseContext(ctx)
	defer cancel()
	ns, _ := addonRef(0)
	key := types.NamespacedName{Namespace: ns, Name: coreDNS}
	var d drift
	var err error
	d.counts, d.writes, d.server, err = s.window(ctx, func(ctx context.Context) error {
		started := time.Now()
		deploy := &appsv1.Deployment{}
		deploy.Namespace, deploy.Name = key.Namespace, key.Name
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, driftReplicas)
		if err := s.cluster.client.Patch(ctx, deploy, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("bench-drift")); err != nil {
			return fmt.Errorf("editing Deployment %s: %w", key, err)
		}
		if s.im.requestOnDrift {
			if err := touchAddons(ctx, s.cluster, s.im, 1, time.Now().Format(time.RFC3339Nano)); err != nil {
				return err
			}
		}
		for {
			if err := s.cluster.client.Get(ctx, key, deploy); err != nil {
				return fmt.Errorf("reading Deployment %s: %w", key, err)
			}
			if deploy.Spec.Replicas != nil && *deploy.Spec.Replicas != driftReplicas {
				d.corrected = time.Since(started)
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the drifted Deployment %s was not corrected: %w", key, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	d.writes = withoutEvents(d.writes)
	return d, err
}

// withoutEvents drops writes to Events from a write log.
func withoutEvents(writes []string) []string {
	var out []string
	for _, w := range writes {
		if !strings.Contains(w, "/events") {
			out = append(out, w)
		}
	}
	return out
}

// maxWritesShown bounds how many distinct writes a summary names.
const maxWritesShown = 4

// summarizeWrites shortens a write log to "PATCH deployments/coredns", with a count
// where one path (relative to its namespace) was written more than once, in the order
// of first write, naming at most maxWritesShown of them.
func summarizeWrites(writes []string) string {
	if len(writes) == 0 {
		return "-"
	}
	var order []string
	counts := map[string]int{}
	for _, w := range writes {
		method, path, _ := strings.Cut(w, " ")
		parts := strings.Split(strings.Trim(path, "/"), "/")
		short := path
		if i := slices.Index(parts, "namespaces"); i >= 0 && i+2 < len(parts) {
			parts = parts[i+2:]
			short = strings.Join(parts, "/")
		} else if len(parts) >= 2 {
			short = strings.Join(parts[len(parts)-2:], "/")
		}
		key := method + " " + short
		if counts[key] == 0 {
			order = append(order, key)
		}
		counts[key]++
	}
	for i, k := range order {
		if counts[k] > 1 {
			order[i] = fmt.Sprintf("%s (%dx)", k, counts[k])
		}
	}
	if len(order) > maxWritesShown {
		return strings.Join(order[:maxWritesShown], ", ") + fmt.Sprintf(" and %d more", len(order)-maxWritesShown)
	}
	return strings.Join(order, ", ")
}

// restartPhase restarts the operator with every add-on in place and counts what the new
// process does until it has reconciled each of them and gone quiet, timing its cold start
// from the process start.
func (s *scenario) restartPhase(ctx context.Context) (steady, coldStart, error) {
	ctx, cancel := s.phaseContext(ctx)
	defer cancel()
	if err := s.op.stop(); err != nil {
		return steady{}, coldStart{}, err
	}
	s.op = nil
	var st steady
	var cs coldStart
	var err error
	st.counts, st.writes, st.server, err = s.window(ctx, func(ctx context.Context) error {
		started := time.Now()
		if s.op, err = startOperator(s.im, s.paths, s.kube, s.work, s.logName("-restarted")); err != nil {
			return err
		}
		if cs, err = s.op.waitColdStart(ctx, s.proxy, started, s.size, s.o.quiet); err != nil {
			return err
		}
		st.reconciles, err = s.op.waitReconciles(ctx, s.proxy, float64(s.size), s.o.quiet)
		return err
	})
	st.writes = withoutEvents(st.writes)
	return st, cs, err
}
