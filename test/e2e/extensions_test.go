//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// extensionStartTimeout bounds the wait for an extension's /healthz.
const extensionStartTimeout = time.Minute

// operatorUser is the user the suite's manager calls extensions as.
const operatorUser = "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount

// TestExtensions runs the two example extensions of examples/extensions as processes of
// their own, each with its own certificate and its own ServiceAccount (allowed nothing
// but TokenReviews), registers them with AddonExtensions for a namespace of the test's,
// and follows a CoreDNS there: placement puts the platform's node selector and
// tolerations on its Deployment (Render), and maintenance-window holds its upgrade until
// its settings file opens a window (BeforeUpgrade).
func TestExtensions(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "ext")
	binaries := buildExtensions(t)

	placementSettings := filepath.Join(workDir, ns+"-placement.yaml")
	writeFile(t, placementSettings, `nodeSelector:
  type: kwok                # every fake node has it: the pods still schedule
  kubernetes.io/os: linux
tolerations:
- key: platform.example.com/dedicated
  operator: Exists
  effect: NoSchedule
`)
	// A window on the day three days from now: far from now for the whole test, so the
	// upgrade is held.
	closedDay := time.Now().UTC().AddDate(0, 0, 3).Weekday().String()[:3]
	windowSettings := filepath.Join(workDir, ns+"-window.yaml")
	writeFile(t, windowSettings, fmt.Sprintf("timeZone: UTC\nwindows:\n- days: [%s]\n  start: \"00:00\"\n  end: \"01:00\"\n", closedDay))

	placement := startExtension(t, binaries, "placement", ns, ns+"-placement", placementSettings)
	window := startExtension(t, binaries, "maintenance-window", ns, ns+"-window", windowSettings)
	placementExt := placement.register(t, ns, hooksv1alpha1.Render)
	windowExt := window.register(t, ns, hooksv1alpha1.BeforeUpgrade)

	t.Run("both are Discovered", func(t *testing.T) {
		for _, ext := range []*addonsv1alpha1.AddonExtension{placementExt, windowExt} {
			waitExtensionDiscovered(t, ext)
			NewWithT(t).Expect(ext.Status.Revision).To(HavePrefix("sha256:"), "the revision of %s", ext.Name)
		}
		NewWithT(t).Expect(placementExt.Status.Hooks).To(Equal([]addonsv1alpha1.DiscoveredHook{
			{Name: string(hooksv1alpha1.Render), APIVersion: hooksv1alpha1.GroupVersion}}))
		NewWithT(t).Expect(windowExt.Status.Hooks).To(Equal([]addonsv1alpha1.DiscoveredHook{
			{Name: string(hooksv1alpha1.BeforeUpgrade), APIVersion: hooksv1alpha1.GroupVersion}}))
	})

	t.Run("an extension answers only kaddons' tokens for its audience", func(t *testing.T) {
		g := NewWithT(t)
		status, _ := window.discover(t, "")
		g.Expect(status).To(Equal(http.StatusUnauthorized), "no token")
		status, _ = window.discover(t, operatorToken(t, placementExt.Name))
		g.Expect(status).To(Equal(http.StatusUnauthorized), "a token kaddons sends to another extension")
		status, resp := window.discover(t, operatorToken(t, windowExt.Name))
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(resp.Revision).To(Equal(windowExt.Status.Revision))
	})
	if t.Failed() {
		return
	}

	apply(t, coreDNSManifest(ns, oldVersion, 2))
	cr := expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))

	// placement: the Deployment, as the API server has it, carries the platform's node
	// selector and toleration, next to the package's own.
	expectPlaced := func(g Gomega) {
		d := getDeployment(g, ns)
		pod := d.Spec.Template.Spec
		g.Expect(pod.NodeSelector).To(HaveKeyWithValue("type", "kwok"))
		g.Expect(pod.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
		g.Expect(pod.Tolerations).To(ContainElement(corev1.Toleration{Key: "platform.example.com/dedicated",
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))
		g.Expect(pod.Tolerations).To(ContainElement(HaveField("Key", "CriticalAddonsOnly")), "the package's toleration is kept")
		expectRolledOut(g, d, 2)
	}
	expectPlaced(g)

	// maintenance-window: outside the window, the upgrade is held, nothing changes.
	before := getDeployment(g, ns)
	_, err := kubectl("patch", "coredns/"+coreDNSName, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"version":%q}}`, newVersion))
	g.Expect(err).NotTo(HaveOccurred())
	held := waitAddon(t, cr, func(g Gomega, ready metav1.Condition) {
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonUpgradeBlocked), ready.Message)
	})
	g.Expect(held.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(held.Message).To(ContainSubstring("the extension " + windowExt.Name + " holds the add-on (BeforeUpgrade): " +
		"outside the maintenance window " + closedDay + " 00:00-01:00 UTC; the next opens at "))
	g.Expect(held.Message).To(ContainSubstring("it is asked again in 1h0m0s"))
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	after := getDeployment(g, ns)
	g.Expect(containerImage(after)).To(Equal(coreDNSImage + oldVersion))
	g.Expect(after.Generation).To(Equal(before.Generation), "the Deployment was changed during the hold")

	// The settings open a window now: the extension's revision changes with them. The
	// hold asked kaddons to come back in an hour, so the test makes it reconcile now.
	writeFile(t, windowSettings, "timeZone: UTC\nwindows:\n- start: \"00:00\"\n  end: \"24:00\"\n")
	status, resp := window.discover(t, operatorToken(t, windowExt.Name))
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(resp.Revision).To(HavePrefix("sha256:"))
	g.Expect(resp.Revision).NotTo(Equal(windowExt.Status.Revision), "the revision did not change with the settings")
	_, err = kubectl("annotate", "coredns/"+coreDNSName, "-n", ns, "--overwrite",
		"e2e.kaddons.dev/reconcile="+strconv.FormatInt(time.Now().UnixNano(), 10))
	g.Expect(err).NotTo(HaveOccurred())

	cr = expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
	g.Eventually(func(g Gomega) {
		g.Expect(containerImage(getDeployment(g, ns))).To(Equal(coreDNSImage + newVersion))
		expectPlaced(g)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	g.Expect(window.logHas("answered an upgrade", "retryAfterSeconds=0")).To(BeTrue(), "the extension's log:\n%s", window.logTail())
	g.Expect(placement.logHas("rendered", "version="+newVersion)).To(BeTrue(), "the extension's log:\n%s", placement.logTail())
}

// writeFile writes content to path.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// buildExtensions builds the example extensions into a folder of the work folder, and
// returns it.
func buildExtensions(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(workDir, "extensions")
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./examples/extensions/placement", "./examples/extensions/maintenance-window")
	cmd.Dir = repoRoot
	if _, err := output(cmd); err != nil {
		t.Fatalf("building the example extensions: %v", err)
	}
	return dir
}

// extensionProcess is an example extension, run as a process of its own.
type extensionProcess struct {
	// name is the name of the AddonExtension that registers it.
	name    string
	url     string
	certPEM []byte
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startExtension starts the example program of binaries as the AddonExtension name: a
// ServiceAccount of its own in ns, allowed to create TokenReviews and nothing else; a
// free loopback port; a self-signed certificate it generates. It stops with t.
func startExtension(t *testing.T, binaries, program, ns, name, settings string) *extensionProcess {
	t.Helper()
	kubeconfig := tokenReviewerKubeconfig(t, ns, program, name)
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(workDir, name+"-tls")
	p := &extensionProcess{name: name, url: "https://127.0.0.1:" + strconv.Itoa(ports[0]),
		logPath: filepath.Join(workDir, name+".log"), done: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	p.cmd = exec.Command(filepath.Join(binaries, program),
		"--name="+name,
		"--settings="+settings,
		"--bind-address=127.0.0.1:"+strconv.Itoa(ports[0]),
		"--self-signed-cert-dir="+certDir,
		"--kubeconfig="+kubeconfig,
		"--allowed-user="+operatorUser,
		"--log-level=debug",
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", program, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })
	logf("started extension %s (%s, pid %d, %s, log %s)", name, program, p.cmd.Process.Pid, p.url, p.logPath)

	// It writes cert.pem, then serves.
	NewWithT(t).Eventually(func(g Gomega) {
		select {
		case <-p.done:
			StopTrying(fmt.Sprintf("extension %s exited (%s):\n%s", name, p.cmd.ProcessState, p.logTail())).Now()
		default:
		}
		certPEM, err := os.ReadFile(filepath.Join(certDir, "cert.pem"))
		g.Expect(err).NotTo(HaveOccurred(), "no certificate yet")
		p.certPEM = certPEM
		resp, err := p.httpClient().Get(p.url + "/healthz")
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}).WithTimeout(extensionStartTimeout).WithPolling(100*time.Millisecond).Should(Succeed(), "extension %s did not serve", name)
	return p
}

// tokenReviewerKubeconfig creates the ServiceAccount sa in ns, allowed to create
// TokenReviews and nothing else, and returns a kubeconfig that authenticates as it. The
// cluster-wide RBAC goes with t.
func tokenReviewerKubeconfig(t *testing.T, ns, sa, name string) string {
	t.Helper()
	role := "e2e:" + name + ":tokenreviews"
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[3]q}
rules:
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[3]q}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[3]q}
subjects:
- {kind: ServiceAccount, name: %[1]s, namespace: %[2]s}
`, sa, ns, role))
	t.Cleanup(func() {
		if _, err := kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found"); err != nil {
			t.Logf("deleting the RBAC of %s: %v", name, err)
		}
	})
	kubeconfig := filepath.Join(workDir, name+".kubeconfig")
	var out strings.Builder
	if err := runLocalCluster(&out, "kubeconfig-for-sa", ns, sa, kubeconfig); err != nil {
		t.Fatalf("writing the kubeconfig of %s/%s: %v\n%s", ns, sa, err, out.String())
	}
	return kubeconfig
}

