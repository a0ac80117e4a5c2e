package controllers

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
	"github.com/kaddons/kaddons/internal/extensions"
	"github.com/kaddons/kaddons/internal/loopbackcert"
)

// extensionCaller is the ServiceAccount the suite's manager sends tokens of, as kaddons'
// own ServiceAccount in an install.
var extensionCaller = types.NamespacedName{Namespace: policyNamespace, Name: "kaddons-controller-manager"}

// setupTestExtensions wires extensions into the suite's manager as manager.go does, with
// tokens of extensionCaller minted by the envtest API server.
func setupTestExtensions(cfg *rest.Config, namespaces client.Reader, opts *engine.Options) error {
	ctx := context.Background()
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: extensionCaller.Namespace}}
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: extensionCaller.Name}}
	if _, err := clientset.CoreV1().ServiceAccounts(extensionCaller.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		return err
	}
	tokens := &extensions.ServiceAccountTokens{ServiceAccounts: clientset.CoreV1(), ServiceAccount: extensionCaller}
	return SetupExtensions(testMgr, opts, namespaces, tokens)
}

// testExtension is an extension on loopback: a real HTTPS server with a certificate of
// its own, which checks kaddons' token with a TokenReview for its audience and answers
// each hook as the test says.
type testExtension struct {
	name   string
	server *httptest.Server
	ca     []byte

	mu       sync.Mutex
	served   []hooksv1alpha1.Hook
	revision string
	answers  map[string]http.HandlerFunc
	calls    map[string]int
	users    map[string]bool
	cert     *tls.Certificate
	// certAfterDiscovery, when set, is the certificate of every connection after the
	// first discovery call.
	certAfterDiscovery *tls.Certificate
}

// startExtension starts an extension that serves hooks: discovery lists them, Render
// returns the objects unchanged, the others let the add-on go on.
func startExtension(t *testing.T, name string, hooks ...hooksv1alpha1.Hook) *testExtension {
	t.Helper()
	certPEM, keyPEM, err := loopbackcert.New()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	e := &testExtension{name: name, ca: certPEM, served: hooks, revision: "1", answers: map[string]http.HandlerFunc{},
		calls: map[string]int{}, users: map[string]bool{}, cert: &cert}
	e.server = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	// GetConfigForClient runs for every connection (GetCertificate would not, without
	// SNI, which a client dialling an IP address does not send).
	e.server.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			current := e.cert
			if e.certAfterDiscovery != nil && e.calls["discovery"] > 0 {
				current = e.certAfterDiscovery
			}
			return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*current}}, nil
		}}
	e.server.StartTLS()
	t.Cleanup(e.server.Close)
	return e
}

// serve authenticates the caller and answers with the test's handler for the hook.
func (e *testExtension) serve(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token,
		Audiences: []string{extensions.Audience(e.name)}}}
	if err := k8sClient.Create(r.Context(), review); err != nil || !review.Status.Authenticated {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	hook := strings.TrimPrefix(r.URL.Path, hooksv1alpha1.PathPrefix)
	e.mu.Lock()
	e.calls[hook]++
	e.users[review.Status.User.Username] = true
	answer := e.answers[hook]
	e.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	switch hook {
	case "discovery":
		e.mu.Lock()
		resp := hooksv1alpha1.DiscoveryResponse{TypeMeta: wireType(hooksv1alpha1.KindDiscoveryResponse),
			CommonResponse: success(), Revision: e.revision}
		for _, h := range e.served {
			resp.Hooks = append(resp.Hooks, hooksv1alpha1.HookHandler{Name: h, APIVersion: hooksv1alpha1.GroupVersion})
		}
		e.mu.Unlock()
		writeJSON(w, resp)
	case "render":
		renderWith(func(objects []map[string]any) []map[string]any { return objects })(w, r)
	default:
		writeJSON(w, map[string]any{"apiVersion": hooksv1alpha1.GroupVersion, "kind": kindOfResponse(hook), "status": "Success"})
	}
}

