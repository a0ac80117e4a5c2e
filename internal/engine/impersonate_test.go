package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// testImpersonator returns an Impersonator on an address nothing listens on: building
// its clients makes no request.
func testImpersonator(t *testing.T) *Impersonator {
	t.Helper()
	s := testScheme(t)
	return NewImpersonator(&rest.Config{Host: "https://127.0.0.1:1"}, &http.Client{Transport: http.DefaultTransport}, s, testMapper(s))
}

func TestIdentityFor(t *testing.T) {
	tenantSA := types.NamespacedName{Namespace: "team-a", Name: "addons"}
	sourceSA := types.NamespacedName{Namespace: "kaddons-system", Name: "platform-addons"}
	for _, tc := range []struct {
		name      string
		namespace string
		saName    string
		tenancy   *Tenancy
		// source is the AddonSource artifact the add-on's packages come from.
		source SourceArtifact
		// noImpersonator builds the reconciler without an Impersonator.
		noImpersonator bool
		// wantSA is the ServiceAccount acted as; zero for the operator.
		wantSA types.NamespacedName
		// wantRefusal is a fragment of the refusal message; empty for none.
		wantRefusal string
		wantErr     string
	}{
		{name: "no tenancy trusts every namespace", namespace: "team-a"},
		{name: "a trusted namespace is applied as the operator", namespace: "kube-system",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}}},
		{name: "the wildcard trusts every namespace", namespace: "team-a",
			tenancy: &Tenancy{TrustedNamespaces: []string{TrustAll}}},
		{name: "an untrusted namespace takes the default ServiceAccount", namespace: "team-a",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}, DefaultServiceAccountName: "addons"},
			wantSA:  tenantSA},
		{name: "spec.serviceAccountName wins over the default", namespace: "team-a", saName: "mine",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}, DefaultServiceAccountName: "addons"},
			wantSA:  types.NamespacedName{Namespace: "team-a", Name: "mine"}},
		{name: "spec.serviceAccountName is used even in a trusted namespace", namespace: "kube-system", saName: "mine",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			wantSA:  types.NamespacedName{Namespace: "kube-system", Name: "mine"}},
		{name: "the ServiceAccount is always of the add-on's own namespace", namespace: "team-b", saName: "addons",
			wantSA: types.NamespacedName{Namespace: "team-b", Name: "addons"}},
		{name: "an untrusted namespace without a ServiceAccount is refused", namespace: "team-a",
			tenancy:     &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			wantRefusal: "namespace team-a is not trusted by the operator"},

		// An AddonSource's packages get what the source was granted.
		{name: "a trusted add-on is applied as its source's ServiceAccount", namespace: "kube-system",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			source:  SourceArtifact{Name: "platform", Trust: SourceTrust{ServiceAccount: sourceSA, Pinned: true}},
			wantSA:  sourceSA},
		{name: "a trusted add-on is applied as the operator when its source says so", namespace: "kube-system",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			source:  SourceArtifact{Name: "platform", Trust: SourceTrust{AsOperator: true, Pinned: true}}},
		{name: "a source that names no identity is refused in a trusted namespace", namespace: "kube-system",
			tenancy:     &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			source:      SourceArtifact{Name: "platform", Trust: SourceTrust{Pinned: true}},
			wantRefusal: "AddonSource platform names no identity to apply its packages as"},
		{name: "a source neither pinned nor verified is refused in a trusted namespace", namespace: "kube-system",
			tenancy:     &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			source:      SourceArtifact{Name: "platform", Trust: SourceTrust{AsOperator: true}},
			wantRefusal: "must be pinned by digest or verified by signature"},
		{name: "a pinned source without identity serves a trusted add-on with a ServiceAccount of its own", namespace: "kube-system",
			saName: "mine", tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			source: SourceArtifact{Name: "platform", Trust: SourceTrust{Pinned: true}},
			wantSA: types.NamespacedName{Namespace: "kube-system", Name: "mine"}},
		{name: "an untrusted add-on is applied as its own ServiceAccount whatever the source", namespace: "team-a",
			tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}, DefaultServiceAccountName: "addons"},
			source:  SourceArtifact{Name: "platform", Trust: SourceTrust{AsOperator: true}},
			wantSA:  tenantSA},
		{name: "no Impersonator is an error, not the operator's identity", namespace: "team-a", saName: "addons",
			noImpersonator: true, wantErr: "cannot impersonate ServiceAccounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := testReconciler(t, Options{})
			if !tc.noImpersonator {
				r.impersonator = testImpersonator(t)
			}
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "dns"}}
			addon.Spec.ServiceAccountName = tc.saName
			id, refusal, err := r.identityFor(addon, tc.tenancy, tc.source)
			if tc.wantErr != "" || tc.wantRefusal != "" {
				expectNoIdentity(t, id, refusal, err, tc.wantRefusal, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("identityFor: %v", err)
			}
			if refusal != "" {
				t.Fatalf("refusal = %q, want none", refusal)
			}
			expectIdentity(t, r, id, tc.wantSA)
		})
	}
}

