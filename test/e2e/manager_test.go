//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// managerReadyTimeout bounds the wait for a started manager's /readyz.
const managerReadyTimeout = 2 * time.Minute

var (
	managersMu sync.Mutex
	// managers holds every manager the suite created, for teardown and diagnostics.
	managers []*managerProcess
)

// managerProcess is one run of the manager binary as the operator's ServiceAccount. It
// can be started again after it stopped; every run appends to the same log file.
type managerProcess struct {
	name    string
	logPath string
	// args are added after the suite's defaults; a repeated flag overrides the default.
	args []string
	// binary, dir and kubeconfig replace the suite's manager binary, working directory
	// (the repository) and ServiceAccount kubeconfig when set.
	binary, dir, kubeconfig string
	// builtinChannels leaves out --channels: the manager reads the channels built into it.
	builtinChannels bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	port int
	done chan struct{}
}

// newManager registers a manager called name (its log is <work>/<name>.log).
// trustAllConfig is the managers' configuration file unless a case gives its own: every
// namespace is trusted.
const trustAllConfig = `apiVersion: config.kaddons.dev/v1beta1
kind: OperatorConfiguration
runtime:
  tenancy:
    trustedNamespaces: ["*"]
`

// managerConfig is the path of trustAllConfig in the work folder.
var managerConfig string

func newManager(name string, args ...string) *managerProcess {
	p := &managerProcess{name: name, logPath: filepath.Join(workDir, name+".log"), args: args}
	managersMu.Lock()
	managers = append(managers, p)
	managersMu.Unlock()
	return p
}

// start runs the manager and waits until its /readyz answers.
func (p *managerProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running() {
		return fmt.Errorf("manager %s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	p.port = ports[0]
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	args := []string{
		"--leader-elect=false",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(p.port),
		"--metrics-bind-address=0",
	}
	if !p.builtinChannels {
		args = append([]string{"--channels=" + channelsDir}, args...)
	}
	if !slices.ContainsFunc(p.args, func(a string) bool { return strings.HasPrefix(a, "--config=") }) {
		args = append(args, "--config="+managerConfig)
	}
	args = append(args, p.args...)
	binary, dir, kubeconfig := orDefault(p.binary, managerBinary), orDefault(p.dir, repoRoot), orDefault(p.kubeconfig, managerKubeconfig)
	_, _ = fmt.Fprintf(logFile, "===== %s: starting %s %s\n", time.Now().Format(time.RFC3339), binary, strings.Join(args, " "))

	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG"), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting manager %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	logf("started manager %s (pid %d, probes on 127.0.0.1:%d, log %s)", p.name, cmd.Process.Pid, p.port, p.logPath)

	deadline := time.Now().Add(managerReadyTimeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", p.port)
	httpClient := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			return fmt.Errorf("manager %s exited while starting (%s); see %s", p.name, cmd.ProcessState, p.logPath)
		default:
		}
		if resp, err := httpClient.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("manager %s was not ready on %s within %s; see %s", p.name, url, managerReadyTimeout, p.logPath)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// running tells whether the current run has not exited. Callers hold p.mu.
func (p *managerProcess) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// alive tells whether the manager runs.
func (p *managerProcess) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running()
}

// kill sends SIGKILL, as a crash or an OOM kill would, and waits until the process is gone.
func (p *managerProcess) kill() {
	p.signal(syscall.SIGKILL, 0)
}

// stop sends SIGTERM, then SIGKILL after 15s, and waits until the process is gone.
func (p *managerProcess) stop() {
	p.signal(syscall.SIGTERM, 15*time.Second)
}

func (p *managerProcess) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return
	}
	pid := p.cmd.Process.Pid
	_ = p.cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-p.done:
		case <-time.After(grace):
			logf("manager %s (pid %d) ignored %s for %s; killing it", p.name, pid, sig, grace)
			_ = p.cmd.Process.Kill()
		}
	}
	<-p.done
	logf("manager %s (pid %d) stopped by %s", p.name, pid, sig)
}

// ensureRunning starts the manager unless it runs.
func (p *managerProcess) ensureRunning() error {
	if p.alive() {
		return nil
	}
	return p.start()
}

// logHasLine tells whether a line of the manager's log (all runs) contains every one of
// substrings, ignoring case.
func (p *managerProcess) logHasLine(substrings ...string) bool {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.ToLower(string(data)), "\n") {
		all := true
		for _, s := range substrings {
			if !strings.Contains(line, strings.ToLower(s)) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// logTail returns the last n lines of the manager's log.
func (p *managerProcess) logTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	var lines []string
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := scanner.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		lines = append(lines, fmt.Sprintf("(reading the log: %v)", err))
	}
	return strings.Join(lines, "\n")
}

// stopAllManagers stops every manager the suite started.
func stopAllManagers() {
	managersMu.Lock()
	all := append([]*managerProcess(nil), managers...)
	managersMu.Unlock()
	for _, p := range all {
		p.stop()
	}
}

// allManagers returns every manager the suite created.
func allManagers() []*managerProcess {
	managersMu.Lock()
	defer managersMu.Unlock()
	return append([]*managerProcess(nil), managers...)
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// managerHasFlag tells whether the manager binary accepts --name, from its --help.
func managerHasFlag(name string) bool {
	out, _ := exec.Command(managerBinary, "--help").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && (fields[0] == "-"+name || fields[0] == "--"+name) {
			return true
		}
	}
	return false
}
