package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// tenantAccount creates the ServiceAccount name in ns with the built-in edit role in ns
// and nothing else, as a namespace's tenant has it. It returns its user name. envtest runs
// no kube-controller-manager to aggregate the edit ClusterRole, so the account is bound
// to the two roles edit aggregates.
func tenantAccount(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	for _, role := range []string{"system:aggregate-to-edit", "system:aggregate-to-view"} {
		g.Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: name + "-edit-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})).To(Succeed())
	}
	return "system:serviceaccount:" + ns + ":" + name
}

// powers are the permissions a tenant must never gain through an add-on, as
// SubjectAccessReview attributes.
func powers() map[string]authorizationv1.ResourceAttributes {
	return map[string]authorizationv1.ResourceAttributes{
		"list Secrets in every namespace":       {Verb: "list", Resource: "secrets"},
		"list Secrets in kube-system":           {Verb: "list", Resource: "secrets", Namespace: metav1.NamespaceSystem},
		"create ClusterRoleBindings":            {Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"},
		"bind ClusterRoles":                     {Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles"},
		"escalate ClusterRoles":                 {Verb: "escalate", Group: rbacv1.GroupName, Resource: "clusterroles"},
		"create Deployments in kube-system":     {Verb: "create", Group: "apps", Resource: "deployments", Namespace: metav1.NamespaceSystem},
		"patch DaemonSets in another namespace": {Verb: "patch", Group: "apps", Resource: "daemonsets", Namespace: "default"},
		"impersonate ServiceAccounts elsewhere": {Verb: "impersonate", Resource: "serviceaccounts", Namespace: metav1.NamespaceSystem},
	}
}

// allowedPowers returns which of powers the API server's RBAC grants user.
func allowedPowers(g Gomega, user, ns string) map[string]bool {
	out := map[string]bool{}
	for name, attrs := range powers() {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &attrs,
		}}
		g.Expect(k8sClient.Create(context.Background(), review)).To(Succeed())
		out[name] = review.Status.Allowed
	}
	return out
}

// trustOnly narrows the trusted namespaces to kube-system and the operator's namespace,
// as an installed operator has them, until the test ends.
func trustOnly(t *testing.T) {
	t.Helper()
	oc := setOperatorConfig(t, configv1alpha1.OperatorConfigSpec{TrustedNamespaces: []string{metav1.NamespaceSystem, policyNamespace}})
	waitOperatorConfig(t, oc, configv1alpha1.ReasonApplied)
	NewWithT(t).Eventually(func() bool { return settings.Load().Tenancy.Trusts("elsewhere") }).
		WithTimeout(eventuallyTimeout).Should(BeFalse())
	t.Cleanup(func() { deleteOperatorConfig(t) })
}

// labelledChildren lists the objects of kind in ns that carry the add-on's instance label.
func labelledChildren(g Gomega, list client.ObjectList, ns, name string) {
	g.ExpectWithOffset(1, k8sClient.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{engine.LabelName: name, engine.LabelNamespace: ns})).To(Succeed())
}

