package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// deployment is a Deployment like config/manager/manager.yaml, with the manager
// container's limit and env replaced.
func deployment(limit, env string) string {
	return `apiVersion: v1
kind: Namespace
metadata:
  name: system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller-manager
spec:
  template:
    spec:
      containers:
      - name: sidecar
        resources:
          limits:
            memory: 1Gi
      - name: manager
` + env + `        resources:
          limits:
            memory: ` + limit + `
`
}

const downwardEnv = `        env:
        - name: GOMEMLIMIT
          valueFrom:
            resourceFieldRef:
              containerName: manager
              resource: limits.memory
`

func TestResolveMemoryLimit(t *testing.T) {
	cases := []struct {
		name, flag, manifest string
		want                 int64
		wantEnv              []string
		wantErr              string
	}{
		{name: "the Deployment's limit in bytes", manifest: deployment("256Mi", downwardEnv),
			want: 268435456, wantEnv: []string{"GOMEMLIMIT=268435456"}},
		{name: "a Deployment without GOMEMLIMIT sets none", manifest: deployment("256Mi", "")},
		{name: "the flag wins", flag: "100Mi", manifest: deployment("256Mi", downwardEnv),
			want: 104857600, wantEnv: []string{"GOMEMLIMIT=104857600"}},
		{name: "none", flag: "none", manifest: deployment("256Mi", downwardEnv)},
		{name: "not a quantity", flag: "lots", manifest: deployment("256Mi", downwardEnv), wantErr: "not a positive quantity"},
		{name: "no manager container", manifest: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
			wantErr: `no Deployment with a "manager" container`},
		{name: "no limit", manifest: strings.Replace(deployment("1", downwardEnv), "        resources:\n          limits:\n            memory: 1\n", "", 1),
			wantErr: "no limits.memory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			repo := t.TempDir()
			path := filepath.Join(repo, managerManifest)
			g.Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(path, []byte(tc.manifest), 0o600)).To(Succeed())
			got, err := resolveMemoryLimit(tc.flag, repo)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.bytes).To(Equal(tc.want))
			g.Expect(got.env()).To(Equal(tc.wantEnv))
		})
	}
}

// TestRepositoryMemoryLimit reads the repository's own Deployment: the bench must keep
// finding the limit there.
func TestRepositoryMemoryLimit(t *testing.T) {
	g := NewWithT(t)
	got, err := resolveMemoryLimit("", filepath.Join("..", ".."))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.bytes).To(BeNumerically(">", 0), "config/manager/manager.yaml sets no GOMEMLIMIT: %s", got)
}

func TestExtraSize(t *testing.T) {
	cases := []struct {
		sizes []int
		max   int
		want  int
	}{
		{sizes: []int{1, 50, 200, 500, 1000, 2000}, max: 1000, want: 1000},
		{sizes: []int{1, 50, 200, 500, 1000, 2000}, max: 0, want: 2000},
		{sizes: []int{1, 50}, max: 1000, want: 50},
		{sizes: []int{2000, 5000}, max: 1000, want: 2000},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		g.Expect(options{sizes: tc.sizes, extraMaxN: tc.max}.extraSize()).To(Equal(tc.want), "%v up to %d", tc.sizes, tc.max)
	}
}

func TestRunsAt(t *testing.T) {
	g := NewWithT(t)
	o := options{stockMaxN: 500, fluxMaxN: 200}
	stock, _ := implByName(implStockDirect)
	flux, _ := implByName(implFlux)
	kaddons, _ := implByName(implKaddons)
	g.Expect(stock.runsAt(o, 500)).To(BeTrue())
	g.Expect(stock.runsAt(o, 1000)).To(BeFalse())
	g.Expect(flux.runsAt(o, 500)).To(BeFalse())
	g.Expect(kaddons.runsAt(o, 2000)).To(BeTrue())
	o.stockMaxN = 0
	g.Expect(stock.runsAt(o, 2000)).To(BeTrue())
}

