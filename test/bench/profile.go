package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// profileChunk is the length, in seconds, of each CPU profile the profiler asks for. The
// pprof endpoint profiles for a fixed time, and a phase's length is not known in advance:
// the profiler asks for one short profile after another until the phase ends, and they
// are merged. The last one runs past the phase by less than profileChunk, while the
// operator is idle.
const profileChunk = 1

// profileTopEntries is how many entries of each top list the report shows.
const profileTopEntries = 15

// kaddonsModule is the prefix of the functions of the kaddons manager's own code, for the
// top list of cumulative times.
const kaddonsModule = "github.com/kaddons/kaddons/"

// cpuProfile is the CPU profile of one operator process over one phase.
type cpuProfile struct {
	// path is the merged profile.
	path string
	// flat is pprof's top list by own time; cum the top list of the manager's own
	// functions by cumulative time. Each entry is one line of `go tool pprof -top`.
	flat, cum []string
}

// profiler asks a process for one CPU profile after another until it is stopped.
type profiler struct {
	proc  *process
	dir   string
	name  string
	stop  chan struct{}
	done  chan struct{}
	files []string
	err   error
}

// startProfiler starts profiling p, writing the profiles into dir as name-<i>.pprof.
func startProfiler(ctx context.Context, p *process, dir, name string) *profiler {
	pr := &profiler{proc: p, dir: dir, name: name, stop: make(chan struct{}), done: make(chan struct{})}
	go pr.run(ctx)
	return pr
}

// run asks for profiles until stop is closed or a request fails.
func (pr *profiler) run(ctx context.Context) {
	defer close(pr.done)
	for i := 0; ; i++ {
		select {
		case <-pr.stop:
			return
		default:
		}
		path := filepath.Join(pr.dir, fmt.Sprintf("%s-%03d.pprof", pr.name, i))
		if err := pr.fetch(ctx, path); err != nil {
			pr.err = err
			return
		}
		pr.files = append(pr.files, path)
	}
}

// fetch writes one profile of profileChunk seconds to path.
func (pr *profiler) fetch(ctx context.Context, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = pr.proc.get(ctx, pr.proc.profilerAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", profileChunk), f)
	return errors.Join(err, f.Close())
}

// finish stops the profiler, merges its profiles into dir/name.pprof and reads their top
// entries with `go tool pprof`.
func (pr *profiler) finish(ctx context.Context) (cpuProfile, error) {
	close(pr.stop)
	<-pr.done
	if pr.err != nil {
		return cpuProfile{}, fmt.Errorf("profiling %s: %w", pr.proc.name, pr.err)
	}
	if len(pr.files) == 0 {
		return cpuProfile{}, fmt.Errorf("profiling %s: no profile was taken", pr.proc.name)
	}
	p := cpuProfile{path: filepath.Join(pr.dir, pr.name+".pprof")}
	if _, err := goPprof(ctx, append([]string{"-proto", "-output", p.path}, pr.files...)...); err != nil {
		return cpuProfile{}, err
	}
	for _, f := range pr.files {
		_ = os.Remove(f)
	}
	flat, err := goPprof(ctx, "-top", "-nodecount", fmt.Sprint(profileTopEntries), p.path)
	if err != nil {
		return p, err
	}
	p.flat = topEntries(flat)
	// Every node, then the manager's own: pprof's -show would hide the others and add
	// their time to the flat time of the manager's functions that call them.
	cum, err := goPprof(ctx, "-top", "-cum", "-nodecount", "100000", p.path)
	if err != nil {
		return p, err
	}
	p.cum = ownEntries(topEntries(cum), profileTopEntries)
	return p, nil
}

// ownEntries returns the first n entries of a top list that are functions of the
// manager's own code.
func ownEntries(entries []string, n int) []string {
	var own []string
	for _, e := range entries {
		if fields := strings.Fields(e); len(fields) > 5 && strings.HasPrefix(fields[5], kaddonsModule) && len(own) < n {
			own = append(own, e)
		}
	}
	return own
}

// topEntries returns the entry lines of `go tool pprof -top` output: those after the
// column headings, spaces squeezed.
func topEntries(out []byte) []string {
	var entries []string
	inTable := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if !inTable {
			inTable = len(fields) > 1 && fields[0] == "flat" && fields[1] == "flat%"
			continue
		}
		if len(fields) > 0 {
			entries = append(entries, strings.Join(fields, " "))
		}
	}
	return entries
}

// goPprof runs `go tool pprof` with args and returns its standard output.
func goPprof(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// profileBlocks is the report's list of CPU profiles: for each kaddons build, the create
// phase of its reported run at the largest size it was profiled at.
func (res *results) profileBlocks() []profileBlock {
	var out []profileBlock
	for _, name := range []string{implKaddonsBaseline, implKaddons} {
		var best run
		for _, r := range res.runs {
			if r.impl.name == name && r.unrelated == 0 && r.profile.path != "" && r.n > best.n {
				best = r
			}
		}
		if best.n == 0 {
			continue
		}
		out = append(out, profileBlock{Title: fmt.Sprintf("%s, N=%d, create phase", best.impl.label, best.n),
			Flat: best.profile.flat, Cum: best.profile.cum})
	}
	return out
}

// profileBlock is one CPU profile's top lists, as the report template shows them.
type profileBlock struct {
	Title     string
	Flat, Cum []string
}
