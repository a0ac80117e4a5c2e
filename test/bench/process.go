package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"k8s.io/client-go/tools/clientcmd"
)

// operator is one running operator: one process, or several (Flux's two controllers).
type operator struct {
	impl  impl
	procs []*process
}

// process is one running process of an operator.
type process struct {
	name        string
	cmd         *exec.Cmd
	metricsAddr string
	// profilerAddr is where the process serves pprof; empty when it does not.
	profilerAddr string
	logPath      string
	// exited is closed when the process has exited; waitErr is then its exit status.
	exited  chan struct{}
	waitErr error
}

// procSpec is how to start one process of an operator.
type procSpec struct {
	// name names the process in logs and in the report.
	name string
	bin  string
	args []string
	// env is added to the bench's environment.
	env []string
	// metricsAddr is where the process serves its controller-runtime metrics.
	metricsAddr string
	// profilerAddr is where the process serves pprof; empty when it does not.
	profilerAddr string
}

// writeKubeconfig writes a kubeconfig that points at the proxy and trusts its
// certificate, without credentials: the proxy adds them.
func writeKubeconfig(path, server string, caData []byte) error {
	cfg := clientcmdapi.NewConfig()
	const name = "bench-proxy"
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that is free right now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// specs returns the processes of im: its own list, or the one process of its command.
func (im impl) specs(paths procPaths) ([]procSpec, error) {
	if im.processes != nil {
		return im.processes(paths)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	paths.metricsAddr = addr
	if im.pprof {
		if paths.profilerAddr, err = freeLoopbackAddr(); err != nil {
			return nil, err
		}
	}
	bin, args := im.command(paths)
	spec := procSpec{name: im.name, bin: bin, args: args, metricsAddr: addr, profilerAddr: paths.profilerAddr}
	if im.env != nil {
		spec.env = im.env(paths)
	}
	return []procSpec{spec}, nil
}

// startOperator starts im's processes with kubeconfig, each logging to a file in dir.
func startOperator(im impl, paths procPaths, kubeconfig, dir, logName string) (*operator, error) {
	specs, err := im.specs(paths)
	if err != nil {
		return nil, err
	}
	op := &operator{impl: im}
	for _, spec := range specs {
		name := logName
		if len(specs) > 1 {
			name += "-" + spec.name
		}
		p, err := startProcess(spec, kubeconfig, filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, errors.Join(err, op.stop())
		}
		op.procs = append(op.procs, p)
	}
	return op, nil
}

// startProcess starts one process of an operator.
func startProcess(spec procSpec, kubeconfig, logPath string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the operator log: %w", err)
	}
	cmd := exec.Command(spec.bin, spec.args...)
	// The bench's own GOMEMLIMIT, if any, is not the operator's.
	cmd.Env = append(withoutEnv(os.Environ(), goMemLimitEnv, "KUBECONFIG"), "KUBECONFIG="+kubeconfig)
	cmd.Env = append(cmd.Env, spec.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", spec.bin, err)
	}
	p := &process{name: spec.name, cmd: cmd, metricsAddr: spec.metricsAddr, profilerAddr: spec.profilerAddr,
		logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// logs names the operator's log files.
func (o *operator) logs() string {
	paths := make([]string, 0, len(o.procs))
	for _, p := range o.procs {
		paths = append(paths, p.logPath)
	}
	return strings.Join(paths, ", ")
}

// stop stops the operator's processes, last started first.
func (o *operator) stop() error {
	var errs []error
	for i := len(o.procs) - 1; i >= 0; i-- {
		errs = append(errs, o.procs[i].stop())
	}
	return errors.Join(errs...)
}

// stop asks the process to shut down and kills it if it does not within 30 seconds.
func (p *process) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within 30s and was killed (log: %s)", p.name, p.logPath)
	}
}

// alive returns an error when one of the processes has exited.
func (o *operator) alive() error {
	for _, p := range o.procs {
		select {
		case <-p.exited:
			return fmt.Errorf("%s of the %s operator exited (%v); see %s", p.name, o.impl.name, p.waitErr, p.logPath)
		default:
		}
	}
	return nil
}

// memory is the operator's resident memory.
type memory struct {
	// rss and peak are VmRSS and VmHWM, in bytes, summed over the processes.
	rss, peak int64
	// byProcess is each process's VmRSS, when there are several.
	byProcess []processMemory
}

// processMemory is the VmRSS of one process.
type processMemory struct {
	name string
	rss  int64
}

// memory reads the resident set of the operator's processes from /proc.
func (o *operator) memory() (memory, error) {
	var total memory
	for _, p := range o.procs {
		m, err := p.memory()
		if err != nil {
			return memory{}, err
		}
		total.rss += m.rss
		total.peak += m.peak
		if len(o.procs) > 1 {
			total.byProcess = append(total.byProcess, processMemory{name: p.name, rss: m.rss})
		}
	}
	return total, nil
}

// memory reads the process's resident set from /proc.
func (p *process) memory() (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return memory{}, fmt.Errorf("reading the memory of %s: %w", p.name, err)
	}
	defer func() { _ = f.Close() }()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			m.rss = kb << 10
		case "VmHWM:":
			m.peak = kb << 10
		}
	}
	return m, sc.Err()
}

