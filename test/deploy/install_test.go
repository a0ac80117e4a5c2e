package deploy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"

	"github.com/kaddons/kaddons/internal/config"
)

// installer holds the objects of dist/install.yaml that the tests look at.
type installer struct {
	deployment *appsv1.Deployment
	container  *corev1.Container
	configMap  *corev1.ConfigMap
	pdb        *policyv1.PodDisruptionBudget
	service    *corev1.Service
}

func readInstaller(t *testing.T) installer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "dist", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var in installer
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var into any
		switch u.GetKind() {
		case "Deployment":
			in.deployment = &appsv1.Deployment{}
			into = in.deployment
		case "ConfigMap":
			in.configMap = &corev1.ConfigMap{}
			into = in.configMap
		case "PodDisruptionBudget":
			in.pdb = &policyv1.PodDisruptionBudget{}
			into = in.pdb
		case "Service":
			in.service = &corev1.Service{}
			into = in.service
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if in.deployment == nil || in.configMap == nil || in.service == nil {
		t.Fatal("dist/install.yaml lacks the manager's Deployment, ConfigMap or Service")
	}
	for i := range in.deployment.Spec.Template.Spec.Containers {
		if c := &in.deployment.Spec.Template.Spec.Containers[i]; c.Name == "manager" {
			in.container = c
		}
	}
	if in.container == nil {
		t.Fatal("the Deployment has no manager container")
	}
	return in
}

// TestBootstrapSettings checks that the manager can run on a cluster being bootstrapped:
// no pod network, no cluster DNS, nodes not ready or not initialised, only control-plane
// nodes.
func TestBootstrapSettings(t *testing.T) {
	in := readInstaller(t)
	spec := in.deployment.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork is off: the manager would need a CNI")
	}
	if spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %q: the manager would need cluster DNS", spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	// The taints a kubeadm, kops or Cluster API node carries before it is ready.
	for _, taint := range []corev1.Taint{
		{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute},
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
	} {
		tolerated := false
		for _, tol := range spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), &taint, false) && tol.TolerationSeconds == nil {
				tolerated = true
			}
		}
		if !tolerated {
			t.Errorf("the manager does not tolerate the taint %s:%s for good", taint.Key, taint.Effect)
		}
	}
	// A dead node is unreachable: the pod must move off it, so that taint keeps its
	// default limit.
	for _, tol := range spec.Tolerations {
		if tol.ToleratesTaint(klog.Background(), &corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}, false) {
			t.Errorf("the toleration %+v keeps the manager on an unreachable node", tol)
		}
	}
	s := in.deployment.Spec.Strategy
	if s.RollingUpdate == nil || s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("strategy %+v: a surge pod cannot start on a single node while the old one holds the host ports", s)
	}
	if p := in.container.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v", p)
	}
}

// TestPorts checks that the host ports clear the kubelet, kube-proxy, the control plane,
// the NodePort range and the ephemeral ports, and that the configuration file binds the
// ports the Deployment, its probes and the metrics Service use.
func TestPorts(t *testing.T) {
	in := readInstaller(t)
	reserved := map[int32]string{
		6443: "kube-apiserver", 2379: "etcd", 2380: "etcd peers", 2381: "etcd metrics",
		10248: "kubelet healthz", 10249: "kube-proxy metrics", 10250: "kubelet", 10255: "kubelet read-only",
		10256: "kube-proxy healthz", 10257: "kube-controller-manager", 10259: "kube-scheduler",
	}
	ports := map[string]int32{}
	for _, p := range in.container.Ports {
		ports[p.Name] = p.ContainerPort
		if what, ok := reserved[p.ContainerPort]; ok {
			t.Errorf("port %s (%d) collides with %s on the host network", p.Name, p.ContainerPort, what)
		}
		if p.ContainerPort >= 30000 {
			t.Errorf("port %s (%d) is in the NodePort or ephemeral range", p.Name, p.ContainerPort)
		}
	}

	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(in.configMap.Data["controller_manager_config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("the installer's configuration file: %v", err)
	}
	for name, address := range map[string]string{
		"https-metrics": cfg.Manager.Metrics.BindAddress,
		"probes":        cfg.Manager.HealthProbeBindAddress,
	} {
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			t.Errorf("%s binds %q: %v", name, address, err)
			continue
		}
		if port != strconv.Itoa(int(ports[name])) {
			t.Errorf("the configuration binds %s to %s, the container port %s is %d", name, address, name, ports[name])
		}
	}
	for _, p := range []*corev1.Probe{in.container.LivenessProbe, in.container.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "probes" {
			t.Errorf("probe %+v does not use the probes port", p)
		}
	}
	for _, p := range in.service.Spec.Ports {
		if _, ok := ports[p.TargetPort.String()]; !ok {
			t.Errorf("the metrics Service targets port %s, which the container does not name", p.TargetPort.String())
		}
	}
}

