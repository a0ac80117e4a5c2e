//go:build e2e && node

// The real-node suite (make test-node): the e2e harness on a cluster whose one node is real
// (hack/node.sh: containerd, runc and a kubelet on this machine, with images built from
// source and imported, never pulled) instead of kwok's fake nodes. It needs root on Linux,
// and no other real node on the machine (`make demo-down` stops the demo's).

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/gomega"
)

// nodeImages are the images the real-node cases run: the stable versions of kube-router,
// kube-proxy, CoreDNS and metrics-server, and the pause image. hack/addonimages builds
// them from source (cached in ~/.cache/kaddons/images).
var nodeImages = []string{"pause", "kube-proxy", "kube-router", "coredns:v1.12.1", "metrics-server:v0.7.2"}

// node is what hack/node.sh recorded about the suite's node (node.env).
var node struct {
	Name, IP, APIServerEndpoint, ClusterCIDR, CNIConfDir, CNIBinDir, ClusterDNS string
}

func init() {
	startCluster = startNode
	stopCluster = stopNode
}

// runNode runs hack/node.sh with the suite's cluster and a node folder in the work folder.
func runNode(out io.Writer, args ...string) error {
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "node.sh"), args...)
	cmd.Env = append(os.Environ(), clusterEnv...)
	cmd.Env = append(cmd.Env, "KADDONS_NODE_DIR="+filepath.Join(workDir, "node"))
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// startNode builds the images that are not cached, starts the cluster on the node IP and
// the node, and reads node.env.
func startNode() error {
	if os.Geteuid() != 0 {
		return errors.New("the real-node suite needs root (containerd, runc, the kubelet)")
	}
	logf("building the add-on images that are not cached: %s", strings.Join(nodeImages, " "))
	if err := runNode(os.Stderr, append([]string{"images"}, nodeImages...)...); err != nil {
		return fmt.Errorf("building the add-on images: %w", err)
	}
	logf("starting the local cluster and the real node (hack/node.sh up)")
	if err := runNode(os.Stderr, "up"); err != nil {
		return fmt.Errorf("starting the real node: %w", err)
	}
	return readNodeEnv(filepath.Join(workDir, "node", "node.env"))
}

// stopNode stops the node, which undoes its changes to the host and fails when the host
// differs from before, then the cluster.
func stopNode() error {
	nodeErr := runNode(os.Stderr, "down")
	if nodeErr != nil {
		nodeErr = fmt.Errorf("hack/node.sh down: %w", nodeErr)
	}
	return errors.Join(nodeErr, runLocalCluster(os.Stderr, "down", "--wipe"))
}

// readNodeEnv reads the KEY=value lines that hack/node.sh up wrote.
func readNodeEnv(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fields := map[string]*string{
		"KADDONS_NODE_NAME":                &node.Name,
		"KADDONS_NODE_IP":                  &node.IP,
		"KADDONS_NODE_API_SERVER_ENDPOINT": &node.APIServerEndpoint,
		"KADDONS_NODE_CLUSTER_CIDR":        &node.ClusterCIDR,
		"KADDONS_NODE_CNI_CONF_DIR":        &node.CNIConfDir,
		"KADDONS_NODE_CNI_BIN_DIR":         &node.CNIBinDir,
		"KADDONS_NODE_CLUSTER_DNS":         &node.ClusterDNS,
	}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), "=")
		if p := fields[key]; ok && p != nil {
			*p = value
			delete(fields, key)
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	for key := range fields {
		return fmt.Errorf("%s has no %s", path, key)
	}
	return nil
}

// nodeRelease is the version of the release the suite makes (make release) and installs
// on the node, as a user installs a published one.
const nodeRelease = "v0.1.0-node-e2e"

// installManagerOnNode makes a release for linux/amd64 (makeRelease: make release, then
// make release-verify), imports its image tarball into the node's containerd as an
// air-gapped user would (`ctr images import --digests`), and applies its install.yaml with the
// manager's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set to the API server's
// address on the node: on a cluster without kube-proxy yet, the kubernetes Service's
// address leads nowhere, so a bootstrapper gives the control plane's endpoint, as it
// does to kube-proxy.
func installManagerOnNode(g Gomega) testRelease {
	run := func(command string, args ...string) {
		cmd := exec.Command(command, args...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s %s:\n%s", command, strings.Join(args, " "), out)
	}
	r := makeRelease(g, nodeRelease, "linux/amd64")
	// --digests with the repository as --base-name also names the image
	// REPOSITORY@sha256:<index digest>, the reference the kubelet asks for when the
	// installer pins a digest; the tag alone is not found.
	run("ctr", "--address", filepath.Join(workDir, "node", "containerd", "containerd.sock"), "--namespace", "k8s.io",
		"images", "import", "--base-name", releaseImageRepository, "--digests",
		filepath.Join(r.dir, "kaddons-image-"+nodeRelease+".oci.tar"))

	installer := filepath.Join(workDir, "node-installer", "install.yaml")
	data, err := os.ReadFile(filepath.Join(r.dir, "install.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	host, port, err := net.SplitHostPort(node.APIServerEndpoint)
	g.Expect(err).NotTo(HaveOccurred())
	const env = "        env:\n        - name: POD_NAMESPACE\n"
	g.Expect(strings.Count(string(data), env)).To(Equal(1), "the installer's manager container has no env to extend")
	edited := strings.Replace(string(data), env, fmt.Sprintf(`        env:
        - name: KUBERNETES_SERVICE_HOST
          value: %q
        - name: KUBERNETES_SERVICE_PORT
          value: %q
        - name: POD_NAMESPACE
`, host, port), 1)
	g.Expect(os.MkdirAll(filepath.Dir(installer), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(installer, []byte(edited), 0o600)).To(Succeed())
	_, err = kubectl("apply", "--server-side", "--force-conflicts", "-f", installer)
	g.Expect(err).NotTo(HaveOccurred())
	return r
}

// releasePlugin extracts the release's kubectl plugin for linux/amd64 into a folder of
// its own and returns the folder, to put first on PATH.
func releasePlugin(g Gomega, r testRelease) string {
	dir := filepath.Join(workDir, "release-plugin")
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	cmd := exec.Command("tar", "-xzf", filepath.Join(r.dir, "kubectl-kaddons_"+nodeRelease+"_linux_amd64.tar.gz"), "-C", dir)
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "tar: %s", out)
	return dir
}
