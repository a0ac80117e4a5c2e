package main

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestKaddonsOrderAlternates(t *testing.T) {
	g := NewWithT(t)
	builds := []string{implKaddonsBaseline, implKaddons}
	g.Expect(kaddonsOrder(builds, 1)).To(Equal([]string{implKaddonsBaseline, implKaddons}))
	g.Expect(kaddonsOrder(builds, 2)).To(Equal([]string{implKaddons, implKaddonsBaseline}))
	g.Expect(kaddonsOrder(builds, 3)).To(Equal(builds))
	g.Expect(builds).To(Equal([]string{implKaddonsBaseline, implKaddons}), "the order of the builds is not changed")
	g.Expect(kaddonsOrder([]string{implKaddons}, 2)).To(Equal([]string{implKaddons}))
}

func TestBaselineImplRunsTheBaselineBinary(t *testing.T) {
	g := NewWithT(t)
	im := baselineImpl("kaddons at 8310221")
	g.Expect(im.name).To(Equal(implKaddonsBaseline))
	g.Expect(im.label).To(Equal("kaddons at 8310221"))
	bin, args := im.command(procPaths{manager: "/new", baselineManager: "/old", metricsAddr: "127.0.0.1:1"})
	g.Expect(bin).To(Equal("/old"))
	kaddons, _ := implByName(implKaddons)
	_, want := kaddons.command(procPaths{manager: "/new", metricsAddr: "127.0.0.1:1"})
	g.Expect(args).To(Equal(want), "both builds get the same flags")
}

func TestSideBySideRows(t *testing.T) {
	g := NewWithT(t)
	base, _ := implByName(implKaddons)
	base.name, base.label = implKaddonsBaseline, "old"
	k, _ := implByName(implKaddons)
	mk := func(im impl, operatorCPU time.Duration) run {
		r := run{impl: im, n: 10, full: true}
		r.create.wall = time.Second
		r.createServer.cpu.operator = operatorCPU
		return r
	}
	res := &results{options: options{sizes: []int{10, 20}},
		runs: []run{mk(base, 200*time.Millisecond), mk(k, 100*time.Millisecond)}}
	rows := res.sideBySideRows()
	g.Expect(rows).To(HaveLen(3), "a heading and one row per build at N=10; N=20 has no runs")
	g.Expect(rows[1][1]).To(Equal("old"))
	g.Expect(rows[1][6]).To(Equal("1.00x"))
	g.Expect(rows[2][6]).To(Equal("0.50x"))
	g.Expect((&results{options: options{sizes: []int{10}}, runs: []run{mk(k, time.Second)}}).sideBySideRows()).To(BeNil())
}

func TestTopEntries(t *testing.T) {
	out := []byte(`File: manager
Type: cpu
Showing nodes accounting for 2.14s, 50.35% of 4.25s total
      flat  flat%   sum%        cum   cum%
     0.26s  6.12%  6.12%      0.26s  6.12%  internal/runtime/syscall/linux.Syscall6
     0.17s  4.00% 10.12%      0.27s  6.35%  runtime.tryDeferToSpanScan
`)
	NewWithT(t).Expect(topEntries(out)).To(Equal([]string{
		"0.26s 6.12% 6.12% 0.26s 6.12% internal/runtime/syscall/linux.Syscall6",
		"0.17s 4.00% 10.12% 0.27s 6.35% runtime.tryDeferToSpanScan",
	}))
}

func TestOwnEntries(t *testing.T) {
	entries := []string{
		"0 0% 0% 1.25s 25.61% sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).reconcileHandler",
		"0 0% 0% 1.21s 25.31% github.com/kaddons/kaddons/internal/engine.(*Reconciler).Reconcile",
		"0.02s 0.41% 2.66% 0.59s 12.09% github.com/kaddons/kaddons/internal/engine/ssa.(*Manager).Apply",
		"0.01s 0.2% 2.8% 0.5s 10% github.com/kaddons/kaddons/internal/engine.render",
	}
	NewWithT(t).Expect(ownEntries(entries, 2)).To(Equal(entries[1:3]))
}

func TestReportRendersTheSideBySideTableAndProfiles(t *testing.T) {
	g := NewWithT(t)
	base, _ := implByName(implKaddons)
	base.name, base.label = implKaddonsBaseline, "kaddons at old"
	k, _ := implByName(implKaddons)
	mk := func(im impl) run {
		r := run{impl: im, n: 10, full: true}
		r.create.wall = time.Second
		r.createServer.cpu.operator = time.Second
		r.profile = cpuProfile{path: "p", flat: []string{"1s 50% 50% 1s 50% runtime.mallocgc"}}
		return r
	}
	dir := t.TempDir()
	res := &results{started: time.Now(), options: options{sizes: []int{10}, impls: []string{implKaddons},
		baselineManager: "/tmp/old", baselineLabel: "kaddons at old", profile: true, out: dir + "/report.md", repo: dir},
		runs: []run{mk(base), mk(k)}}
	g.Expect(res.write(res.options)).To(Succeed())
	report, err := os.ReadFile(dir + "/report.md")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(report)).To(ContainSubstring("### Side by side with a baseline build"))
	g.Expect(string(report)).To(ContainSubstring("| 10 | kaddons at old |"))
	g.Expect(string(report)).To(ContainSubstring("### CPU profile: kaddons, N=10, create phase"))
	g.Expect(string(report)).To(ContainSubstring("runtime.mallocgc"))
}
