//go:build e2e

// Package e2e tests kaddons end to end, the way a user meets it: a real control plane
// (hack/local-cluster.sh: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok, whose fake nodes make pods Running and Ready), the CRDs and RBAC of
// config/default, and the manager binary running as its own ServiceAccount. Tests drive
// the cluster with the stock kubectl and check the outcome with a Go client.
//
// Run it with `make test-e2e`. The suite's cluster has its own state folder and ports, so
// it never touches a cluster started by `make demo`. Set KADDONS_E2E_KEEP=1 to keep the
// cluster and the logs after the run, and KADDONS_E2E_MANAGER to test a prebuilt manager
// binary instead of building one.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// The operator's namespace and ServiceAccount, as config/default names them.
const (
	operatorNamespace      = "kaddons-system"
	operatorServiceAccount = "kaddons-controller-manager"
)

// installKinds are the kinds of config/default that the suite installs: everything but
// the manager's Deployment and metrics Service, since the manager runs on this machine.
var installKinds = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ServiceAccount": true,
	"Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

var (
	scheme = runtime.NewScheme()

	// repoRoot is the repository's root folder.
	repoRoot string
	// workDir holds the cluster state, the manager binary, its kubeconfig and its logs.
	workDir string
	// clusterEnv is the environment for hack/local-cluster.sh: state folder and ports.
	clusterEnv []string
	// kubectlPath is the toolchain's kubectl.
	kubectlPath string
	// adminKubeconfig authenticates as the cluster admin.
	adminKubeconfig string
	// channelsDir holds the repository's channels plus the test-only packages of
	// testdata/packages; the managers read it.
	channelsDir string
	// managerKubeconfig authenticates as the operator's ServiceAccount.
	managerKubeconfig string
	// managerBinary is the manager under test.
	managerBinary string
	// k8sClient reads the cluster as admin, straight from the API server.
	k8sClient client.WithWatch
	// suiteManager is the manager the tests run against; tests may kill and restart it.
	suiteManager *managerProcess

	teardownOnce sync.Once

	// startCluster starts the suite's cluster, and stopCluster stops it and deletes its
	// state: the local cluster with kwok's fake nodes, unless a suite (the real node's)
	// replaces them in its init.
	startCluster = func() error { return runLocalCluster(os.Stderr, "up") }
	stopCluster  = func() error { return runLocalCluster(os.Stderr, "down", "--wipe") }
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(scheme))
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

// runSuite brings the cluster and the manager up, runs the tests and tears everything
// down, also when the run is interrupted or about to hit the test timeout.
func runSuite(m *testing.M) int {
	start := time.Now()
	defer teardown()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		logf("received %s; tearing down", sig)
		teardown()
		os.Exit(1)
	}()
	// go test panics at its -timeout without running deferred functions: tear down the
	// cluster shortly before, so that no process outlives the run.
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > time.Minute {
			time.AfterFunc(d-45*time.Second, func() {
				logf("the test timeout (%s) is near; tearing down before go test panics", d)
				teardown()
			})
		}
	}

	if err := setup(); err != nil {
		logf("setup failed: %v", err)
		dumpDiagnostics(os.Stderr, "setup")
		return 1
	}
	logf("cluster and manager ready in %s", time.Since(start).Round(time.Second))
	return m.Run()
}

