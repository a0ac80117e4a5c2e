package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat, comm string
		utime            string
		ok               bool
	}{
		{name: "plain", stat: "42 (etcd) S 1 42 42 0 -1 4194560 10 0 0 0 250 75 0 0 20 0 12 0 99",
			comm: "etcd", utime: "250", ok: true},
		{name: "command with spaces and parentheses", stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0",
			comm: "a) b (c)", utime: "3", ok: true},
		{name: "no command", stat: "7 etcd R 1", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields, comm, ok := parseStat([]byte(tc.stat))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if comm != tc.comm {
				t.Errorf("command = %q, want %q", comm, tc.comm)
			}
			if fields[11] != tc.utime {
				t.Errorf("utime field = %q, want %q", fields[11], tc.utime)
			}
		})
	}
}

func TestProcessCPUAndChildren(t *testing.T) {
	// Burn some CPU in this process, then read it back.
	deadline := time.Now().Add(100 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = n * n
	}
	used, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if used < 50*time.Millisecond {
		t.Errorf("this process used %s of CPU after a 100ms busy loop", used)
	}

	child := exec.Command("sleep", "5")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	children, err := childProcesses(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if comm := children[child.Process.Pid]; comm != "sleep" {
		t.Errorf("child %d listed as %q among %v, want sleep", child.Process.Pid, comm, children)
	}
}

func TestCPUTimesPerAddon(t *testing.T) {
	before := cpuTimes{apiServer: time.Second, etcd: time.Second, operator: time.Second, bench: time.Second}
	after := cpuTimes{apiServer: 3 * time.Second, etcd: 1500 * time.Millisecond, operator: 2 * time.Second, bench: 1200 * time.Millisecond}
	got := after.sub(before).perAddon(100)
	if want := "20.0 / 5.0 / 10.0 / 2.0 (37.0)"; got != want {
		t.Errorf("perAddon = %q, want %q", got, want)
	}
}