// answer makes the extension answer hook (its lower-case path name) with h.
func (e *testExtension) answer(hook string, h http.HandlerFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.answers[hook] = h
}

// callsOf is how many authenticated calls the extension had for hook.
func (e *testExtension) callsOf(hook string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[hook]
}

// register creates the AddonExtension of e for the CoreDNS add-ons of namespace ns (and
// no other, so the suite's other tests never meet it), and waits until it is Discovered.
func (e *testExtension) register(t *testing.T, ns string, policy addonsv1alpha1.ExtensionFailurePolicy,
	hooks ...hooksv1alpha1.Hook) *addonsv1alpha1.AddonExtension {
	t.Helper()
	ext := e.registerOnly(t, ns, policy, hooks...)
	waitDiscovered(t, ext, metav1.ConditionTrue, addonsv1alpha1.ReasonDiscovered)
	return ext
}

// registerOnly creates the AddonExtension of e without waiting for its discovery.
func (e *testExtension) registerOnly(t *testing.T, ns string, policy addonsv1alpha1.ExtensionFailurePolicy,
	hooks ...hooksv1alpha1.Hook) *addonsv1alpha1.AddonExtension {
	t.Helper()
	ext := &addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: e.name},
		Spec: addonsv1alpha1.AddonExtensionSpec{
			ClientConfig: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To(e.server.URL), CABundle: e.ca},
			Hooks:        hooks,
			Selector: addonsv1alpha1.ExtensionSelector{Kinds: []string{"CoreDNS"}, NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
			Timeout:       &metav1.Duration{Duration: 2 * time.Second},
			FailurePolicy: policy,
		}}
	NewWithT(t).Expect(k8sClient.Create(context.Background(), ext)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ext) })
	return ext
}

// waitDiscovered waits until ext's Discovered condition has status and reason at its
// generation.
func waitDiscovered(t *testing.T, ext *addonsv1alpha1.AddonExtension, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(ext), ext)).To(Succeed())
		c := meta.FindStatusCondition(ext.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(ext.Generation))
		g.Expect(c.Status).To(Equal(status), "%s: %s", c.Reason, c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		found = *c
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return found
}

func wireType(kind string) hooksv1alpha1.TypeMeta {
	return hooksv1alpha1.TypeMeta{APIVersion: hooksv1alpha1.GroupVersion, Kind: kind}
}

func success() hooksv1alpha1.CommonResponse {
	return hooksv1alpha1.CommonResponse{Status: hooksv1alpha1.StatusSuccess}
}

