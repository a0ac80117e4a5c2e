package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/controllers"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// defaultColdStartAddons is how many add-ons TestColdStartWritesNothing restarts the
// manager over: the size make bench measures (90 s on two cores, 75 s of it applying
// them the first time). KADDONS_COLDSTART_ADDONS sets another number.
const defaultColdStartAddons = 500

// writeLog records the writes (every request but GET) a manager sends.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// all returns the writes recorded so far.
func (l *writeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// startManager starts a manager wired as manager.go wires it (the label-filtered cache, the
// add-on controllers on the repository's channels) whose requests go through log, and
// returns a function that stops it and waits until it has.
func startManager(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, log *writeLog) (stop func()) {
	t.Helper()
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.Wrap(log.wrap)
	// The seal key, as manager.go loads it: the first manager creates the Secret, the second
	// reads the same key, so the children the first sealed are the second's.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const operatorNamespace = "kaddons-system"
	if err := direct.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sealer, err := ssa.LoadSealer(context.Background(), direct, operatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  engine.CacheOptions(sealer, controllers.Definitions()...),
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		// The second manager registers the controllers of the first again, in the same
		// process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	source := channels.NewCatalog(filepath.Join("..", "..", "channels"), "")
	if err := controllers.SetupWithManager(mgr, engine.Options{Catalog: source,
		Settings: engine.NewSettingsStore(engine.Settings{}), Sealer: sealer}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	return stop
}

// addonReconciles reads the engine's kaddons_addon_reconciles_total per CoreDNS add-on
// (namespace/name) from the process's metrics registry, which both managers share.
func addonReconciles(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "kaddons_addon_reconciles_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == "CoreDNS" {
				out[labels["namespace"]+"/"+labels["name"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// markAvailable writes the status the kube-controller-manager would write for every
// Deployment and PodDisruptionBudget once their pods run: envtest runs none.
func markAvailable(ctx context.Context, g Gomega, c client.Client) {
	deployments := &appsv1.DeploymentList{}
	g.Expect(c.List(ctx, deployments)).To(Succeed())
	for i := range deployments.Items {
		d := &deployments.Items[i]
		replicas := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas,
			ReadyReplicas: replicas, AvailableReplicas: replicas,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
					LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
					LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
			},
		}
		g.Expect(c.Status().Update(ctx, d)).To(Succeed())
	}
	pdbs := &policyv1.PodDisruptionBudgetList{}
	g.Expect(c.List(ctx, pdbs)).To(Succeed())
	for i := range pdbs.Items {
		p := &pdbs.Items[i]
		p.Status = policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: p.Generation, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2, DisruptionsAllowed: 1,
			Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
				Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now()}},
		}
		g.Expect(c.Status().Update(ctx, p)).To(Succeed())
	}
}

// TestColdStartWritesNothing applies N CoreDNS add-ons (defaultColdStartAddons, or
// KADDONS_COLDSTART_ADDONS) with one manager until every one is Ready, stops it, and
// starts a second one over them, as a restart or a new leader would. Once its caches have
// synced and it has reconciled every add-on, the second manager has written nothing: no
// create, patch, update or delete of any child, nor of any add-on or its status.
func TestColdStartWritesNothing(t *testing.T) {
	n := defaultColdStartAddons
	if v := os.Getenv("KADDONS_COLDSTART_ADDONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("KADDONS_COLDSTART_ADDONS=%q is not a positive number", v)
		}
	}
	g := NewWithT(t)
	ctx := context.Background()
	cfg, scheme, k8sClient := startEnv(t)

	first := &writeLog{}
	stopFirst := startManager(t, cfg, scheme, first)
	start := time.Now()
	addons := make([]*addonsv1alpha1.CoreDNS, 0, n)
	for i := range n {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cold-%04d", i)}}
		g.Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		cr := &addonsv1alpha1.CoreDNS{
			ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns.Name},
			Spec:       addonsv1alpha1.CoreDNSSpec{CommonSpec: addonv1alpha1.CommonSpec{Version: "1.12.1"}},
		}
		g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
		addons = append(addons, cr)
	}
	// Every add-on applied, then its workloads available, then every add-on Ready.
	waitAll := func(what string, check func(g Gomega, cr *addonsv1alpha1.CoreDNS)) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			list := &addonsv1alpha1.CoreDNSList{}
			g.Expect(k8sClient.List(ctx, list)).To(Succeed())
			g.Expect(list.Items).To(HaveLen(n))
			for i := range list.Items {
				check(g, &list.Items[i])
			}
		}).WithTimeout(time.Duration(n)*time.Second+time.Minute).WithPolling(time.Second).Should(Succeed(), what)
	}
	waitAll("every add-on applied", func(g Gomega, cr *addonsv1alpha1.CoreDNS) {
		g.Expect(cr.Status.AppliedVersion).To(Equal("1.12.1"), "%s/%s", cr.Namespace, cr.Name)
		g.Expect(cr.Status.ObservedGeneration).To(Equal(cr.Generation))
	})
	g.Eventually(func(g Gomega) { markAvailable(ctx, g, k8sClient) }).WithTimeout(time.Minute).Should(Succeed())
	waitAll("every add-on Ready", func(g Gomega, cr *addonsv1alpha1.CoreDNS) {
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "%s/%s", cr.Namespace, cr.Name)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonReconciled), "%s/%s: %s", cr.Namespace, cr.Name, ready.Message)
	})
	t.Logf("%d add-ons applied and Ready in %s, with %d writes", n, time.Since(start).Round(time.Millisecond), len(first.all()))
	stopFirst()
	before := addonReconciles(t)

	second := &writeLog{}
	start = time.Now()
	startManager(t, cfg, scheme, second)
	synced := time.Since(start)
	g.Eventually(func(g Gomega) {
		after := addonReconciles(t)
		for _, cr := range addons {
			key := cr.Namespace + "/" + cr.Name
			g.Expect(after[key]).To(BeNumerically(">", before[key]), "%s is not reconciled yet", key)
		}
	}).WithTimeout(time.Duration(n)*time.Second + time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	t.Logf("second manager: caches synced after %s, every add-on reconciled after %s",
		synced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	// What a reconcile would write follows it at once; give it a moment all the same.
	time.Sleep(2 * time.Second)

	var children, others []string
	for _, w := range second.all() {
		if strings.Contains(w, "/apis/"+addonsv1alpha1.GroupVersion.Group+"/") {
			others = append(others, w)
		} else {
			children = append(children, w)
		}
	}
	g.Expect(children).To(BeEmpty(), "the second manager wrote children (or events) of add-ons that were current")
	g.Expect(others).To(BeEmpty(), "the second manager wrote add-ons that were current")
	for _, cr := range addons {
		live := &addonsv1alpha1.CoreDNS{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), live)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(live.Status.Conditions, addonsv1alpha1.ConditionReady)).To(BeTrue(),
			"%s/%s is no longer Ready", cr.Namespace, cr.Name)
	}
}
