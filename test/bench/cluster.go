package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	benchv1alpha1 "github.com/kaddons/kaddons/test/bench/api/v1alpha1"
)

// serviceCIDR is wide enough for a Service per instance at every size measured;
// envtest's default /24 runs out at about 253 Services.
const serviceCIDR = "10.96.0.0/12"

// benchScheme knows the built-in kinds and both add-on kinds.
var benchScheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(benchScheme))
	utilruntime.Must(addonsv1alpha1.AddToScheme(benchScheme))
	utilruntime.Must(benchv1alpha1.AddToScheme(benchScheme))
}

// cluster is a fresh kube-apiserver and etcd with both add-on CRDs installed.
type cluster struct {
	env *envtest.Environment
	// admin is the unwrapped admin config of the bench's own clients.
	admin *rest.Config
	// client and dynamic are the bench's own clients. Their requests are counted in
	// self, so that they can be told apart in the API server's metrics.
	client  client.Client
	dynamic dynamic.Interface
	rest    rest.Interface
	self    *selfCounter
}

// startCluster starts a control plane and installs the kaddons and bench CRDs, and those
// in extraCRDs.
func startCluster(repo string, extraCRDs ...string) (*cluster, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make bench`, or set it to $(hack/toolchain.sh dir)")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths: append([]string{
			filepath.Join(repo, "config", "crd", "bases"),
			filepath.Join(repo, "test", "bench", "testdata", "crd"),
		}, extraCRDs...),
		ErrorIfCRDPathMissing: true,
	}
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", serviceCIDR)
	admin, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	c := &cluster{env: env, admin: admin, self: &selfCounter{}}
	if err := c.connect(); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return c, nil
}

// connect builds the bench's counted clients.
func (c *cluster) connect() error {
	cfg := rest.CopyConfig(c.admin)
	cfg.QPS, cfg.Burst = -1, 0
	// Uncompressed, as the operators ask: the bench's watch on the add-ons would otherwise
	// have the API server gzip every event, on the cores the operators are measured on.
	cfg.DisableCompression = true
	cfg.Wrap(c.self.wrap)
	var err error
	if c.client, err = client.New(cfg, client.Options{Scheme: benchScheme}); err != nil {
		return fmt.Errorf("creating the bench client: %w", err)
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return fmt.Errorf("creating the bench dynamic client: %w", err)
	}
	rc := rest.CopyConfig(cfg)
	rc.GroupVersion = nil
	rc.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	if c.rest, err = rest.UnversionedRESTClientFor(rc); err != nil {
		return fmt.Errorf("creating the bench REST client: %w", err)
	}
	return nil
}

// stop stops the control plane and deletes its data.
func (c *cluster) stop() error {
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stopping the control plane: %w", err)
	}
	return nil
}

// serverMetrics is what the API server counted up to one scrape, together with the
// bench's own requests counted just before it.
type serverMetrics struct {
	// requests counts non-watch requests by verb (GET, LIST, POST, APPLY, ...).
	requests map[string]float64
	// etcdWrites counts etcd creates, updates and deletes, by resource.
	etcdWrites map[string]float64
	self       selfCounts
}

// scrape reads the API server's /metrics.
func (c *cluster) scrape(ctx context.Context) (serverMetrics, error) {
	m := serverMetrics{requests: map[string]float64{}, etcdWrites: map[string]float64{}, self: c.self.snapshot()}
	body, err := c.rest.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return m, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	ss, err := parseSamples(bytes.NewReader(body), "apiserver_request_total", "etcd_requests_total")
	if err != nil {
		return m, err
	}
	for _, s := range ss {
		switch s.name {
		case "apiserver_request_total":
			if verb := s.labels["verb"]; verb != "WATCH" {
				m.requests[verb] += s.value
			}
		case "etcd_requests_total":
			switch s.labels["operation"] {
			case "create", "update", "delete":
				m.etcdWrites[etcdResource(s.labels)] += s.value
			}
		}
	}
	return m, nil
}

// etcdResource names the resource of an etcd_requests_total sample, whichever labels
// this API server version uses.
func etcdResource(labels map[string]string) string {
	if r := labels["resource"]; r != "" {
		if g := labels["group"]; g != "" {
			return r + "." + g
		}
		return r
	}
	return labels["type"]
}

// serverDelta is what the API server counted between two scrapes.
type serverDelta struct {
	// requests and writes are non-watch requests seen by the API server, minus the
	// bench's own.
	requests, writes float64
	// etcdWrites are etcd writes minus the bench's own writes, leaving out the
	// resources the API server keeps for itself (see apiServerOwned).
	etcdWrites float64
	// internalWrites are the API server's own writes left out of etcdWrites.
	internalWrites float64
	// etcdByResource are all etcd writes by resource, the bench's own included.
	etcdByResource map[string]float64
	// cpu is the CPU time each party used, the operator's quiet period included.
	cpu cpuTimes
}

// delta returns what happened between the scrapes before and after, without the
// bench's own requests.
func delta(before, after serverMetrics) serverDelta {
	var d serverDelta
	for verb, v := range after.requests {
		n := v - before.requests[verb]
		d.requests += n
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
			d.writes += n
		}
	}
	d.etcdByResource = map[string]float64{}
	for res, v := range after.etcdWrites {
		n := v - before.etcdWrites[res]
		if n != 0 {
			d.etcdByResource[res] = n
		}
		if apiServerOwned(res) {
			d.internalWrites += n
			continue
		}
		d.etcdWrites += n
	}
	self := after.self.sub(before.self)
	d.requests -= float64(self.requests)
	d.writes -= float64(self.writes)
	d.etcdWrites -= float64(self.writes)
	return d
}

// apiServerOwned reports whether the API server writes resource for itself: its
// leases and peer addresses (apiServerIPInfo, apiServerPeerIPInfo), its flow-control
// and API registration status, its Service CIDRs and the endpoints of the kubernetes
// Service. No operator under test writes these.
func apiServerOwned(resource string) bool {
	if strings.HasPrefix(resource, "apiServer") {
		return true
	}
	name, _, _ := strings.Cut(resource, ".")
	switch name {
	case "leases", "flowschemas", "prioritylevelconfigurations", "apiservices", "customresourcedefinitions",
		"servicecidrs", "endpoints", "endpointslices":
		return true
	}
	return false
}

// selfCounter counts the bench's own non-watch requests.
type selfCounter struct {
	requests, writes atomic.Int64
}

// selfCounts is a snapshot of a selfCounter.
type selfCounts struct{ requests, writes int64 }

// sub returns s minus an earlier snapshot o.
func (s selfCounts) sub(o selfCounts) selfCounts {
	return selfCounts{requests: s.requests - o.requests, writes: s.writes - o.writes}
}

// snapshot returns the counts so far.
func (c *selfCounter) snapshot() selfCounts {
	return selfCounts{requests: c.requests.Load(), writes: c.writes.Load()}
}

// wrap counts every request that passes through rt; it is a rest.Config Wrap function.
func (c *selfCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") != "true" {
			c.requests.Add(1)
			if req.Method != http.MethodGet {
				c.writes.Add(1)
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// operatorAccount names the ServiceAccount whose token the proxy forwards with.
const (
	operatorAccountNamespace = "default"
	operatorAccount          = "bench-operator"
)

// operatorNamespace is the namespace the installed kaddons manager runs in (its default
// --namespace). The manager keeps its seal key there (the Secret kaddons-seal): without
// that namespace it keeps the key in memory only, and a restarted manager seals every
// child again, one apply each, which the restart phase would count.
const operatorNamespace = "kaddons-system"

// operatorConfig returns the config the proxy forwards the operator's requests with: the
// API server's address and CA and the token of a cluster-admin ServiceAccount, so that
// the API server authenticates the operator as it does an operator running in the
// cluster (a cached token review) rather than by verifying a client certificate on every
// request.
func (c *cluster) operatorConfig(ctx context.Context) (*rest.Config, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}
	if err := c.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", operatorNamespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorAccountNamespace, Name: operatorAccount}}
	if err := c.client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s: %w", operatorAccount, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorAccountNamespace, Name: operatorAccount}},
	}
	if err := c.client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ClusterRoleBinding %s: %w", operatorAccount, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if err := c.client.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s: %w", operatorAccount, err)
	}
	cfg := &rest.Config{Host: c.admin.Host, BearerToken: req.Status.Token}
	cfg.CAData = c.admin.CAData
	cfg.ServerName = c.admin.ServerName
	return cfg, nil
}