// kindOfResponse is the response kind of a hook's path name.
func kindOfResponse(hook string) string {
	for _, h := range hooksv1alpha1.Hooks {
		if strings.EqualFold(string(h), hook) {
			return string(h) + "Response"
		}
	}
	return ""
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// renderWith answers Render with what change makes of the request's objects.
func renderWith(change func([]map[string]any) []map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Objects []map[string]any `json:"objects"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{"apiVersion": hooksv1alpha1.GroupVersion, "kind": hooksv1alpha1.KindRenderResponse,
			"status": "Success", "objects": change(req.Objects)})
	}
}

// holdWith answers a blocking hook with a hold of seconds and message.
func holdWith(kind string, seconds int32, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"apiVersion": hooksv1alpha1.GroupVersion, "kind": kind, "status": "Success",
			"retryAfterSeconds": seconds, "message": message})
	}
}

// liveChildren reads every object in the add-on's inventory.
func liveChildren(t *testing.T, obj addonsv1alpha1.Addon) []*unstructured.Unstructured {
	t.Helper()
	g := NewWithT(t)
	getAddon(g, obj)
	refs := obj.GetAddonStatus().Inventory.Objects()
	live := make([]*unstructured.Unstructured, 0, len(refs))
	for _, ref := range refs {
		o, err := liveObject(ref)
		g.Expect(err).NotTo(HaveOccurred())
		live = append(live, o)
	}
	g.Expect(live).NotTo(BeEmpty())
	return live
}

// platformTolerations is what the Render extension of these tests adds to every
// workload.
func platformTolerations(objects []map[string]any) []map[string]any {
	for _, o := range objects {
		if o["kind"] != "Deployment" {
			continue
		}
		podSpec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		podSpec["nodeSelector"] = map[string]any{"platform.example.com/pool": "system"}
		podSpec["tolerations"] = []any{map[string]any{"key": "platform.example.com/dedicated", "operator": "Exists",
			"effect": "NoSchedule"}}
	}
	return objects
}

func TestAddonExtensionDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serves  []hooksv1alpha1.Hook
		asks    []hooksv1alpha1.Hook
		prepare func(e *testExtension, ext *addonsv1alpha1.AddonExtension)
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{name: "serves every hook asked", serves: hooksv1alpha1.Hooks, asks: []hooksv1alpha1.Hook{hooksv1alpha1.Render, hooksv1alpha1.BeforeUpgrade},
			status: metav1.ConditionTrue, reason: addonsv1alpha1.ReasonDiscovered, message: "serves Render, BeforeUpgrade"},
		{name: "does not serve a hook asked", serves: []hooksv1alpha1.Hook{hooksv1alpha1.Render},
			asks:   []hooksv1alpha1.Hook{hooksv1alpha1.Render, hooksv1alpha1.AfterReady},
			status: metav1.ConditionFalse, reason: addonsv1alpha1.ReasonHooksNotServed, message: "does not serve AfterReady"},
		{name: "is not listening", serves: hooksv1alpha1.Hooks, asks: []hooksv1alpha1.Hook{hooksv1alpha1.Render},
			prepare: func(e *testExtension, _ *addonsv1alpha1.AddonExtension) { e.server.Close() },
			status:  metav1.ConditionFalse, reason: addonsv1alpha1.ReasonDiscoveryFailed, message: "connect"},
		{name: "has a certificate from another CA", serves: hooksv1alpha1.Hooks, asks: []hooksv1alpha1.Hook{hooksv1alpha1.Render},
			prepare: func(_ *testExtension, ext *addonsv1alpha1.AddonExtension) {
				other, _, err := loopbackcert.New()
				if err != nil {
					panic(err)
				}
				ext.Spec.ClientConfig.CABundle = other
			},
			status: metav1.ConditionFalse, reason: addonsv1alpha1.ReasonDiscoveryFailed, message: "certificate"},
		{name: "answers garbage", serves: hooksv1alpha1.Hooks, asks: []hooksv1alpha1.Hook{hooksv1alpha1.Render},
			prepare: func(e *testExtension, _ *addonsv1alpha1.AddonExtension) {
				e.answer("discovery", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "<html>") })
			},
			status: metav1.ConditionFalse, reason: addonsv1alpha1.ReasonDiscoveryFailed, message: "is not a DiscoveryResponse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			e := startExtension(t, "discovery-"+ns, tc.serves...)
			ext := &addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: e.name},
				Spec: addonsv1alpha1.AddonExtensionSpec{
					ClientConfig: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To(e.server.URL), CABundle: e.ca},
					Hooks:        tc.asks,
					Selector: addonsv1alpha1.ExtensionSelector{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
				}}
			if tc.prepare != nil {
				tc.prepare(e, ext)
			}
			g := NewWithT(t)
			g.Expect(k8sClient.Create(context.Background(), ext)).To(Succeed())
			t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ext) })
			c := waitDiscovered(t, ext, tc.status, tc.reason)
			g.Expect(c.Message).To(ContainSubstring(tc.message))
			if tc.status == metav1.ConditionTrue {
				g.Expect(ext.Status.Hooks).To(HaveLen(len(tc.serves)))
				g.Expect(ext.Status.Hooks[0]).To(Equal(addonsv1alpha1.DiscoveredHook{Name: "AfterReady", APIVersion: hooksv1alpha1.GroupVersion}))
				g.Expect(ext.Status.Revision).To(Equal("1"))
				g.Expect(ext.Status.LastDiscoveryTime).NotTo(BeNil())
				g.Expect(ext.Spec.FailurePolicy).To(Equal(addonsv1alpha1.FailurePolicyFail), "the default")
				g.Expect(e.users).To(HaveKey("system:serviceaccount:" + extensionCaller.Namespace + ":" + extensionCaller.Name))
			}
		})
	}
}

func TestRenderExtensionChangesTheWorkloads(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	e := startExtension(t, "render-"+ns, hooksv1alpha1.Render)
	e.answer("render", renderWith(platformTolerations))
	e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.Render)
	cr := newCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)

	live := &unstructured.Unstructured{}
	live.SetAPIVersion("apps/v1")
	live.SetKind("Deployment")
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "coredns"}, live)).To(Succeed())
	selector, _, _ := unstructured.NestedStringMap(live.Object, "spec", "template", "spec", "nodeSelector")
	g.Expect(selector).To(HaveKeyWithValue("platform.example.com/pool", "system"))
	tolerations, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "tolerations")
	g.Expect(tolerations).To(ContainElement(HaveKeyWithValue("key", "platform.example.com/dedicated")))
	g.Expect(metricValue(t, "kaddons_extension_calls_total",
		map[string]string{"extension": e.name, "hook": "Render", "result": "success"})).To(BeNumerically(">=", 1))

	// The answer is part of the render cache key: a no-op reconcile does not ask again,
	// a new revision of the extension does.
	calls := e.callsOf("render")
	updateAddon(t, cr, func() { cr.SetAnnotations(map[string]string{"touched": "1"}) })
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
	g.Expect(e.callsOf("render")).To(Equal(calls))
}

func TestRenderExtensionBadAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(e *testExtension) http.HandlerFunc
		reason  string
		message string
	}{
		{name: "times out", reason: addonsv1alpha1.ReasonExtensionUnreachable, message: "no answer within 2s",
			answer: func(*testExtension) http.HandlerFunc {
				return func(http.ResponseWriter, *http.Request) { time.Sleep(3 * time.Second) }
			}},
		{name: "answers garbage", reason: addonsv1alpha1.ReasonExtensionInvalidResponse, message: "is not a RenderResponse",
			answer: func(*testExtension) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{\"apiVersion\": 7") }
			}},
		{name: "answers 10 MiB", reason: addonsv1alpha1.ReasonExtensionInvalidResponse, message: "larger than 4194304 bytes",
			answer: func(*testExtension) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					_, _ = io.WriteString(w, `{"apiVersion":"`+hooksv1alpha1.GroupVersion+`","kind":"RenderResponse","status":"Success","message":"`)
					_, _ = io.WriteString(w, strings.Repeat("x", 10<<20)+`"}`)
				}
			}},
		{name: "answers with an HTTP error", reason: addonsv1alpha1.ReasonExtensionUnreachable, message: "HTTP 500",
			answer: func(*testExtension) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }
			}},
		{name: "says it failed", reason: addonsv1alpha1.ReasonExtensionFailed, message: "the extension failed: no settings",
			answer: func(*testExtension) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					writeJSON(w, map[string]any{"apiVersion": hooksv1alpha1.GroupVersion, "kind": "RenderResponse",
						"status": "Failure", "message": "no settings"})
				}
			}},
		{name: "refuses TLS with a certificate from another CA", reason: addonsv1alpha1.ReasonExtensionUnreachable, message: "certificate",
			answer: func(e *testExtension) http.HandlerFunc {
				certPEM, keyPEM, err := loopbackcert.New()
				if err != nil {
					panic(err)
				}
				cert, err := tls.X509KeyPair(certPEM, keyPEM)
				if err != nil {
					panic(err)
				}
				e.mu.Lock()
				e.certAfterDiscovery = &cert
				e.mu.Unlock()
				return nil
			}},
		{name: "adds a kind the add-on may not have", reason: addonsv1alpha1.ReasonExtensionResponseRefused,
			message: "adds Secret platform-token, a kind the CoreDNS add-on may not have",
			answer: func(*testExtension) http.HandlerFunc {
				return renderWith(func(objects []map[string]any) []map[string]any {
					return append(objects, map[string]any{"apiVersion": "v1", "kind": "Secret",
						"metadata": map[string]any{"name": "platform-token"}})
				})
			}},
		{name: "moves an object to another namespace", reason: addonsv1alpha1.ReasonExtensionResponseRefused,
			message: `sets the namespace of Deployment coredns to "default"`,
			answer: func(*testExtension) http.HandlerFunc {
				return renderWith(func(objects []map[string]any) []map[string]any {
					for _, o := range objects {
						if o["kind"] == "Deployment" {
							o["metadata"].(map[string]any)["namespace"] = "default"
						}
					}
					return objects
				})
			}},
		{name: "drops an object", reason: addonsv1alpha1.ReasonExtensionResponseRefused, message: "leaves out ConfigMap",
			answer: func(*testExtension) http.HandlerFunc {
				return renderWith(func(objects []map[string]any) []map[string]any {
					kept := objects[:0]
					for _, o := range objects {
						if o["kind"] != "ConfigMap" {
							kept = append(kept, o)
						}
					}
					return kept
				})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cr := newCoreDNS(ns, newVersion)
			createReadyCoreDNS(t, cr)
			before := liveChildren(t, cr)

			e := startExtension(t, "bad-render-"+ns, hooksv1alpha1.Render)
			if h := tc.answer(e); h != nil {
				e.answer("render", h)
			}
			// Registering it renders the add-on again: the extension is asked, and nothing is
			// applied.
			e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.Render)
			ready := waitReason(t, cr, tc.reason)
			g.Expect(ready.Message).To(ContainSubstring(tc.message))
			g.Expect(ready.Message).To(ContainSubstring("extension " + e.name))
			expectUntouched(t, before)
			g.Expect(eventReasons(t, ns, cr.Name)).To(ContainElement(tc.reason))
			g.Expect(metricValue(t, "kaddons_extension_calls_total",
				map[string]string{"extension": e.name, "hook": "Render", "result": tc.reason})).To(BeNumerically(">=", 1))
		})
	}
}

