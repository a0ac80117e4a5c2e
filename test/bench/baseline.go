package main

import (
	"fmt"
	"slices"
	"time"
)

// implKaddonsBaseline is the -impl name of the kaddons manager that -baseline-manager
// names: another build of the same operator, measured beside the one under test.
const implKaddonsBaseline = "kaddons-baseline"

// baselineImpl is the kaddons implementation run with the -baseline-manager binary,
// labelled label in the report.
func baselineImpl(label string) impl {
	im, _ := implByName(implKaddons)
	im.name, im.label = implKaddonsBaseline, label
	command := im.command
	im.command = func(p procPaths) (string, []string) {
		_, args := command(p)
		return p.baselineManager, args
	}
	return im
}

// addBaseline registers the baseline implementation, right after kaddons in report order,
// and measures it wherever kaddons is measured.
func addBaseline(o *options) {
	at := slices.IndexFunc(impls, func(im impl) bool { return im.name == implKaddons }) + 1
	impls = slices.Insert(impls, at, baselineImpl(o.baselineLabel))
	if i := slices.Index(o.impls, implKaddons); i >= 0 {
		o.impls = slices.Insert(o.impls, i+1, implKaddonsBaseline)
	}
}

// isKaddons reports whether im is one of the kaddons builds measured in rounds.
func isKaddons(name string) bool { return name == implKaddons || name == implKaddonsBaseline }

// kaddonsBuilds returns the kaddons builds measured, in the order of a run's first round:
// the baseline first, so that in alternate rounds (kaddonsOrder) neither build always runs
// on the machine the other just warmed.
func (o options) kaddonsBuilds() []string {
	var out []string
	for _, name := range []string{implKaddonsBaseline, implKaddons} {
		if slices.Contains(o.impls, name) {
			out = append(out, name)
		}
	}
	return out
}

// kaddonsOrder returns builds in the order of round: as given in odd rounds, reversed in
// even ones.
func kaddonsOrder(builds []string, round int) []string {
	if round%2 == 1 {
		return builds
	}
	reversed := slices.Clone(builds)
	slices.Reverse(reversed)
	return reversed
}

// sideBySideRows is the table that compares the kaddons build under test with the
// baseline build at each size both ran: the figures issue 31 asks not to regress, and the
// operator's CPU per add-on against the baseline's.
func (res *results) sideBySideRows() [][]string {
	rows := [][]string{{"N", "Manager", colApplied, "Requests / add-on", "No-op requests",
		colCPU, "Operator CPU vs baseline", colRSS, "Live Go heap"}}
	for _, n := range res.options.sizes {
		base, okBase := res.find(implKaddonsBaseline, n, 0)
		k, okK := res.find(implKaddons, n, 0)
		if !okBase || !okK {
			continue
		}
		for _, r := range []run{base, k} {
			vs := "1.00x"
			if r.impl.name == implKaddons {
				vs = fmt.Sprintf("%.2fx", ratio(float64(r.createServer.cpu.operator), float64(base.createServer.cpu.operator)))
			}
			noOp := "-"
			if r.full {
				noOp = fmt.Sprint(r.touch.counts.requests())
			}
			rows = append(rows, []string{fmt.Sprint(n), r.impl.label, r.create.wall.Round(time.Millisecond).String() + medianNote(r),
				fmt.Sprintf("%.1f", perAddon(r.createCounts.requests(), r.n)), noOp, r.createServer.cpu.perAddon(r.n), vs,
				mib(r.mem.rss), mib(int64(r.liveHeap))})
		}
	}
	if len(rows) == 1 {
		return nil
	}
	return rows
}