// httpClient trusts only the extension's certificate, as kaddons does with its caBundle.
func (p *extensionProcess) httpClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.certPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
}

// register creates the AddonExtension of p for hook and the CoreDNS add-ons of ns (and
// no other, so that the suite's other tests never meet it). It is deleted with t,
// before p stops.
func (p *extensionProcess) register(t *testing.T, ns string, hook hooksv1alpha1.Hook) *addonsv1alpha1.AddonExtension {
	t.Helper()
	ext := &addonsv1alpha1.AddonExtension{ObjectMeta: metav1.ObjectMeta{Name: p.name},
		Spec: addonsv1alpha1.AddonExtensionSpec{
			ClientConfig: addonsv1alpha1.ExtensionClientConfig{URL: ptr.To(p.url), CABundle: p.certPEM},
			Hooks:        []hooksv1alpha1.Hook{hook},
			Selector: addonsv1alpha1.ExtensionSelector{Kinds: []string{"CoreDNS"}, NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
			Timeout:       &metav1.Duration{Duration: 5 * time.Second},
			FailurePolicy: addonsv1alpha1.FailurePolicyFail,
		}}
	ctx, cancel := background()
	defer cancel()
	if err := k8sClient.Create(ctx, ext); err != nil {
		t.Fatalf("creating AddonExtension %s: %v", p.name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := background()
		defer cancel()
		if err := k8sClient.Delete(ctx, ext); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting AddonExtension %s: %v", ext.Name, err)
		}
	})
	return ext
}