func TestRenderExtensionFailureIgnored(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	e := startExtension(t, "ignored-"+ns, hooksv1alpha1.Render)
	e.answer("render", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "not json") })
	e.register(t, ns, addonsv1alpha1.FailurePolicyIgnore, hooksv1alpha1.Render)
	cr := newCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)

	degraded := waitCondition(t, cr, addonsv1alpha1.ConditionDegraded, addonsv1alpha1.ReasonExtensionIgnored)
	g.Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(degraded.Message).To(ContainSubstring("extension " + e.name))
	g.Expect(readyCondition(cr.GetAddonStatus()).Status).To(Equal(metav1.ConditionTrue), "the add-on went on")
	g.Expect(eventReasons(t, ns, cr.Name)).To(ContainElement(addonsv1alpha1.ReasonExtensionIgnored))

	// Once the extension answers, its answer is applied and the note goes.
	e.answer("render", renderWith(platformTolerations))
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(int32(2)) })
	g.Eventually(func(g Gomega) {
		live := &unstructured.Unstructured{}
		live.SetAPIVersion("apps/v1")
		live.SetKind("Deployment")
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "coredns"}, live)).To(Succeed())
		tolerations, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "tolerations")
		g.Expect(tolerations).To(ContainElement(HaveKeyWithValue("key", "platform.example.com/dedicated")))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	markWorkloadsAvailable(t, ns)
	degraded = waitCondition(t, cr, addonsv1alpha1.ConditionDegraded, addonsv1alpha1.ReasonReconciled)
	g.Expect(degraded.Status).To(Equal(metav1.ConditionFalse))
}

