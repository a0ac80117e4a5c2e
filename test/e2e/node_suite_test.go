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

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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

// nodeManagerImage is the reference under which the suite imports the manager image it
// builds into the node's containerd; the installer names it, and nothing pulls it.
const nodeManagerImage = "kaddons.local/kaddons/manager:node-e2e"

// installManagerOnNode builds the manager image for linux/amd64 (make image's builder),
// imports it into the node's containerd, and applies the installer (make build-installer)
// with the manager's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set to the API
// server's address on the node: on a cluster without kube-proxy yet, the kubernetes
// Service's address leads nowhere, so a bootstrapper gives the control plane's endpoint,
// as it does to kube-proxy. It returns the installer's path.
func installManagerOnNode(g Gomega) string {
	dir := filepath.Join(workDir, "manager-image")
	run := func(command string, args ...string) {
		cmd := exec.Command(command, args...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s %s:\n%s", command, strings.Join(args, " "), out)
	}
	run("go", "run", "./hack/image", "-image", "oci:"+dir, "-platforms", "linux/amd64", "-version", "node-e2e")
	// The layout holds the image index make image pushes; the node gets its linux/amd64
	// image as a docker archive named nodeManagerImage, as hack/node.sh imports add-ons.
	layoutIndex, err := layout.ImageIndexFromPath(dir)
	g.Expect(err).NotTo(HaveOccurred())
	outer, err := layoutIndex.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(outer.Manifests).To(HaveLen(1), "the layout holds one image index")
	index, err := layoutIndex.ImageIndex(outer.Manifests[0].Digest)
	g.Expect(err).NotTo(HaveOccurred())
	platforms, err := index.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(platforms.Manifests).To(HaveLen(1), "make image built more than linux/amd64")
	img, err := index.Image(platforms.Manifests[0].Digest)
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := name.ParseReference(nodeManagerImage)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tarball.WriteToFile(dir+".tar", ref, img)).To(Succeed())
	run("ctr", "--address", filepath.Join(workDir, "node", "containerd", "containerd.sock"), "--namespace", "k8s.io",
		"images", "import", dir+".tar")

	installer := filepath.Join(workDir, "node-installer", "install.yaml")
	run("make", "build-installer", "IMG="+nodeManagerImage, "INSTALLER="+installer)
	data, err := os.ReadFile(installer)
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
	g.Expect(os.WriteFile(installer, []byte(edited), 0o600)).To(Succeed())
	_, err = kubectl("apply", "--server-side", "--force-conflicts", "-f", installer)
	g.Expect(err).NotTo(HaveOccurred())
	return installer
}
