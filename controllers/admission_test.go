package controllers

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

var installAdmission sync.Once

// installAdmissionPolicies creates the admission policies and bindings the installer
// ships, as config/default renders them (names prefixed, references kept), once per
// suite run.
func installAdmissionPolicies(t *testing.T) {
	t.Helper()
	installAdmission.Do(func() {
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../config/default")
		if err != nil {
			t.Fatalf("building config/default: %v", err)
		}
		installed := 0
		for _, r := range resources.Resources() {
			var obj client.Object
			switch r.GetKind() {
			case "ValidatingAdmissionPolicy":
				obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			case "ValidatingAdmissionPolicyBinding":
				obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			default:
				continue
			}
			data, err := r.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, obj); err != nil {
				t.Fatalf("decoding %s %s: %v", r.GetKind(), r.GetName(), err)
			}
			if err := k8sClient.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating %s %s: %v", r.GetKind(), r.GetName(), err)
			}
			installed++
		}
		if installed != 4 {
			t.Fatalf("config/default holds %d admission policies and bindings, want 4", installed)
		}
	})
}

// addonAuthor creates the ServiceAccount name in ns that may create and change CoreDNS
// add-ons and read everything in ns (kaddons' editor role and view), and nothing else.
func addonAuthor(t *testing.T, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	grantRole(t, ns, name+"-editor", name, rbacv1.PolicyRule{APIGroups: []string{addonsv1alpha1.GroupVersion.Group},
		Resources: []string{"coredns"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
	g.Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	})).To(Succeed())
}

// grantRole gives the ServiceAccount account of ns rule, in a Role and RoleBinding named name.
func grantRole(t *testing.T, ns, name, account string, rule rbacv1.PolicyRule) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{rule}})).To(Succeed())
	g.Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: account}},
	})).To(Succeed())
}

// powerfulAccount creates the ServiceAccount name in ns bound to cluster-admin, as an
// admin may have left one.
func powerfulAccount(t *testing.T, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	g.Expect(k8sClient.Create(ctx, crb)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), crb) })
}

// deputyNamespace makes the confused deputy's namespace: alice, who may edit CoreDNS
// add-ons and view the namespace, and deployer, bound to cluster-admin. It returns the
// namespace and alice's user name.
func deputyNamespace(t *testing.T) (ns, alice string) {
	t.Helper()
	ns = newNamespace(t)
	addonAuthor(t, ns, "alice")
	powerfulAccount(t, ns, "deployer")
	return ns, "system:serviceaccount:" + ns + ":alice"
}