func TestExtensionNotDiscovered(t *testing.T) {
	for _, tc := range []struct {
		policy addonsv1alpha1.ExtensionFailurePolicy
		reason string
	}{
		{policy: addonsv1alpha1.FailurePolicyFail, reason: addonsv1alpha1.ReasonExtensionNotReady},
		{policy: addonsv1alpha1.FailurePolicyIgnore, reason: addonsv1alpha1.ReasonReconciled},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			e := startExtension(t, "undiscovered-"+ns, hooksv1alpha1.Validate)
			ext := e.registerOnly(t, ns, tc.policy, hooksv1alpha1.Render)
			waitDiscovered(t, ext, metav1.ConditionFalse, addonsv1alpha1.ReasonHooksNotServed)
			cr := newCoreDNS(ns, newVersion)
			g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
			if tc.policy == addonsv1alpha1.FailurePolicyFail {
				ready := waitReason(t, cr, tc.reason)
				g.Expect(ready.Message).To(ContainSubstring("the extension " + e.name + " (Render) cannot be called"))
				g.Expect(cr.Status.Inventory.Len()).To(BeZero(), "nothing applied")
				return
			}
			markWorkloadsAvailable(t, ns)
			waitReason(t, cr, tc.reason)
			degraded := waitCondition(t, cr, addonsv1alpha1.ConditionDegraded, addonsv1alpha1.ReasonExtensionIgnored)
			g.Expect(degraded.Message).To(ContainSubstring("HooksNotServed"))
			g.Expect(e.callsOf("render")).To(BeZero())
		})
	}
}