func TestKaddonsSchedule(t *testing.T) {
	cases := []struct {
		name string
		o    options
		want []scheduled
	}{
		{name: "make bench's sizes: the sizes from N=200 up in three rounds, after the smaller ones",
			o: options{sizes: []int{1, 50, 200, 500, 1000}, repeat: 3, repeatMinN: 200},
			want: []scheduled{{1, 1, 1}, {50, 1, 1}, {200, 1, 3}, {500, 1, 3}, {1000, 1, 3},
				{200, 2, 3}, {500, 2, 3}, {1000, 2, 3}, {200, 3, 3}, {500, 3, 3}, {1000, 3, 3}}},
		{name: "the order of -n is kept",
			o:    options{sizes: []int{1000, 1, 500}, repeat: 2, repeatMinN: 500},
			want: []scheduled{{1, 1, 1}, {1000, 1, 2}, {500, 1, 2}, {1000, 2, 2}, {500, 2, 2}}},
		{name: "-repeat 1 measures every size once",
			o:    options{sizes: []int{50, 500}, repeat: 1, repeatMinN: 200},
			want: []scheduled{{50, 1, 1}, {500, 1, 1}}},
		{name: "no size reaches -repeat-min-n",
			o:    options{sizes: []int{1, 50}, repeat: 3, repeatMinN: 200},
			want: []scheduled{{1, 1, 1}, {50, 1, 1}}},
	}
	kaddons, _ := implByName(implKaddons)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(kaddonsSchedule(tc.o, kaddons)).To(Equal(tc.want))
		})
	}
}

func TestMedianRun(t *testing.T) {
	cases := []struct {
		name      string
		walls     []time.Duration
		wantWall  time.Duration
		wantWalls []time.Duration
	}{
		{name: "one run carries no list", walls: []time.Duration{20 * time.Second}, wantWall: 20 * time.Second},
		{name: "three runs: the middle one, with all three shortest first",
			walls:    []time.Duration{18 * time.Second, 15 * time.Second, 19 * time.Second},
			wantWall: 18 * time.Second, wantWalls: []time.Duration{15 * time.Second, 18 * time.Second, 19 * time.Second}},
		{name: "two runs: the lower one",
			walls:    []time.Duration{31 * time.Second, 29 * time.Second},
			wantWall: 29 * time.Second, wantWalls: []time.Duration{29 * time.Second, 31 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var runs []run
			for i, w := range tc.walls {
				r := kaddonsRun(500, w, int64(100+i), 40)
				runs = append(runs, r)
			}
			m := medianRun(runs)
			g.Expect(m.create.wall).To(Equal(tc.wantWall))
			g.Expect(m.walls).To(Equal(tc.wantWalls))
			for _, r := range runs {
				if r.create.wall == tc.wantWall {
					g.Expect(m.mem).To(Equal(r.mem), "the median run is recorded whole, not only its time")
				}
			}
			g.Expect(runs[0].walls).To(BeNil(), "the runs given are not changed")
		})
	}
}

// kaddonsRun is a kaddons run at n, applied after wall, with rss and a live Go heap of
// live MiB.
func kaddonsRun(n int, wall time.Duration, rss, live int64) run {
	im, _ := implByName(implKaddons)
	return run{impl: im, n: n, full: true, create: createResult{wall: wall}, mem: memory{rss: rss << 20},
		liveHeap: float64(live << 20)}
}

func TestGrowthTarget(t *testing.T) {
	// Per add-on above N=1 at N=200: 50 ms, 206 KiB of RSS, 36 KiB of live heap.
	base := []run{kaddonsRun(1, 200*time.Millisecond, 60, 8), kaddonsRun(200, 10*time.Second, 100, 15)}
	cases := []struct {
		name string
		runs []run
		want string
	}{
		{name: "linear", want: "PASS", runs: append(base, kaddonsRun(2000, 110*time.Second, 450, 78))},
		{name: "time per add-on grows", want: "MISS", runs: append(base, kaddonsRun(2000, 130*time.Second, 450, 78))},
		{name: "live heap per add-on grows", want: "MISS", runs: append(base, kaddonsRun(2000, 100*time.Second, 450, 88))},
		{name: "RSS per add-on grows past its margin", want: "MISS", runs: append(base, kaddonsRun(2000, 100*time.Second, 600, 78))},
		{name: "RSS per add-on moves within its margin", want: "PASS", runs: append(base, kaddonsRun(2000, 100*time.Second, 510, 78))},
		{name: "live heap not reported", want: "MISS", runs: append(base, kaddonsRun(2000, 100*time.Second, 450, 0))},
		{name: "nothing above N=200", want: "MISS", runs: base},
		{name: "no baseline", want: "MISS", runs: []run{kaddonsRun(200, 10*time.Second, 100, 15), kaddonsRun(500, 25*time.Second, 200, 26)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := &results{runs: tc.runs}
			g.Expect(res.growthTarget()).To(HavePrefix(tc.want + " "))
		})
	}
}