// refusedCreate creates cr through c until the API server refuses it, and returns the
// refusal: the admission policies may take a moment to be in force after they are
// created or their params change. A create that is admitted meanwhile is deleted again.
func refusedCreate(t *testing.T, c client.Client, cr *addonsv1alpha1.CoreDNS) error {
	t.Helper()
	var err error
	NewWithT(t).Eventually(func() error {
		err = c.Create(context.Background(), cr.DeepCopy())
		if err == nil {
			_ = k8sClient.Delete(context.Background(), cr)
		}
		return err
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(HaveOccurred())
	return err
}

// escalatingCoreDNS is the confused deputy's add-on: applied as serviceAccount, with a
// patch that binds user to cluster-admin through CoreDNS's ClusterRoleBinding.
func escalatingCoreDNS(ns, serviceAccount, user string) *addonsv1alpha1.CoreDNS {
	cr := newCoreDNS(ns, newVersion)
	cr.Spec.ServiceAccountName = serviceAccount
	cr.Spec.Patches = append(cr.Spec.Patches, rawPatch(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",`+
		`"metadata":{"name":"system:coredns"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
		`"subjects":[{"kind":"User","name":"`+user+`"}]}`))
	return cr
}

// TestAddonNamesOnlyAServiceAccountItsAuthorCouldActAs is the confused deputy: alice may
// edit CoreDNS add-ons and view her namespace; deployer, in the same namespace, is bound
// to cluster-admin. alice may not name deployer in spec.serviceAccountName, so her
// escalating patch is never applied, and she still cannot list Secrets anywhere. Once she
// may impersonate deployer, or create Pods in the namespace (a Pod may run as deployer),
// she gains nothing by naming it and the API server admits the add-on. A change to the
// spec of an add-on someone else created is checked the same way; a change of labels is
// not.
func TestAddonNamesOnlyAServiceAccountItsAuthorCouldActAs(t *testing.T) {
	installAdmissionPolicies(t)
	for _, tc := range []struct {
		name  string
		grant *rbacv1.PolicyRule
	}{
		{name: "no grant"},
		{name: "may impersonate deployer", grant: &rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts"},
			ResourceNames: []string{"deployer"}, Verbs: []string{"impersonate"}}},
		{name: "may create Pods", grant: &rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns, alice := deputyNamespace(t)
			if tc.grant != nil {
				grantRole(t, ns, "alice-extra", "alice", *tc.grant)
			}
			asAlice := clientAs(t, ns, "alice")
			cr := escalatingCoreDNS(ns, "deployer", alice)
			if tc.grant != nil {
				// The policies may take a moment to be in force; a grant must never be refused.
				g.Expect(asAlice.Create(ctx, cr)).To(Succeed())
				return
			}
			err := refusedCreate(t, asAlice, cr)
			g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring("kaddons-serviceaccount-policy"))
			g.Expect(err.Error()).To(ContainSubstring("may not act as ServiceAccount " + ns + "/deployer"))
			g.Expect(allowedPowers(g, alice, ns)).NotTo(ContainElement(true), "alice gained a power")

			// An admin's add-on that names deployer: alice may not change its spec, and may
			// change its labels.
			byAdmin := newCoreDNS(ns, newVersion)
			byAdmin.Spec.ServiceAccountName = "deployer"
			g.Expect(k8sClient.Create(ctx, byAdmin)).To(Succeed())
			g.Expect(asAlice.Get(ctx, client.ObjectKeyFromObject(byAdmin), byAdmin)).To(Succeed())
			patched := byAdmin.DeepCopy()
			patched.Spec.Patches = escalatingCoreDNS(ns, "deployer", alice).Spec.Patches
			err = asAlice.Update(ctx, patched)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("kaddons-serviceaccount-policy"))
			g.Eventually(func() error {
				g.Expect(asAlice.Get(ctx, client.ObjectKeyFromObject(byAdmin), byAdmin)).To(Succeed())
				byAdmin.Labels = map[string]string{"team": "dns"}
				return asAlice.Update(ctx, byAdmin)
			}).WithTimeout(eventuallyTimeout).Should(Succeed())
			g.Expect(allowedPowers(g, alice, ns)).NotTo(ContainElement(true), "alice gained a power")
		})
	}
}

// TestDefaultServiceAccountNeedsTheSameRight holds the default ServiceAccount to the same
// rule: outside the trusted namespaces an add-on that names no ServiceAccount is applied
// as defaultServiceAccountName, so alice may create one only if she could act as it.
func TestDefaultServiceAccountNeedsTheSameRight(t *testing.T) {
	installAdmissionPolicies(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns, alice := deputyNamespace(t)
	oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{TrustedNamespaces: []string{metav1.NamespaceSystem, policyNamespace},
		DefaultServiceAccountName: "deployer"})
	t.Cleanup(func() { deleteOperatorConfig(t) })
	waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)

	asAlice := clientAs(t, ns, "alice")
	err := refusedCreate(t, asAlice, escalatingCoreDNS(ns, "", alice))
	g.Expect(err.Error()).To(ContainSubstring("kaddons-default-serviceaccount-policy"))
	g.Expect(err.Error()).To(ContainSubstring("may not act as ServiceAccount " + ns + "/deployer"))
	g.Expect(allowedPowers(g, alice, ns)).NotTo(ContainElement(true), "alice gained a power")

	// In a trusted namespace the default ServiceAccount is not used: admitted.
	trusted := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{TrustedNamespaces: []string{metav1.NamespaceSystem, policyNamespace, ns},
		DefaultServiceAccountName: "deployer"})
	waitOperatorConfig(t, trusted, configv1alpha1.ReasonApplied)
	g.Eventually(func() error {
		return asAlice.Create(ctx, newCoreDNS(ns, newVersion))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}
