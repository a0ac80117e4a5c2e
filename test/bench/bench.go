package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// results is everything one bench run measured.
type results struct {
	started  time.Time
	duration time.Duration
	machine  machine
	versions versions
	options  options
	render   []renderResult
	runs     []run
	oci      []ociRun
	// failures lists the runs that did not complete; skipped, what was not measured and why.
	failures, skipped []string
}

// runBench measures every implementation at every size and writes the report.
func runBench(ctx context.Context, o options) error {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	repo, err := repoRoot(o.repo)
	if err != nil {
		return err
	}
	o.repo = repo
	if o.memoryLimit, err = resolveMemoryLimit(o.memoryLimitFlag, repo); err != nil {
		return err
	}
	fmt.Printf("bench: the kaddons manager runs with %s\n", o.memoryLimit)
	work, err := os.MkdirTemp("", "kaddons-bench-")
	if err != nil {
		return fmt.Errorf("creating the work directory: %w", err)
	}
	if o.keep {
		fmt.Printf("bench: keeping operator logs and kubeconfigs in %s\n", work)
	} else {
		defer func() { _ = os.RemoveAll(work) }()
	}
	if o.kaddonsConfig, err = writeKaddonsConfig(work); err != nil {
		return err
	}
	if o.manager == "" {
		if o.manager, err = buildManager(ctx, repo, work); err != nil {
			return err
		}
	}

	skipped := findFlux(ctx, &o)
	res := &results{started: time.Now(), options: o, machine: readMachine(), versions: readVersions(ctx, repo), skipped: skipped}
	if o.onlyOCI {
		for _, n := range o.sizes {
			res.measureOCI(ctx, o, n, work)
		}
		res.duration = time.Since(res.started)
		return res.write(o)
	}
	if !o.skipRender {
		if res.render, err = runRender(ctx, o, work); err != nil {
			return err
		}
	}
	if err := res.measureSizes(ctx, o, work); err != nil {
		return err
	}
	if o.unrelated > 0 && slices.Contains(o.impls, implKaddons) {
		im, _ := implByName(implKaddons)
		res.measure(ctx, o, im, o.extraSize(), o.unrelated, false, work)
	}
	if o.oci && ctx.Err() == nil {
		res.measureOCI(ctx, o, o.extraSize(), work)
	}
	res.duration = time.Since(res.started)
	return res.write(o)
}