func TestWithoutKaddonsLabels(t *testing.T) {
	g := NewWithT(t)
	g.Expect(withoutKaddonsLabels(map[string]string{
		"addons.kaddons.dev/kind": "coredns", "addons.kaddons.dev/name": "dns", "app.kubernetes.io/managed-by": "kaddons",
		"k8s-app": "kube-dns",
	})).To(Equal(map[string]string{"k8s-app": "kube-dns"}))
	g.Expect(withoutKaddonsLabels(map[string]string{"app.kubernetes.io/managed-by": "Helm"})).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"))
	g.Expect(withoutKaddonsLabels(map[string]string{"addons.kaddons.dev/kind": "coredns"})).To(BeNil())
}

func TestFluxBuildMissing(t *testing.T) {
	g := NewWithT(t)
	repo := t.TempDir()
	empty := filepath.Join(repo, "flux")
	g.Expect(os.MkdirAll(filepath.Join(repo, "hack"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(repo, "hack", "toolchain.sh"), []byte("#!/bin/sh\necho "+empty+"\n"), 0o700)).To(Succeed())
	dir, missing := fluxBuild(t.Context(), repo)
	g.Expect(dir).To(BeEmpty())
	g.Expect(missing).To(And(ContainSubstring("Flux was not measured"), ContainSubstring("hack/toolchain.sh build flux")))

	o := options{repo: repo, impls: []string{implKaddons, implFlux}}
	g.Expect(findFlux(t.Context(), &o)).To(ConsistOf(missing))
	g.Expect(o.impls).To(Equal([]string{implKaddons}))
}

func TestLargeTargetNamesEveryRepeat(t *testing.T) {
	cases := []struct {
		name string
		run  run
		want string
	}{
		{name: "a single run", run: kaddonsRun(1000, 29*time.Second, 140, 50),
			want: "PASS N=1000 applied within 30s: 29s"},
		{name: "the median of three", run: func() run {
			r := kaddonsRun(1000, 29*time.Second, 140, 50)
			r.walls = []time.Duration{27 * time.Second, 29 * time.Second, 41 * time.Second}
			return r
		}(), want: "PASS N=1000 applied within 30s: 29s (median of 3 runs: 27s, 29s, 41s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := &results{runs: []run{tc.run}}
			g.Expect(res.largeTargets()[0]).To(Equal(tc.want))
		})
	}
}

func TestCollectGarbage(t *testing.T) {
	cases := []struct {
		name   string
		status int
		// pprof is whether the process serves pprof.
		pprof   bool
		want    []string
		wantErr bool
	}{
		{name: "serves pprof", status: http.StatusOK, pprof: true, want: []string{"/debug/pprof/heap?gc=1"}},
		{name: "serves no pprof", status: http.StatusOK},
		{name: "pprof fails", status: http.StatusInternalServerError, pprof: true, want: []string{"/debug/pprof/heap?gc=1"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var got []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = append(got, r.URL.RequestURI())
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			p := &process{name: "manager"}
			if tc.pprof {
				p.profilerAddr = strings.TrimPrefix(srv.URL, "http://")
			}
			err := (&operator{procs: []*process{p}}).collectGarbage(t.Context())
			g.Expect(err != nil).To(Equal(tc.wantErr), "error: %v", err)
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestChartTargets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		render []renderResult
		skip   bool
		want   []string
	}{
		{"no request on a cache hit", []renderResult{{name: "cold", chart: true, requests: "0.10"},
			{name: "cached", nsPerOp: 900, chart: true, cached: true, requests: "0.00"}}, false,
			[]string{"PASS chart add-on, nothing changed: render cache hit in 900 ns, 0.00 API requests per render (target 0)"}},
		{"requests on a cache hit", []renderResult{{name: "cached", nsPerOp: 900, chart: true, cached: true, requests: "2.00"}}, false,
			[]string{"MISS chart add-on, nothing changed: render cache hit in 900 ns, 2.00 API requests per render (target 0)"}},
		{"not measured", nil, false, []string{"MISS chart add-on, nothing changed: not measured"}},
		{"render skipped", nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &results{render: tc.render, options: options{skipRender: tc.skip}}
			NewWithT(t).Expect(res.chartTargets()).To(Equal(tc.want))
		})
	}
}