// operatorMetrics are read from the operator's own metrics endpoint.
type operatorMetrics struct {
	// reconciles counts finished reconciles of the add-on controller.
	reconciles float64
	// addons counts the add-ons with a series of the impl's perAddonMetric.
	addons     int
	goroutines float64
	// heap is the Go heap in use, in bytes: RSS without the binary and the runtime's slack.
	heap float64
	// liveHeap is the Go heap the last collection found reachable, in bytes: what the
	// operator keeps, without the garbage and free pages that depend on when it ran.
	liveHeap float64
	// memLimit is the Go runtime's soft memory limit (GOMEMLIMIT; math.MaxInt64 when
	// unset), as the process reports it.
	memLimit float64
}

// collectGarbage has each process that serves pprof run a garbage collection (the heap
// profile's gc=1), so that the live heap it then reports is what it keeps now rather than
// what it kept at its last automatic collection, which may have run before the last
// add-ons were cached.
func (o *operator) collectGarbage(ctx context.Context) error {
	for _, p := range o.procs {
		if p.profilerAddr == "" {
			continue
		}
		if err := p.get(ctx, p.profilerAddr, "/debug/pprof/heap?gc=1", io.Discard); err != nil {
			return err
		}
	}
	return nil
}

// get reads path from the process's server at addr into w, within 10 seconds.
func (p *process) get(ctx context.Context, addr, path string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s of %s: %w", path, p.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading %s of %s: %s", path, p.name, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// metrics scrapes the metrics endpoints of the operator's processes and adds them up.
func (o *operator) metrics(ctx context.Context) (operatorMetrics, error) {
	var total operatorMetrics
	for _, p := range o.procs {
		m, err := p.metrics(ctx, o.impl)
		if err != nil {
			return operatorMetrics{}, err
		}
		total.reconciles += m.reconciles
		total.addons += m.addons
		total.goroutines += m.goroutines
		total.heap += m.heap
		total.liveHeap += m.liveHeap
		total.memLimit = max(total.memLimit, m.memLimit)
	}
	return total, nil
}

// metrics scrapes the process's metrics endpoint.
func (p *process) metrics(ctx context.Context, im impl) (operatorMetrics, error) {
	var body bytes.Buffer
	if err := p.get(ctx, p.metricsAddr, "/metrics", &body); err != nil {
		return operatorMetrics{}, err
	}
	keep := []string{"controller_runtime_reconcile_total", "go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_heap_live_bytes", "go_gc_gomemlimit_bytes"}
	if im.perAddonMetric != "" {
		keep = append(keep, im.perAddonMetric)
	}
	ss, err := parseSamples(&body, keep...)
	if err != nil {
		return operatorMetrics{}, err
	}
	return operatorMetrics{
		reconciles: ss.sum("controller_runtime_reconcile_total", func(l map[string]string) bool {
			return l["controller"] == im.controller
		}),
		goroutines: ss.sum("go_goroutines", nil),
		heap:       ss.sum("go_memstats_heap_inuse_bytes", nil),
		liveHeap:   ss.sum("go_gc_heap_live_bytes", nil),
		memLimit:   ss.sum("go_gc_gomemlimit_bytes", nil),
		addons:     ss.addons(im.perAddonMetric, im.kind),
	}, nil
}

// waitReady waits until the operator serves metrics and has opened its watch on the
// add-on kind, then until it goes quiet: its caches are synced and it is idle.
func (o *operator) waitReady(ctx context.Context, p *countingProxy, quiet time.Duration) error {
	for {
		if err := o.alive(); err != nil {
			return err
		}
		if _, err := o.metrics(ctx); err == nil && p.watching(o.impl.resourcePath()) {
			return p.waitQuiet(ctx, quiet)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the %s operator to start (log: %s): %w", o.impl.name, o.logs(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// coldStart is how long a restarted operator took to reconcile every add-on once.
type coldStart struct {
	// all runs from the process start until controller_runtime_reconcile_total of the
	// add-on controller reached N.
	all time.Duration
	// each runs from the process start until every add-on had its own series of the
	// impl's perAddonMetric; 0 when the impl has none, or when it never covered N add-ons.
	each time.Duration
}

// coldStartPoll is how often waitColdStart scrapes the operator: the resolution of the
// cold start times.
const coldStartPoll = 100 * time.Millisecond

// waitColdStart waits until the operator, started at started, has finished n reconciles
// of its add-on controller and, when it has a per-add-on metric, until that metric has a
// series for n add-ons. A per-add-on metric that stays short of n once the reconciles are
// counted and the operator is quiet leaves each at 0.
func (o *operator) waitColdStart(ctx context.Context, p *countingProxy, started time.Time, n int, quiet time.Duration) (coldStart, error) {
	var cs coldStart
	for {
		if err := o.alive(); err != nil {
			return cs, err
		}
		if m, err := o.metrics(ctx); err == nil {
			now := time.Since(started)
			if cs.all == 0 && m.reconciles >= float64(n) {
				cs.all = now
			}
			if cs.each == 0 && o.impl.perAddonMetric != "" && m.addons >= n {
				cs.each = now
			}
			switch {
			case cs.all == 0:
			case o.impl.perAddonMetric == "" || cs.each > 0:
				return cs, nil
			case p.idleFor() >= quiet:
				fmt.Printf("    %s has a series for %d of %d add-ons after %v reconciles: no per-add-on cold start time\n",
					o.impl.perAddonMetric, m.addons, n, m.reconciles)
				return cs, nil
			}
		}
		select {
		case <-ctx.Done():
			return cs, fmt.Errorf("waiting for %d add-ons to be reconciled after a restart (log: %s): %w", n, o.logs(), ctx.Err())
		case <-time.After(coldStartPoll):
		}
	}
}

// waitReconciles waits until the operator has finished at least want reconciles of its
// add-on controller, and has then gone quiet.
func (o *operator) waitReconciles(ctx context.Context, p *countingProxy, want float64, quiet time.Duration) (float64, error) {
	for {
		if err := o.alive(); err != nil {
			return 0, err
		}
		m, err := o.metrics(ctx)
		if err == nil && m.reconciles >= want {
			if err := p.waitQuiet(ctx, quiet); err != nil {
				return 0, err
			}
			m, err = o.metrics(ctx)
			return m.reconciles, err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for %v reconciles (log: %s): %w", want, o.logs(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}