// measureSizes measures every implementation at every size: kaddons first, in rounds
// (see measureKaddons), with the -baseline-manager build beside it, then each other
// operator by size. kaddons' runs take their place among the others' in the report, by
// size and then implementation.
func (res *results) measureSizes(ctx context.Context, o options, work string) error {
	kaddonsRuns := map[string]map[int]run{}
	if builds := o.kaddonsBuilds(); len(builds) > 0 {
		kaddonsRuns = res.measureKaddons(ctx, o, builds, work)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, n := range o.sizes {
		for _, name := range o.impls {
			if isKaddons(name) {
				if r, ok := kaddonsRuns[name][n]; ok {
					res.runs = append(res.runs, r)
				}
				continue
			}
			im, _ := implByName(name)
			if !im.runsAt(o, n) {
				continue
			}
			res.measure(ctx, o, im, n, 0, im.fullAt(o, n), work)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// findFlux sets o.fluxDir when Flux is to be measured, or drops Flux from o.impls and
// returns the note saying why it was not measured and how to build it.
func findFlux(ctx context.Context, o *options) []string {
	if !slices.Contains(o.impls, implFlux) {
		return nil
	}
	var missing string
	if o.fluxDir, missing = fluxBuild(ctx, o.repo); missing == "" {
		return nil
	}
	fmt.Printf("bench: %s\n", missing)
	o.impls = slices.DeleteFunc(o.impls, func(name string) bool { return name == implFlux })
	return []string{missing}
}

// extraSize is the size of the unrelated-objects and OCI runs: the largest -n size up to
// -extra-max-n, else the smallest size.
func (o options) extraSize() int {
	best := slices.Min(o.sizes)
	for _, n := range o.sizes {
		if (o.extraMaxN <= 0 || n <= o.extraMaxN) && n > best {
			best = n
		}
	}
	return best
}

// measure performs one run and records it, or its failure.
func (res *results) measure(ctx context.Context, o options, im impl, n, unrelated int, full bool, work string) {
	fmt.Printf("bench: %s, N=%d, %d unrelated objects\n", im.label, n, unrelated)
	if r, ok := res.runOnce(ctx, o, im, n, unrelated, full, work); ok {
		res.runs = append(res.runs, r)
	}
}

// measureKaddons measures each kaddons build (the one under test and, with
// -baseline-manager, the baseline) at every size and returns its recorded run per size:
// once below -repeat-min-n, and -repeat times from there up, each on a fresh control
// plane, where the run with the median applied time is recorded (the lower one of an
// even count) with the applied times of all of them. The repeated sizes run in rounds
// (kaddonsSchedule): the machines are noisy, one run's applied time varies by a quarter
// from one run to the next and the same work costs a fifth more CPU from one minute to
// the next, so every size is measured across the same stretch of time, and the growth
// target compares sizes measured minutes apart rather than the half hour the other
// operators' runs take.
func (res *results) measureKaddons(ctx context.Context, o options, builds []string, work string) map[string]map[int]run {
	im, _ := implByName(implKaddons)
	schedule := kaddonsSchedule(o, im)
	byN := map[string]map[int][]run{}
	for _, step := range schedule {
		// With a baseline build, both builds run at each step, one after the other, in
		// an order that alternates from round to round.
		for _, name := range kaddonsOrder(builds, step.round) {
			build, _ := implByName(name)
			if step.rounds > 1 {
				fmt.Printf("bench: %s, N=%d, 0 unrelated objects, round %d of %d\n", build.label, step.n, step.round, step.rounds)
			} else {
				fmt.Printf("bench: %s, N=%d, 0 unrelated objects\n", build.label, step.n)
			}
			if r, ok := res.runOnce(ctx, o, build, step.n, 0, build.fullAt(o, step.n), work); ok {
				if byN[name] == nil {
					byN[name] = map[int][]run{}
				}
				byN[name][step.n] = append(byN[name][step.n], r)
			}
			if ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	out := map[string]map[int]run{}
	for name, runs := range byN {
		out[name] = map[int]run{}
		for n, rs := range runs {
			out[name][n] = medianRun(rs)
		}
	}
	return out
}

// scheduled is one run of kaddons' schedule: size n, in round round of rounds (1 of 1
// for a size measured once).
type scheduled struct {
	n, round, rounds int
}

// kaddonsSchedule orders kaddons' runs: each size below -repeat-min-n once, in the order
// of -n, then -repeat rounds of the sizes from -repeat-min-n up, each round in the order
// of -n.
func kaddonsSchedule(o options, im impl) []scheduled {
	var once, repeated []int
	for _, n := range o.sizes {
		switch {
		case !im.runsAt(o, n):
		case o.repeat > 1 && n >= o.repeatMinN:
			repeated = append(repeated, n)
		default:
			once = append(once, n)
		}
	}
	var out []scheduled
	for _, n := range once {
		out = append(out, scheduled{n: n, round: 1, rounds: 1})
	}
	for round := 1; round <= o.repeat && len(repeated) > 0; round++ {
		for _, n := range repeated {
			out = append(out, scheduled{n: n, round: round, rounds: o.repeat})
		}
	}
	return out
}

// medianRun returns the run of runs whose applied time is the median (the lower one of
// an even count), carrying the applied times of all of them, shortest first, when there
// is more than one.
func medianRun(runs []run) run {
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b run) int { return cmp.Compare(a.create.wall, b.create.wall) })
	median := sorted[(len(sorted)-1)/2]
	if len(runs) > 1 {
		median.walls = nil
		for _, r := range sorted {
			median.walls = append(median.walls, r.create.wall)
		}
	}
	return median
}

// runOnce performs one run and returns it; a failure is recorded, and the run is still
// returned when its create phase completed.
func (res *results) runOnce(ctx context.Context, o options, im impl, n, unrelated int, full bool, work string) (run, bool) {
	started := time.Now()
	r, err := measure(ctx, o, im, n, unrelated, full, work)
	if err != nil {
		msg := fmt.Sprintf("%s at N=%d (%d unrelated objects): %v", im.label, n, unrelated, err)
		fmt.Printf("    FAILED: %v\n", err)
		res.failures = append(res.failures, msg)
		if r.create.wall == 0 {
			return r, false
		}
	}
	fmt.Printf("    %s (run took %s)\n", summary(r), time.Since(started).Round(time.Second))
	return r, true
}

// summary is the one-line progress report of a run.
func summary(r run) string {
	s := fmt.Sprintf("applied in %s (created in %s), %.1f requests/add-on (%s), CPU ms/add-on %s, RSS %s",
		r.create.wall.Round(time.Millisecond), r.create.created.Round(time.Millisecond),
		perAddon(r.createCounts.requests(), r.n), r.createCounts, r.createServer.cpu.perAddon(r.n), mib(r.mem.rss))
	if r.full {
		s += fmt.Sprintf("; no-op: %d requests, %.0f etcd writes; restart: %d reconcile requests, all reconciled after %s (every add-on: %s); drift: %d writes",
			r.touch.counts.requests(), r.touch.server.etcdWrites, r.restart.reconcileRequests(), r.cold.all.Round(time.Millisecond),
			eachText(r), len(r.drift.writes))
	}
	return s
}

// runRender runs the render micro-benchmarks on a control plane of their own.
func runRender(ctx context.Context, o options, work string) ([]renderResult, error) {
	fmt.Println("bench: render micro-benchmarks")
	c, err := startCluster(o.repo)
	if err != nil {
		return nil, err
	}
	r, err := renderBenchmarks(ctx, c, o.repo, work)
	return r, errors.Join(err, c.stop())
}

// repoRoot resolves dir and checks that it is the kaddons repository.
func repoRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(abs, "go.mod"))
	if err != nil || !strings.HasPrefix(string(data), "module github.com/kaddons/kaddons\n") {
		return "", fmt.Errorf("-repo %s is not the kaddons repository (no go.mod for github.com/kaddons/kaddons)", abs)
	}
	return abs, nil
}

// kaddonsConfig trusts every namespace: the bench measures a cluster where only cluster
// admins create add-ons, so kaddons applies them with its own identity, as stock KDP
// does, and no AddonPolicy is needed for the bench's namespaces.
const kaddonsConfig = `apiVersion: config.kaddons.dev/v1beta1
kind: OperatorConfiguration
runtime:
  tenancy:
    trustedNamespaces: ["*"]
`

// writeKaddonsConfig writes kaddonsConfig into work and returns its path.
func writeKaddonsConfig(work string) (string, error) {
	path := filepath.Join(work, "kaddons-config.yaml")
	if err := os.WriteFile(path, []byte(kaddonsConfig), 0o600); err != nil {
		return "", fmt.Errorf("writing the kaddons configuration: %w", err)
	}
	return path, nil
}

// buildManager builds the kaddons manager from repo the way the Dockerfile does.
func buildManager(ctx context.Context, repo, work string) (string, error) {
	out := filepath.Join(work, "manager")
	fmt.Println("bench: building the kaddons manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "without_exec_applier,without_direct_applier",
		"-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the manager: %w", err)
	}
	return out, nil
}

// machine describes the host.
type machine struct {
	CPU    string
	Cores  int
	Memory string
	Kernel string
}

// readMachine describes the host from /proc.
func readMachine() machine {
	m := machine{CPU: unknown, Cores: runtime.NumCPU(), Memory: unknown, Kernel: unknown}
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		m.CPU = v
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		var kb int64
		if _, err := fmt.Sscanf(v, "%d kB", &kb); err == nil {
			m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// versions are the versions of everything measured.
type versions struct {
	GoVersion, KubeAPIServer, Etcd, KDP, ControllerRuntime, ClientGo, Kaddons string
}

// readVersions asks the binaries, the build information and git for their versions.
func readVersions(ctx context.Context, repo string) versions {
	v := versions{GoVersion: runtime.Version()}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	v.KubeAPIServer = firstLine(ctx, "", filepath.Join(assets, "kube-apiserver"), "--version")
	v.Etcd = firstLine(ctx, "", filepath.Join(assets, "etcd"), "--version")
	v.Kaddons = firstLine(ctx, repo, "git", "describe", "--always", "--dirty")
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			switch d.Path {
			case "sigs.k8s.io/kubebuilder-declarative-pattern":
				v.KDP = d.Version
			case "sigs.k8s.io/controller-runtime":
				v.ControllerRuntime = d.Version
			case "k8s.io/client-go":
				v.ClientGo = d.Version
			}
		}
	}
	return v
}

// unknown stands for a fact about the machine or a version that could not be read.
const unknown = "unknown"

// firstLine runs a command and returns the first line of its output, or unknown.
func firstLine(ctx context.Context, dir, name string, args ...string) string {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return unknown
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