func TestValidateExtensionRefusesASpec(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	e := startExtension(t, "validate-"+ns, hooksv1alpha1.Validate)
	e.answer("validate", func(w http.ResponseWriter, r *http.Request) {
		var req hooksv1alpha1.ValidateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		var spec addonsv1alpha1.CoreDNSSpec
		_ = json.Unmarshal(req.Addon.Spec.Raw, &spec)
		resp := hooksv1alpha1.ValidateResponse{TypeMeta: wireType(hooksv1alpha1.KindValidateResponse), CommonResponse: success()}
		if spec.Replicas == nil || *spec.Replicas < 2 {
			resp.Violations = []string{fmt.Sprintf("%s %s/%s must run at least 2 replicas", req.Addon.Kind, req.Addon.Namespace, req.Addon.Name)}
		}
		writeJSON(w, resp)
	})
	e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.Validate)
	cr := newCoreDNS(ns, newVersion)
	cr.Spec.Replicas = ptr.To(int32(1))
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
	stalled := waitCondition(t, cr, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonInvalidSpec)
	g.Expect(stalled.Message).To(ContainSubstring("the extension " + e.name + " refuses the spec: CoreDNS " + ns + "/coredns must run at least 2 replicas"))
	g.Expect(cr.Status.Inventory.Len()).To(BeZero(), "nothing applied")

	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(int32(2)) })
	waitApplied(t, cr, newVersion)
}

func TestBeforeUpgradeExtensionHoldsAnUpgrade(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, oldVersion)
	createReadyCoreDNS(t, cr)
	before := liveChildren(t, cr)

	e := startExtension(t, "window-"+ns, hooksv1alpha1.BeforeUpgrade)
	e.answer("beforeupgrade", holdWith(hooksv1alpha1.KindBeforeUpgradeResponse, 30, "outside the maintenance window Sat 02:00-04:00 UTC"))
	ext := e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.BeforeUpgrade)
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
	ready := waitReason(t, cr, addonsv1alpha1.ReasonUpgradeBlocked)
	g.Expect(ready.Message).To(ContainSubstring("the extension " + e.name + " holds the add-on (BeforeUpgrade): outside the maintenance window"))
	g.Expect(ready.Message).To(ContainSubstring("asked again in 30s"))
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	expectUntouched(t, before)

	// The extension goes away in the middle of the upgrade: the add-on stays where it is.
	e.server.Close()
	updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To(int32(3)) })
	ready = waitReason(t, cr, addonsv1alpha1.ReasonExtensionUnreachable)
	g.Expect(ready.Message).To(ContainSubstring("nothing was applied"))
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	expectUntouched(t, before)

	// Its AddonExtension is deleted: it holds nothing any more, and the upgrade goes on.
	g.Expect(k8sClient.Delete(context.Background(), ext)).To(Succeed())
	waitApplied(t, cr, newVersion)
}

