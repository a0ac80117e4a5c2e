package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTimes is the CPU time used so far by each party of a measurement: the API server
// and etcd (the bench's child processes), the operator's processes together, and the
// benchmark itself (its proxy, its creates and its watch).
type cpuTimes struct {
	apiServer, etcd, operator, bench time.Duration
}

// sub returns t minus an earlier sample.
func (t cpuTimes) sub(earlier cpuTimes) cpuTimes {
	return cpuTimes{apiServer: t.apiServer - earlier.apiServer, etcd: t.etcd - earlier.etcd,
		operator: t.operator - earlier.operator, bench: t.bench - earlier.bench}
}

// total returns the CPU time of all parties.
func (t cpuTimes) total() time.Duration { return t.apiServer + t.etcd + t.operator + t.bench }

// perAddon formats t divided by n as milliseconds: "API server / etcd / operator / bench".
func (t cpuTimes) perAddon(n int) string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f (%.1f)", ms(t.apiServer), ms(t.etcd), ms(t.operator), ms(t.bench), ms(t.total()))
}

// sampleCPU reads the CPU time used so far by the API server and etcd (found among the
// bench's children by command name), the operator's processes (none when op is nil, as
// while a phase restarts it) and the bench itself.
func sampleCPU(op *operator) (cpuTimes, error) {
	var t cpuTimes
	var err error
	if t.bench, err = processCPU(os.Getpid()); err != nil {
		return t, err
	}
	var procs []*process
	if op != nil {
		procs = op.procs
	}
	for _, p := range procs {
		d, err := processCPU(p.cmd.Process.Pid)
		if err != nil {
			return t, err
		}
		t.operator += d
	}
	children, err := childProcesses(os.Getpid())
	if err != nil {
		return t, err
	}
	for pid, comm := range children {
		var into *time.Duration
		switch comm {
		case "kube-apiserver":
			into = &t.apiServer
		case "etcd":
			into = &t.etcd
		default:
			continue
		}
		d, err := processCPU(pid)
		if err != nil {
			return t, err
		}
		*into += d
	}
	return t, nil
}

// processCPU returns the user and system CPU time pid has used, from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	fields, _, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	// After the command: state (0), ppid (1), ..., utime (11), stime (12).
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields after the command", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procStat returns the fields of /proc/PID/stat after the command, and the command.
func procStat(pid int) ([]string, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, "", fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	fields, comm, ok := parseStat(b)
	if !ok {
		return nil, "", fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	return fields, comm, nil
}

// parseStat splits the content of /proc/PID/stat into the command and the fields after
// it. The command is in parentheses and may itself hold spaces and parentheses.
func parseStat(b []byte) ([]string, string, bool) {
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return nil, "", false
	}
	return strings.Fields(string(b[closing+1:])), string(b[open+1 : closing]), true
}

// childProcesses returns the command names of the processes whose parent is pid.
func childProcesses(pid int) (map[int]string, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	children := map[int]string{}
	for _, dir := range dirs {
		child, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		fields, comm, err := procStat(child)
		if err != nil || len(fields) < 2 {
			continue // gone since the listing
		}
		if fields[1] == strconv.Itoa(pid) {
			children[child] = comm
		}
	}
	return children, nil
}
