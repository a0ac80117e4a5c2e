//go:build e2e

package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestLocalClusterRefusesATakenPort starts a second local cluster whose API server port
// is taken by another process: `up` must fail with a message that names the port and the
// variable that moves it, and leave nothing running.
func TestLocalClusterRefusesATakenPort(t *testing.T) {
	g := NewWithT(t)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = listener.Close() }()
	taken := listener.Addr().(*net.TCPAddr).Port
	ports, err := freePorts(2)
	g.Expect(err).NotTo(HaveOccurred())

	dir := filepath.Join(t.TempDir(), "cluster")
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "local-cluster.sh"), "up")
	cmd.Env = append(os.Environ(),
		"LOCAL_CLUSTER_DIR="+dir,
		"LOCAL_CLUSTER_ETCD_PORT="+strconv.Itoa(ports[0]),
		"LOCAL_CLUSTER_ETCD_PEER_PORT="+strconv.Itoa(ports[1]),
		"LOCAL_CLUSTER_APISERVER_PORT="+strconv.Itoa(taken),
	)
	out, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "up succeeded although port %d is taken:\n%s", taken, out)
	g.Expect(string(out)).To(ContainSubstring("port %d (needed by kube-apiserver) is already in use", taken))
	g.Expect(string(out)).To(ContainSubstring("LOCAL_CLUSTER_APISERVER_PORT=<port>"))

	// Nothing it may have started is left behind: no live pid in its state folder.
	pidFiles, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	for _, f := range pidFiles {
		data, err := os.ReadFile(f)
		g.Expect(err).NotTo(HaveOccurred())
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(processAlive(pid)).To(BeFalse(), "%s names a running process", f)
	}
}

// processAlive reports whether a process with pid exists.
func processAlive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}
