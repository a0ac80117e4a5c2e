//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"

	"github.com/kaddons/kaddons/internal/sources/sourcestest"
)

// TestOCISource publishes the channels as a signed bundle with `kubectl-kaddons bundle
// push` to a registry on 127.0.0.1, points an AddonSource of kind oci at it with
// verification required, and checks that a CoreDNS with spec.sourceRef becomes Ready from
// it and records the bundle's digest; an unsigned bundle is refused and changes nothing.
func TestOCISource(t *testing.T) {
	g := NewWithT(t)
	pluginDir := buildPlugin(t)
	// httptest listens on 127.0.0.1, where the suite's manager runs too.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	signKey, pubKey := sourcestest.WriteKeyPair(t)

	// push runs the plugin binary itself (no cluster needed) and returns the reference by digest.
	push := func(ref string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(pluginDir, "kubectl-kaddons"),
			append([]string{"bundle", "push", channelsDir, ref, "--insecure"}, args...)...)
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
		out, err := output(cmd)
		if err != nil {
			t.Fatalf("kubectl-kaddons bundle push %s: %v", ref, err)
		}
		return strings.TrimSpace(out)
	}
	signed := push(host+"/kaddons/e2e:v1", "--sign-key", signKey)
	digest := signed[strings.LastIndex(signed, "@")+1:]
	g.Expect(digest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	// Another repository: the signature of a digest is looked up next to it, and the
	// same channels pushed anywhere in kaddons/e2e would carry the signed bundle's digest.
	unsigned := push(host + "/kaddons/e2e-unsigned:v1")

	// The test waits for several things in turn, longer than one background() allows.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := os.ReadFile(pubKey)
	g.Expect(err).NotTo(HaveOccurred())
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-cosign-keys", Namespace: operatorNamespace},
		Data: map[string][]byte{"cosign.pub": pub}}
	g.Expect(k8sClient.Create(ctx, keys)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, keys) })

	newSource := func(name, url string) {
		src := &addonsv1alpha1.AddonSource{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: addonsv1alpha1.AddonSourceSpec{ApplyAsOperator: true, InsecureLoopback: true, OCI: &addonsv1alpha1.OCISource{URL: url, Insecure: true,
				Verify: &addonsv1alpha1.OCIVerification{SecretRef: addonsv1alpha1.LocalSecretReference{Name: keys.Name}}}}}
		g.Expect(k8sClient.Create(ctx, src)).To(Succeed())
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, src) })
	}
	waitSource := func(name, reason string) *addonsv1alpha1.AddonSource {
		src := &addonsv1alpha1.AddonSource{}
		NewWithT(t).Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: name}, src)).To(Succeed())
			ready := meta.FindStatusCondition(src.Status.Conditions, addonsv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil(), "no Ready condition yet")
			g.Expect(ready.Reason).To(Equal(reason), "Ready: %s", ready.Message)
		}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
		return src
	}

	newSource("e2e-signed", host+"/kaddons/e2e:v1")
	src := waitSource("e2e-signed", addonsv1alpha1.ReasonFetched)
	g.Expect(src.Status.Digest).To(Equal(digest))
	g.Expect(src.Status.Revision).To(ContainSubstring(digest))

	ns := newNamespace(t, "source")
	apply(t, coreDNSManifest(ns, oldVersion, 1)+"  sourceRef: e2e-signed\n")
	cr := expectReady(t, ns)
	g.Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
	g.Expect(cr.Status.Source).To(Equal(&addonsv1alpha1.AppliedSource{Name: "e2e-signed", Revision: src.Status.Revision,
		Digest: digest}))

	// An unsigned bundle is refused; an add-on naming it applies nothing.
	newSource("e2e-unsigned", unsigned)
	refused := waitSource("e2e-unsigned", addonsv1alpha1.ReasonVerificationFailed)
	g.Expect(refused.Status.Digest).To(BeEmpty())
	nsUnsigned := newNamespace(t, "source-unsigned")
	apply(t, coreDNSManifest(nsUnsigned, oldVersion, 1)+"  sourceRef: e2e-unsigned\n")
	NewWithT(t).Eventually(func(g Gomega) {
		cr := getCoreDNS(g, nsUnsigned)
		ready := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonSourceNotReady), "Ready: %s", ready.Message)
		g.Expect(ready.Message).To(ContainSubstring(addonsv1alpha1.ReasonVerificationFailed))
		g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty(), fmt.Sprintf("applied from an unsigned bundle: %v", cr.Status.Inventory))
	}).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
}