// discover calls the extension's discovery endpoint with token (none when empty) and
// returns the HTTP status and, for 200, the answer.
func (p *extensionProcess) discover(t *testing.T, token string) (int, hooksv1alpha1.DiscoveryResponse) {
	t.Helper()
	body := `{"apiVersion":"` + hooksv1alpha1.GroupVersion + `","kind":"DiscoveryRequest"}`
	req, err := http.NewRequest(http.MethodPost, p.url+hooksv1alpha1.DiscoveryPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := p.httpClient().Do(req)
	if err != nil {
		t.Fatalf("calling the discovery endpoint of %s: %v", p.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var discovery hooksv1alpha1.DiscoveryResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&discovery); err != nil {
			t.Fatalf("the discovery answer of %s: %v", p.name, err)
		}
	}
	return resp.StatusCode, discovery
}

// operatorToken is a token of the operator's ServiceAccount for the audience of the
// extension registered as name: what kaddons sends it.
func operatorToken(t *testing.T, name string) string {
	t.Helper()
	out, err := kubectl("create", "token", operatorServiceAccount, "-n", operatorNamespace,
		"--audience=addons.kaddons.dev/extension/"+name, "--duration=10m")
	if err != nil {
		t.Fatalf("creating a token for %s: %v", name, err)
	}
	return strings.TrimSpace(out)
}

// stop sends SIGTERM, which the extension answers by shutting down gracefully (SIGKILL
// after 15s), and prints its log if t failed.
func (p *extensionProcess) stop(t *testing.T) {
	select {
	case <-p.done:
		t.Errorf("extension %s had exited before the end of the test (%s)", p.name, p.cmd.ProcessState)
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if !p.cmd.ProcessState.Success() {
				t.Errorf("extension %s did not shut down cleanly on SIGTERM (%s)", p.name, p.cmd.ProcessState)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("extension %s ignored SIGTERM for 15s; killing it", p.name)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if t.Failed() {
		t.Logf("the log of extension %s:\n%s", p.name, p.logTail())
	}
}

// logHas tells whether a line of the extension's log contains every one of substrings.
func (p *extensionProcess) logHas(substrings ...string) bool {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, s := range substrings {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// logTail is the last 60 lines of the extension's log.
func (p *extensionProcess) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tailLines(string(data), 60)
}

// waitExtensionDiscovered waits until ext is Discovered at its generation.
func waitExtensionDiscovered(t *testing.T, ext *addonsv1alpha1.AddonExtension) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(ext), ext)).To(Succeed())
		c := meta.FindStatusCondition(ext.Status.Conditions, addonsv1alpha1.ConditionDiscovered)
		g.Expect(c).NotTo(BeNil(), "no Discovered condition yet")
		g.Expect(c.ObservedGeneration).To(Equal(ext.Generation))
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "AddonExtension %s", ext.Name)
}
