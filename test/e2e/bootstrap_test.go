//go:build e2e && bootstrap

// The bootstrap suite (make test-bootstrap) drives the real tools that install kaddons and
// gate on its add-ons: Cluster API's ClusterResourceSet (bootstrap_capi_test.go) and Flux
// (bootstrap_flux_test.go). It runs in this package, with the e2e suite's cluster and
// manager, but only with the bootstrap build tag, and only its TestBootstrap* tests: the
// tools are compiled by `hack/toolchain.sh build capi flux`, which make test-e2e does not
// need.

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaddons/kaddons/internal/loopbackcert"
)

// bootstrapImage is the image the installer names. No kubelet pulls it: kwok plays the
// pods, and the manager runs on this machine.
const bootstrapImage = "registry.example.com/kaddons/manager:bootstrap"

var (
	bootstrapInstallerOnce sync.Once
	bootstrapInstallerPath string
	bootstrapInstallerErr  error
)

// bootstrapInstaller writes the installer, as `make build-installer` writes dist/install.yaml
// (from config/default as it is now), once per run, and returns its path.
func bootstrapInstaller(t *testing.T) string {
	t.Helper()
	bootstrapInstallerOnce.Do(func() {
		bootstrapInstallerPath = filepath.Join(workDir, "bootstrap", "install.yaml")
		cmd := exec.Command("make", "build-installer", "IMG="+bootstrapImage, "INSTALLER="+bootstrapInstallerPath)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			bootstrapInstallerErr = fmt.Errorf("make build-installer: %w\n%s", err, out)
		}
	})
	if bootstrapInstallerErr != nil {
		t.Fatal(bootstrapInstallerErr)
	}
	return bootstrapInstallerPath
}

// toolDir returns the folder hack/toolchain.sh built the bundle (capi, flux) into.
func toolDir(t *testing.T, bundle string) string {
	t.Helper()
	out, err := output(exec.Command(filepath.Join(repoRoot, "hack", "toolchain.sh"), "dir", bundle))
	if err != nil {
		t.Fatalf("locating the %s build: %v", bundle, err)
	}
	dir := strings.TrimSpace(out)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("%s is not built (%v): run `hack/toolchain.sh build %s`, as make test-bootstrap does", bundle, err, bundle)
	}
	return dir
}

// toolProcess is one of the real tools' controllers, run on this machine, until its test
// ends.
type toolProcess struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
}

// startTool runs binary with args and KUBECONFIG=kubeconfig, logging to <work>/<name>.log,
// waits until http://127.0.0.1:<healthPort>/readyz answers 200, and stops it with t. Its
// log's tail goes into t's output if t fails.
func startTool(t *testing.T, name, binary, kubeconfig string, healthPort int, args ...string) {
	t.Helper()
	p := &toolProcess{name: name, logPath: filepath.Join(workDir, name+".log"), done: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	_, _ = fmt.Fprintf(logFile, "===== %s: starting %s %s\n", time.Now().Format(time.RFC3339), binary, strings.Join(args, " "))
	p.cmd = exec.Command(binary, args...)
	p.cmd.Dir = filepath.Dir(p.logPath)
	p.cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG"), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", p.logPath, p.logTail(60))
		}
	})
	logf("started %s (pid %d, log %s)", name, p.cmd.Process.Pid, p.logPath)

	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	httpClient := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(managerReadyTimeout)
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited while starting (%s):\n%s", name, p.cmd.ProcessState, p.logTail(30))
		default:
		}
		if resp, err := httpClient.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not ready on %s within %s:\n%s", name, url, managerReadyTimeout, p.logTail(30))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stop sends SIGTERM, then SIGKILL after 15s, and waits until the process is gone.
func (p *toolProcess) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail returns the last n lines of the log.
func (p *toolProcess) logTail(n int) string {
	return (&managerProcess{logPath: p.logPath}).logTail(n)
}

// servingCert writes a self-signed serving certificate for 127.0.0.1 into dir as tls.crt
// and tls.key (what controller-runtime's webhook server reads) and returns it in PEM,
// for the webhook configurations' caBundle.
func servingCert(dir string) ([]byte, error) {
	certPEM, keyPEM, err := loopbackcert.New()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	return certPEM, nil
}

// applyCRDs applies every CRD file of dir to the suite's cluster and waits until they are
// Established.
func applyCRDs(t *testing.T, dir string) {
	t.Helper()
	out, err := kubectl("apply", "--server-side", "-f", dir, "-o", "name")
	if err != nil {
		t.Fatalf("applying the CRDs of %s: %v", dir, err)
	}
	names := strings.Fields(out)
	if len(names) == 0 {
		t.Fatalf("%s holds no CRD", dir)
	}
	if _, err := kubectl(append([]string{"wait", "--for=condition=Established", "--timeout=2m"}, names...)...); err != nil {
		t.Fatal(err)
	}
}
