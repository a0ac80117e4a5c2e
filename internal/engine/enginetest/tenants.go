package enginetest

import (
	"context"
	"testing"

	"github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helpers for tests of tenants: the ServiceAccounts of a namespace, what they may do and
// clients that act as them. c is the suite's client with the control plane's admin rights.

// TenantAccount creates the ServiceAccount name in ns with the built-in edit role in ns
// and nothing else, as a namespace's tenant has it. It returns its user name. envtest runs
// no kube-controller-manager to aggregate the edit ClusterRole, so the account is bound
// to the two roles edit aggregates.
func TenantAccount(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	g := gomega.NewWithT(t)
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(gomega.Succeed())
	for _, role := range []string{"system:aggregate-to-edit", "system:aggregate-to-view"} {
		g.Expect(c.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: name + "-edit-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})).To(gomega.Succeed())
	}
	return "system:serviceaccount:" + ns + ":" + name
}

// serviceAccountGroups are the groups of a ServiceAccount of ns.
func serviceAccountGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// ClientAs returns a client on cfg that acts as the ServiceAccount name of ns, with the
// groups the API server gives it.
func ClientAs(t *testing.T, cfg *rest.Config, ns, name string) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: serviceAccountGroups(ns)}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Powers are the permissions a tenant must never gain through an add-on, as
// SubjectAccessReview attributes.
func Powers() map[string]authorizationv1.ResourceAttributes {
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

// AllowedPowers returns which of Powers the API server's RBAC grants user, a
// ServiceAccount of ns.
func AllowedPowers(g gomega.Gomega, c client.Client, user, ns string) map[string]bool {
	out := map[string]bool{}
	for name, attrs := range Powers() {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             serviceAccountGroups(ns),
			ResourceAttributes: &attrs,
		}}
		g.Expect(c.Create(context.Background(), review)).To(gomega.Succeed())
		out[name] = review.Status.Allowed
	}
	return out
}
