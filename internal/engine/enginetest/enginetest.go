// Package enginetest starts the envtest control plane (a real kube-apiserver and etcd)
// that the envtest suites of the engine's packages and of controllers run against, and
// holds the helpers they share. Only tests import it.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

const (
	// EventuallyTimeout bounds every wait of the suites.
	EventuallyTimeout = 30 * time.Second
	// PollInterval is how often a wait looks again.
	PollInterval = 100 * time.Millisecond
)

// ErrNoAssets is Start's error when KUBEBUILDER_ASSETS is not set.
var ErrNoAssets = errors.New("KUBEBUILDER_ASSETS is not set: run `make test`, which builds kube-apiserver and etcd " +
	`with hack/toolchain.sh, or KUBEBUILDER_ASSETS="$(hack/toolchain.sh dir)" go test`)

// Scheme knows the built-in kinds and kaddons' own.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(addonsv1alpha1.AddToScheme(s))
	utilruntime.Must(configv1alpha1.AddToScheme(s))
	return s
}

// SetLogger sends controller-runtime's logs to stderr, errors only unless
// KADDONS_TEST_VERBOSE is set.
func SetLogger() {
	level := zapcore.ErrorLevel
	if os.Getenv("KADDONS_TEST_VERBOSE") != "" {
		level = zapcore.DebugLevel
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(level)))
}

// CRDDirectory is config/crd/bases of the repository the test runs in: the nearest
// folder above the working directory (a test runs in its package's folder) whose go.mod
// declares kaddons' module. It does not use the source file's path, which a -trimpath
// build (as CI's) leaves relative.
func CRDDirectory() string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("config", "crd", "bases")
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			modfile.ModulePath(data) == "github.com/kaddons/kaddons" {
			return filepath.Join(dir, "config", "crd", "bases")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("config", "crd", "bases")
		}
		dir = parent
	}
}

// Start starts a kube-apiserver and etcd from KUBEBUILDER_ASSETS with kaddons' CRDs
// installed. The caller stops the returned environment.
func Start() (*envtest.Environment, *rest.Config, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, ErrNoAssets
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{CRDDirectory()},
		ErrorIfCRDPathMissing: true,
	}
	// envtest's default /24 runs out after about 253 Services.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, err
	}
	return env, cfg, nil
}

// NewNamespace creates a namespace of its own for one test and deletes it afterwards.
func NewNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kaddons-test-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), ns)
	})
	return ns.Name
}

// ExpectUntouched checks that every object still has the UID and resource version it
// was created with.
func ExpectUntouched(t *testing.T, c client.Client, objects []*unstructured.Unstructured) {
	t.Helper()
	g := gomega.NewWithT(t)
	for _, o := range objects {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(o), live)).To(gomega.Succeed(), "%s %s", o.GetKind(), o.GetName())
		g.Expect(live.GetUID()).To(gomega.Equal(o.GetUID()), "%s %s was re-created", o.GetKind(), o.GetName())
		g.Expect(live.GetResourceVersion()).To(gomega.Equal(o.GetResourceVersion()), "%s %s was written", o.GetKind(), o.GetName())
	}
}

// RunWithManager starts mgr, waits for its cache, runs the suite's tests and stops the
// manager again: the end of a suite's TestMain. It returns the exit code for os.Exit.
func RunWithManager(m *testing.M, mgr ctrl.Manager) int {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "cache did not sync")
		return 1
	}
	return m.Run()
}