// copyTree copies the files under src into dst, creating folders as needed.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// setup starts the cluster, builds and starts the manager.
func setup() error {
	var err error
	if repoRoot, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		return fmt.Errorf("the repository root %s has no go.mod: %w", repoRoot, err)
	}
	if workDir, err = os.MkdirTemp("", "kaddons-e2e-"); err != nil {
		return err
	}
	logf("work folder: %s", workDir)

	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	clusterEnv = []string{
		"LOCAL_CLUSTER_DIR=" + filepath.Join(workDir, "cluster"),
		"LOCAL_CLUSTER_ETCD_PORT=" + strconv.Itoa(ports[0]),
		"LOCAL_CLUSTER_ETCD_PEER_PORT=" + strconv.Itoa(ports[1]),
		"LOCAL_CLUSTER_APISERVER_PORT=" + strconv.Itoa(ports[2]),
		"LOCAL_CLUSTER_LOG_LINES=40",
	}
	adminKubeconfig = filepath.Join(workDir, "cluster", "kubeconfig")
	channelsDir = filepath.Join(workDir, "channels")
	if err := copyTree(filepath.Join(repoRoot, "channels"), channelsDir); err != nil {
		return fmt.Errorf("copying the channels: %w", err)
	}
	if err := copyTree(filepath.Join(repoRoot, "test", "e2e", "testdata", "packages"), filepath.Join(channelsDir, "packages")); err != nil {
		return fmt.Errorf("adding the test packages: %w", err)
	}
	managerKubeconfig = filepath.Join(workDir, "manager.kubeconfig")

	// Build the manager while the cluster starts.
	built := make(chan error, 1)
	go func() { built <- buildManager() }()

	logf("starting the local cluster")
	if err := startCluster(); err != nil {
		if buildErr := <-built; buildErr != nil {
			logf("%v", buildErr)
		}
		return fmt.Errorf("starting the local cluster: %w", err)
	}
	if err := <-built; err != nil {
		return err
	}
	toolchain, err := output(exec.Command(filepath.Join(repoRoot, "hack", "toolchain.sh"), "dir"))
	if err != nil {
		return err
	}
	kubectlPath = filepath.Join(strings.TrimSpace(toolchain), "kubectl")

	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", adminKubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}

	logf("installing the CRDs and the operator's RBAC")
	if err := install(); err != nil {
		return err
	}
	if err := runLocalCluster(os.Stderr, "kubeconfig-for-sa", operatorNamespace, operatorServiceAccount, managerKubeconfig); err != nil {
		return fmt.Errorf("writing the operator's kubeconfig: %w", err)
	}
	// Each case runs in namespaces of its own; the managers trust every namespace, as on
	// a cluster where only admins create add-ons, unless a case passes a --config of its
	// own. TestTenant narrows the trust with an OperatorConfig.
	managerConfig = filepath.Join(workDir, "manager-config.yaml")
	if err := os.WriteFile(managerConfig, []byte(trustAllConfig), 0o600); err != nil {
		return err
	}
	suiteManager = newManager("manager")
	if err := suiteManager.start(); err != nil {
		return err
	}
	return nil
}

// teardown stops every manager and the cluster, and deletes the work folder unless
// KADDONS_E2E_KEEP is set. It runs once, whoever calls it first.
func teardown() {
	teardownOnce.Do(func() {
		stopAllManagers()
		if workDir == "" {
			return
		}
		if os.Getenv("KADDONS_E2E_KEEP") != "" {
			logf("KADDONS_E2E_KEEP is set: the cluster keeps running; stop it with:")
			logf("  %s hack/local-cluster.sh down --wipe", strings.Join(clusterEnv[:1], " "))
			return
		}
		if err := stopCluster(); err != nil {
			logf("stopping the local cluster: %v", err)
		}
		if err := os.RemoveAll(workDir); err != nil {
			logf("removing %s: %v", workDir, err)
		}
	})
}

// buildManager builds the manager into the work folder, unless KADDONS_E2E_MANAGER names
// a binary to test.
func buildManager() error {
	if prebuilt := os.Getenv("KADDONS_E2E_MANAGER"); prebuilt != "" {
		abs, err := filepath.Abs(prebuilt)
		if err != nil {
			return err
		}
		managerBinary = abs
		logf("testing the manager binary %s", managerBinary)
		return nil
	}
	managerBinary = filepath.Join(workDir, "manager")
	logf("building the manager")
	// Built as make image builds it (static, -trimpath), so that TestImage's build of the
	// same packages comes from the build cache.
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "without_exec_applier,without_direct_applier", "-o", managerBinary, ".")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if _, err := output(cmd); err != nil {
		return fmt.Errorf("building the manager: %w", err)
	}
	return nil
}

// runLocalCluster runs hack/local-cluster.sh with the suite's state folder and ports.
func runLocalCluster(out io.Writer, args ...string) error {
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "local-cluster.sh"), args...)
	cmd.Env = append(os.Environ(), clusterEnv...)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// install applies config/default without the manager's Deployment and Service, server
// side, and waits until the CRDs are Established.
func install() error {
	rendered, err := kubectl("kustomize", filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		return err
	}
	var docs []string
	var crds []string
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("decoding config/default: %w", err)
		}
		if !installKinds[u.GetKind()] {
			continue
		}
		if u.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, "crd/"+u.GetName())
		}
		doc, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(doc))
	}
	if len(crds) == 0 {
		return errors.New("config/default renders no CRD")
	}
	if _, err := kubectlIn(strings.Join(docs, "---\n"), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	_, err = kubectl(append([]string{"wait", "--for=condition=Established", "--timeout=2m"}, crds...)...)
	return err
}

// kubectl runs the toolchain kubectl as the cluster admin and returns its stdout.
func kubectl(args ...string) (string, error) {
	return kubectlIn("", args...)
}

// kubectlIn runs kubectl with stdin as its standard input.
func kubectlIn(stdin string, args ...string) (string, error) {
	cmd := exec.Command(kubectlPath, append([]string{"--kubeconfig=" + adminKubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return output(cmd)
}

// output runs cmd and returns its stdout; the error carries the command and its stderr.
func output(cmd *exec.Cmd) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w\n%s%s", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// freePorts returns n distinct TCP ports that are free on 127.0.0.1 right now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logf prints a progress line of the suite.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
}

// background returns a context for one call to the API server.
func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