// TestPodDisruptionBudget checks that the budget covers the manager's pods and never
// blocks a drain at one replica.
// TestPodDisruptionBudget checks that the installer, at its one replica, has no
// PodDisruptionBudget (one would protect nothing), and that the budget config/manager
// gives the chart and multi-replica installs selects the manager's pods and lets one of
// them be evicted at a time.
func TestPodDisruptionBudget(t *testing.T) {
	in := readInstaller(t)
	replicas := int32(1)
	if in.deployment.Spec.Replicas != nil {
		replicas = *in.deployment.Spec.Replicas
	}
	if got := in.pdb != nil; got != (replicas > 1) {
		t.Errorf("dist/install.yaml runs %d replica(s) and has a PodDisruptionBudget: %v; want one only above one replica", replicas, got)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "manager", "pdb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := utilyaml.Unmarshal(data, pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Kind != "PodDisruptionBudget" {
		t.Fatalf("config/manager/pdb.yaml holds a %q", pdb.Kind)
	}
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if selector.Empty() || !selector.Matches(labelsOf(in.deployment.Spec.Template.Labels)) {
		t.Errorf("the PodDisruptionBudget's selector %q does not select the manager's pods", selector)
	}
	if pdb.Spec.MinAvailable != nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the budget %+v: want maxUnavailable 1, which keeps all but one replica running", pdb.Spec)
	}
}

type labelsOf map[string]string

func (l labelsOf) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelsOf) Get(k string) string { return l[k] }
func (l labelsOf) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

// childEnv makes TestMain run only the GOMEMLIMIT probe in a child process.
const childEnv = "KADDONS_TEST_PRINT_MEMORY_LIMIT"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// With GOMEMLIMIT set, the runtime reports the limit it read.
		fmt.Println(debug.SetMemoryLimit(-1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestGOMEMLIMITIsTheMemoryLimitInBytes resolves GOMEMLIMIT as the kubelet does (the
// downward API's resourceFieldRef: the limit divided by the divisor, rounded up, as a
// plain number) and checks that the Go runtime reads it as the container's memory limit.
func TestGOMEMLIMITIsTheMemoryLimitInBytes(t *testing.T) {
	in := readInstaller(t)
	var ref *corev1.ResourceFieldSelector
	for _, e := range in.container.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
			ref = e.ValueFrom.ResourceFieldRef
		}
	}
	if ref == nil || ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != in.container.Name) {
		t.Fatalf("GOMEMLIMIT does not come from the manager's limits.memory: %+v", ref)
	}
	limit := in.container.Resources.Limits[corev1.ResourceMemory]
	if limit.IsZero() {
		t.Fatal("the manager has no memory limit")
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	value := strconv.FormatInt(int64(math.Ceil(float64(limit.Value())/float64(divisor.Value()))), 10)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1", "GOMEMLIMIT="+value)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the child with GOMEMLIMIT=%s: %v", value, err)
	}
	got, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("the child printed %q", out)
	}
	if got != limit.Value() {
		t.Errorf("GOMEMLIMIT=%s (limit %s, divisor %s) makes the runtime's limit %d bytes, want %d",
			value, limit.String(), divisor.String(), got, limit.Value())
	}
}