func TestAfterReadyExtensionKeepsAnAddonFromReady(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	e := startExtension(t, "serving-"+ns, hooksv1alpha1.AfterReady)
	e.answer("afterready", holdWith(hooksv1alpha1.KindAfterReadyResponse, 5, "no answer to a query for kubernetes.default yet"))
	e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.AfterReady)
	cr := newCoreDNS(ns, newVersion)
	g.Expect(k8sClient.Create(context.Background(), cr)).To(Succeed())
	markWorkloadsAvailable(t, ns)
	ready := waitReason(t, cr, addonsv1alpha1.ReasonNotServing)
	g.Expect(ready.Message).To(ContainSubstring("no answer to a query"))

	e.answer("afterready", nil)
	waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
}

func TestBeforeDeleteExtensionHoldsADeletion(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	createReadyCoreDNS(t, cr)
	before := liveChildren(t, cr)
	e := startExtension(t, "backup-"+ns, hooksv1alpha1.BeforeDelete)
	e.answer("beforedelete", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	e.register(t, ns, addonsv1alpha1.FailurePolicyFail, hooksv1alpha1.BeforeDelete)

	// An extension that fails holds the deletion too, and says so as a deletion.
	g.Expect(k8sClient.Delete(context.Background(), cr)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		ready := readyCondition(cr.GetAddonStatus())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonExtensionUnreachable))
		g.Expect(ready.Message).To(And(ContainSubstring("HTTP 500"), ContainSubstring("nothing was deleted")))
		progressing := meta.FindStatusCondition(cr.GetAddonStatus().Conditions, addonsv1alpha1.ConditionProgressing)
		g.Expect(progressing).NotTo(BeNil())
		g.Expect(progressing.Reason).To(Equal(addonsv1alpha1.ReasonExtensionUnreachable))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())

	e.answer("beforedelete", holdWith(hooksv1alpha1.KindBeforeDeleteResponse, 2, "the zone backup is not done"))
	g.Eventually(func(g Gomega) {
		getAddon(g, cr)
		ready := readyCondition(cr.GetAddonStatus())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonDeletionBlocked))
		g.Expect(ready.Message).To(ContainSubstring("the zone backup is not done"))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	for _, o := range before {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(o), live)).To(Succeed(),
			"%s %s was deleted", o.GetKind(), o.GetName())
		g.Expect(live.GetDeletionTimestamp()).To(BeNil(), "%s %s is being deleted", o.GetKind(), o.GetName())
	}

	e.answer("beforedelete", nil)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(cr), cr))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue())
}

func TestTenantCannotRegisterAnExtension(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	addonAuthor(t, ns, "alice")
	ext := &addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: "alice-" + ns},
		Spec: addonsv1alpha1.AddonExtensionSpec{
			ClientConfig: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To("https://127.0.0.1:1"), CABundle: []byte("x")},
			Hooks:        []hooksv1alpha1.Hook{hooksv1alpha1.Render}}}
	err := clientAs(t, ns, "alice").Create(context.Background(), ext)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

	// The roles kaddons ships for people do not grant it either.
	lists := readRegistryLists(t)
	for _, role := range []rbacv1.ClusterRole{lists.editor, lists.viewer} {
		for _, rule := range role.Rules {
			g.Expect(rule.Resources).NotTo(ContainElement(HavePrefix("addonextensions")), "the role %s", role.Name)
		}
	}
}