// expectNoIdentity checks that identityFor gave no identity, and the refusal or the
// error wanted.
func expectNoIdentity(t *testing.T, id identity, refusal string, err error, wantRefusal, wantErr string) {
	t.Helper()
	if id.manager != nil || id.live != nil {
		t.Errorf("identity = %+v, want none", id)
	}
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("error = %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("identityFor: %v", err)
	}
	// Every refusal says what to set: a ServiceAccount, or a pin.
	if !strings.Contains(refusal, wantRefusal) || !strings.Contains(refusal, "spec.serviceAccountName") && !strings.Contains(refusal, "spec.oci.digest") {
		t.Errorf("refusal = %q, want it to contain %q and name spec.serviceAccountName or spec.oci.digest", refusal, wantRefusal)
	}
}

// expectIdentity checks that id acts as the ServiceAccount want (the operator when zero).
func expectIdentity(t *testing.T, r *Reconciler, id identity, want types.NamespacedName) {
	t.Helper()
	if id.serviceAccount != want {
		t.Errorf("ServiceAccount = %v, want %v", id.serviceAccount, want)
	}
	if id.manager == nil || id.live == nil {
		t.Fatalf("identity = %+v, want an applier and a live reader", id)
	}
	if want.Name == "" {
		if id.manager != r.manager || id.live != r.reader || id.impersonating() {
			t.Errorf("identity is not the operator's own applier and reader")
		}
		return
	}
	// An impersonated identity writes and reads live only through the ServiceAccount's
	// client, checks access first, and still reads the shared cache.
	c, err := r.impersonator.ClientFor(want)
	if err != nil {
		t.Fatal(err)
	}
	if !id.impersonating() || id.live != c || id.manager.Client != c || id.manager.Reader != c {
		t.Errorf("identity does not act through the ServiceAccount's client")
	}
	if id.manager.Cache != r.client || !id.manager.CheckAccess || id.manager.As != "ServiceAccount "+want.String() {
		t.Errorf("applier = {cache shared: %v, checkAccess: %v, as: %q}, want the shared cache, access checks and %q",
			id.manager.Cache == r.client, id.manager.CheckAccess, id.manager.As, "ServiceAccount "+want.String())
	}
}

func TestImpersonatePhase(t *testing.T) {
	for _, tc := range []struct {
		name           string
		saName         string
		tenancy        *Tenancy
		noImpersonator bool
		wantStop       bool
		wantClass      conditionClass
		wantReason     string
		wantErr        bool
	}{
		{name: "trusted proceeds as the operator"},
		{name: "a ServiceAccount proceeds as it", saName: "addons"},
		{name: "refused is stalled without an error", tenancy: &Tenancy{TrustedNamespaces: []string{"kube-system"}},
			wantStop: true, wantClass: classStalled, wantReason: addonsv1alpha1.ReasonNotPermitted},
		{name: "no Impersonator fails Forbidden and is retried", saName: "addons", noImpersonator: true,
			wantStop: true, wantClass: classFailed, wantReason: addonsv1alpha1.ReasonForbidden, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := testReconciler(t, Options{})
			if !tc.noImpersonator {
				r.impersonator = testImpersonator(t)
			}
			addon := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "dns"}}
			addon.Spec.ServiceAccountName = tc.saName
			st := &reconcileState{addon: addon, settings: Settings{Tenancy: tc.tenancy}}
			out := r.impersonate(context.Background(), st)
			if out.stop != tc.wantStop || out.class != tc.wantClass || out.reason != tc.wantReason || (out.err != nil) != tc.wantErr {
				t.Fatalf("outcome = %+v, want stop %v, class %v, reason %q, error %v", out, tc.wantStop, tc.wantClass, tc.wantReason, tc.wantErr)
			}
			if out.terminal {
				t.Errorf("outcome is terminal; RBAC or configuration may change")
			}
			got := r.actingAs(st)
			switch {
			case tc.wantStop && st.identity.manager != nil:
				t.Errorf("a stopped impersonate set the identity %s", st.identity.describe())
			case !tc.wantStop && tc.saName != "" && got.serviceAccount != (types.NamespacedName{Namespace: "team-a", Name: tc.saName}):
				t.Errorf("acting as %s, want ServiceAccount team-a/%s", got.describe(), tc.saName)
			case !tc.wantStop && tc.saName == "" && (got.impersonating() || got.manager != r.manager):
				t.Errorf("acting as %s, want the operator", got.describe())
			}
		})
	}
}