// TestTenantGainsNothing runs add-ons in a namespace the operator does not trust, as a
// tenant whose ServiceAccount has only the built-in edit role there: whatever the add-on
// asks for, the operator writes nothing the tenant could not write itself, and the
// tenant's permissions are the same afterwards.
func TestTenantGainsNothing(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	trustOnly(t)
	ns := newNamespace(t)
	user := tenantAccount(t, ns, "tenant")
	before := allowedPowers(g, user, ns)
	for name, allowed := range before {
		g.Expect(allowed).To(BeFalse(), "the tenant has %q before any add-on", name)
	}
	kubeSystem := &appsv1.DeploymentList{}
	g.Expect(k8sClient.List(ctx, kubeSystem, client.InNamespace(metav1.NamespaceSystem))).To(Succeed())

	t.Run("no ServiceAccount: refused, nothing written", func(t *testing.T) {
		g := NewWithT(t)
		c := newCoreDNS(ns, oldVersion)
		c.Name = "no-account"
		g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
		stalled := waitCondition(t, c, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(stalled.Message).To(ContainSubstring("namespace " + ns + " is not trusted"))
		g.Expect(stalled.Message).To(ContainSubstring("spec.serviceAccountName"))
		g.Expect(c.Status.Inventory.Objects()).To(BeEmpty())
		cms := &corev1.ConfigMapList{}
		labelledChildren(g, cms, ns, c.Name)
		g.Expect(cms.Items).To(BeEmpty())
	})

	escalations := []struct {
		name    string
		patch   string
		target  string
		wantMsg string
	}{{
		name: "bind the tenant to the operator's ClusterRole",
		patch: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"system:coredns"},` +
			`"subjects":[{"kind":"ServiceAccount","name":"tenant","namespace":"` + ns + `"}]}`,
		wantMsg: "create ClusterRoleBinding",
	}, {
		name: "add rules to the add-on's ClusterRole",
		patch: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:coredns"},` +
			`"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`,
		wantMsg: "create ClusterRole",
	}, {
		name:    "install into kube-system",
		target:  metav1.NamespaceSystem,
		wantMsg: "Deployment kube-system/coredns",
	}}
	for i, tc := range escalations {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := newCoreDNS(ns, oldVersion)
			c.Name = "escalation-" + string(rune('a'+i))
			c.Spec.ServiceAccountName = "tenant"
			c.Spec.TargetNamespace = tc.target
			if tc.patch != "" {
				c.Spec.Patches = append(c.Spec.Patches, rawPatch(tc.patch))
			}
			g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
			stalled := waitCondition(t, c, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonForbidden)
			g.Expect(stalled.Message).To(ContainSubstring("ServiceAccount " + ns + "/tenant may not"))
			g.Expect(stalled.Message).To(ContainSubstring(tc.wantMsg))
			g.Expect(stalled.Message).To(ContainSubstring("nothing was written"))
			g.Expect(c.Status.Inventory.Objects()).To(BeEmpty())
			for _, target := range []string{ns, metav1.NamespaceSystem} {
				deploys := &appsv1.DeploymentList{}
				labelledChildren(g, deploys, target, c.Name)
				g.Expect(deploys.Items).To(BeEmpty(), "nothing is written in %s", target)
			}
			crbs := &rbacv1.ClusterRoleBindingList{}
			g.Expect(k8sClient.List(ctx, crbs, client.MatchingLabels{engine.LabelName: c.Name, engine.LabelNamespace: ns})).To(Succeed())
			g.Expect(crbs.Items).To(BeEmpty())
		})
	}

	// An admin grants the tenant what the CoreDNS package needs: its own cluster RBAC.
	// The tenant may now install CoreDNS, and still gains nothing more through it.
	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-coredns-installer-" + ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles", "clusterrolebindings"},
				Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	grantBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: grant.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "tenant"}},
	}
	g.Expect(k8sClient.Create(ctx, grant)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, grantBinding)).To(Succeed())
	t.Cleanup(func() {
		_ = k8sClient.Delete(ctx, grantBinding)
		_ = k8sClient.Delete(ctx, grant)
	})

	granted := allowedPowers(g, user, ns)
	g.Expect(granted).To(HaveKeyWithValue("create ClusterRoleBindings", true))

	c := newCoreDNS(ns, oldVersion)
	c.Spec.ServiceAccountName = "tenant"
	createCoreDNS(t, c)
	waitApplied(t, c, oldVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, c, addonsv1alpha1.ReasonReconciled)
	g.Expect(allowedPowers(g, user, ns)).To(Equal(granted), "installing the add-on gave the tenant nothing")

	t.Run("the API server refuses an escalating patch; what runs is left alone", func(t *testing.T) {
		g := NewWithT(t)
		getAddon(g, c)
		versions := resourceVersions(g, c.Status.Inventory.Objects())
		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = append(c.Spec.Patches, rawPatch(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",`+
				`"metadata":{"name":"system:coredns"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["list"]}]}`))
		})
		stalled := waitCondition(t, c, addonsv1alpha1.ConditionStalled, addonsv1alpha1.ReasonForbidden)
		g.Expect(stalled.Message).To(ContainSubstring("attempting to grant RBAC permissions not currently held"), "the API server's escalation check refused it")
		g.Expect(resourceVersions(g, c.Status.Inventory.Objects())).To(Equal(versions))
		g.Expect(allowedPowers(g, user, ns)).To(Equal(granted))
	})

	t.Run("a pod template the tenant could write itself is applied as the tenant", func(t *testing.T) {
		g := NewWithT(t)
		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = []*runtime.RawExtension{rawPatch(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},` +
				`"spec":{"template":{"spec":{"hostNetwork":true}}}}`)}
		})
		waitApplied(t, c, oldVersion)
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.HostNetwork).To(BeTrue())
		g.Expect(d.ManagedFields).To(ContainElement(HaveField("Manager", "kaddons")))
		g.Expect(allowedPowers(g, user, ns)).To(Equal(granted))
	})

	t.Run("deleting the add-on deletes its children as the tenant", func(t *testing.T) {
		g := NewWithT(t)
		getAddon(g, c)
		inventory := c.Status.Inventory.Objects()
		g.Expect(k8sClient.Delete(ctx, c)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c))
		}).WithTimeout(eventuallyTimeout).Should(BeTrue())
		expectGone(t, inventory)
	})

	after := &appsv1.DeploymentList{}
	g.Expect(k8sClient.List(ctx, after, client.InNamespace(metav1.NamespaceSystem))).To(Succeed())
	g.Expect(deploymentVersions(after)).To(Equal(deploymentVersions(kubeSystem)), "kube-system is unchanged")
}

// deploymentVersions maps each Deployment's name to its UID and resourceVersion.
func deploymentVersions(list *appsv1.DeploymentList) map[string]string {
	out := map[string]string{}
	for _, d := range list.Items {
		out[d.Name] = string(d.UID) + "/" + d.ResourceVersion
	}
	return out
}