func TestActingAsBeforeImpersonate(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	id := r.actingAs(&reconcileState{})
	if id.impersonating() || id.manager != r.manager || id.live != r.reader || id.describe() != "the operator" {
		t.Errorf("before impersonate ran, acting as %q (applier is the operator's: %v), want the operator",
			id.describe(), id.manager == r.manager)
	}
}

func TestIdentityDescribe(t *testing.T) {
	for _, tc := range []struct {
		id   identity
		want string
	}{
		{id: identity{}, want: "the operator"},
		{id: identity{serviceAccount: types.NamespacedName{Namespace: "team-a", Name: "addons"}}, want: "ServiceAccount team-a/addons"},
	} {
		if got := tc.id.describe(); got != tc.want {
			t.Errorf("describe() = %q, want %q", got, tc.want)
		}
	}
}

func TestImpersonatorClientFor(t *testing.T) {
	im := testImpersonator(t)
	a := types.NamespacedName{Namespace: "team-a", Name: "addons"}
	first, err := im.ClientFor(a)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := im.ClientFor(a)
	other, _ := im.ClientFor(types.NamespacedName{Namespace: "team-b", Name: "addons"})
	if first != again {
		t.Errorf("a second ClientFor of the same ServiceAccount built a new client")
	}
	if first == other {
		t.Errorf("two ServiceAccounts share one client")
	}
	for i := range maxImpersonatedClients + 1 {
		if _, err := im.ClientFor(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(im.clients); n > maxImpersonatedClients {
		t.Errorf("the Impersonator keeps %d clients, want at most %d", n, maxImpersonatedClients)
	}
}

func TestTrustOf(t *testing.T) {
	const operatorNS = "kaddons-system"
	digest := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		spec addonsv1alpha1.AddonSourceSpec
		want SourceTrust
	}{
		{name: "an OCI tag is not pinned", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{URL: "r.example/addons:v1"}}},
		{name: "an OCI digest field pins", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{URL: "r.example/addons:v1", Digest: digest}},
			want: SourceTrust{Pinned: true}},
		{name: "an OCI reference by digest pins", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{URL: "r.example/addons@" + digest}},
			want: SourceTrust{Pinned: true}},
		{name: "a required signature stands for a pin", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{URL: "r.example/addons:v1",
			Verify: &addonsv1alpha1.OCIVerification{}}}, want: SourceTrust{Pinned: true}},
		{name: "an optional signature does not", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{URL: "r.example/addons:v1",
			Verify: &addonsv1alpha1.OCIVerification{Required: ptr.To(false)}}}},
		{name: "a git branch is not pinned", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "https://git.example/a",
			Ref: &addonsv1alpha1.GitReference{Branch: "main"}}}},
		{name: "a git commit pins", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "https://git.example/a",
			Ref: &addonsv1alpha1.GitReference{Commit: strings.Repeat("b", 40)}}}, want: SourceTrust{Pinned: true}},
		{name: "an HTTPS archive is pinned by its digest", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{URL: "https://a.example/c.tgz"}},
			want: SourceTrust{Pinned: true}},
		{name: "a ServiceAccount of the operator's namespace", spec: addonsv1alpha1.AddonSourceSpec{ServiceAccountName: "platform",
			Directory: &addonsv1alpha1.DirectorySource{Path: "/channels"}},
			want: SourceTrust{Pinned: true, ServiceAccount: types.NamespacedName{Namespace: operatorNS, Name: "platform"}}},
		{name: "the operator's own identity", spec: addonsv1alpha1.AddonSourceSpec{ApplyAsOperator: true,
			Directory: &addonsv1alpha1.DirectorySource{Path: "/channels"}}, want: SourceTrust{Pinned: true, AsOperator: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TrustOf(&addonsv1alpha1.AddonSource{Spec: tc.spec}, operatorNS)
			if got != tc.want {
				t.Errorf("TrustOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
