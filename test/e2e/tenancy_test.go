//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// tenantPowers are what a tenant with edit in its own namespace must never gain through an
// add-on, as `kubectl auth can-i` arguments.
var tenantPowers = [][]string{
	{"list", "secrets", "--all-namespaces"},
	{"list", "secrets", "-n", "kube-system"},
	{"create", "clusterrolebindings"},
	{"bind", "clusterroles"},
	{"escalate", "clusterroles"},
	{"create", "deployments", "-n", "kube-system"},
}

// canI answers `kubectl auth can-i` for each of tenantPowers as user.
func canI(g Gomega, user string) map[string]string {
	out := map[string]string{}
	for _, p := range tenantPowers {
		answer, err := kubectl(append([]string{"auth", "can-i", "--as=" + user}, p...)...)
		// can-i exits 1 for "no": the answer is on stdout either way.
		if err != nil && strings.TrimSpace(answer) != "no" {
			g.Expect(err).NotTo(HaveOccurred())
		}
		out[strings.Join(p, " ")] = strings.TrimSpace(answer)
	}
	return out
}

// expectRefused creates, as user, the CoreDNS name in ns with spec (YAML), waits until it
// is Stalled, checks that nothing was written for it, and returns its Ready condition as
// "<reason>: <message>".
func expectRefused(t *testing.T, user, ns, name, spec string) string {
	t.Helper()
	g := NewWithT(t)
	_, err := kubectlIn(fmt.Sprintf("apiVersion: addons.kaddons.dev/v1alpha1\nkind: CoreDNS\nmetadata: {name: %s, namespace: %s}\nspec: %s\n",
		name, ns, spec), "--as="+user, "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), "the tenant may create add-ons in its namespace")
	_, err = kubectl("wait", "--for=condition=Stalled", "coredns/"+name, "-n", ns, "--timeout=1m")
	g.Expect(err).NotTo(HaveOccurred())
	got, err := kubectl("get", "coredns/"+name, "-n", ns,
		"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}`)
	g.Expect(err).NotTo(HaveOccurred())
	inventory, err := kubectl("get", "coredns/"+name, "-n", ns, "-o", "jsonpath={.status.inventory}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inventory).To(BeEmpty())
	children, err := kubectl("get", "deployments,configmaps,services,clusterroles,clusterrolebindings", "-A",
		"-l", labelNamespace+"="+ns+","+labelName+"="+name, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(children)).To(BeEmpty(), "nothing is written for a refused add-on")
	return got
}

// TestTenant runs the tenancy rules on the local cluster as a tenant would meet them: a
// ServiceAccount with the built-in edit role in its namespace (aggregated by the
// kube-controller-manager) and the right to create add-ons there, acting through
// kubectl --as. The operator trusts only kube-system and its own namespace, so the
// tenant's add-ons are refused until an AddonPolicy delegates CoreDNS to its namespace.
func TestTenant(t *testing.T) {
	g := NewWithT(t)
	_, err := kubectlIn(`apiVersion: config.kaddons.dev/v1alpha1
kind: OperatorConfig
metadata:
  name: default
spec:
  trustedNamespaces: [kube-system, `+operatorNamespace+`]
`, "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if _, err := kubectl("delete", "operatorconfig", "default", "--ignore-not-found"); err != nil {
			t.Errorf("deleting the OperatorConfig: %v", err)
		}
	})
	_, err = kubectl("wait", "--for=jsonpath={.status.effective.trustedNamespaces[0]}=kube-system", "operatorconfig/default", "--timeout=1m")
	g.Expect(err).NotTo(HaveOccurred())

	ns := newNamespace(t, "tenant")
	user := "system:serviceaccount:" + ns + ":tenant"
	_, err = kubectlIn(fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-edit, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: tenant, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant-addons, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kaddons-addons-editor-role}
subjects: [{kind: ServiceAccount, name: tenant, namespace: %[1]s}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: edit-only, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: edit-only, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: edit-only, namespace: %[1]s}]
`, ns), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())

	before := canI(g, user)
	for power, answer := range before {
		g.Expect(answer).To(Equal("no"), "the tenant can %s before any add-on", power)
	}
	// The kube-controller-manager aggregates edit; the tenant can edit its own namespace.
	answer, err := kubectl("auth", "can-i", "--as="+user, "create", "deployments", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(answer)).To(Equal("yes"))
	// edit and admin no longer include kaddons' editor role: add-on creation is granted
	// deliberately. view still includes reading add-ons.
	editOnly := "system:serviceaccount:" + ns + ":edit-only"
	for verb, want := range map[string]string{"create": "no", "get": "yes"} {
		answer, err := kubectl("auth", "can-i", "--as="+editOnly, verb, "coredns.addons.kaddons.dev", "-n", ns)
		if err != nil && strings.TrimSpace(answer) != "no" {
			g.Expect(err).NotTo(HaveOccurred())
		}
		g.Expect(strings.TrimSpace(answer)).To(Equal(want), "a ServiceAccount with only edit: can-i %s coredns", verb)
	}
	kubeSystem, err := kubectl("get", "configmaps,serviceaccounts,roles,rolebindings", "-n", "kube-system",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
	g.Expect(err).NotTo(HaveOccurred())

	// Default deny: with no AddonPolicy, an add-on outside the trusted namespaces is
	// refused, and told how to permit it.
	policies, err := kubectl("get", "addonpolicies", "-n", operatorNamespace, "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(policies)).To(BeEmpty(), "the e2e cluster starts without AddonPolicies")
	refusal := expectRefused(t, user, ns, "no-policy", "{serviceAccountName: tenant}")
	g.Expect(refusal).To(HavePrefix("NotPermitted: "))
	g.Expect(refusal).To(ContainSubstring("create an AddonPolicy in namespace " + operatorNamespace +
		" whose namespaceSelector selects namespace " + ns))

	_, err = kubectlIn(fmt.Sprintf(`apiVersion: config.kaddons.dev/v1alpha1
kind: AddonPolicy
metadata: {name: e2e-tenant, namespace: %[2]s}
spec:
  rules:
  - name: tenant
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
    kinds: [CoreDNS]
    channels: [stable]
    versions: "~1.12"
`, ns, operatorNamespace), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_, _ = kubectl("delete", "addonpolicy", "e2e-tenant", "-n", operatorNamespace, "--ignore-not-found")
	})

	cases := []struct {
		name, spec, reason, message string
	}{{
		name:    "no-account",
		spec:    "{}",
		reason:  "NotPermitted",
		message: "namespace " + ns + " is not trusted",
	}, {
		name: "bind-operator",
		spec: `{serviceAccountName: tenant, patches: [{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, ` +
			`metadata: {name: "system:coredns"}, subjects: [{kind: ServiceAccount, name: tenant, namespace: ` + ns + `}]}]}`,
		reason:  "Forbidden",
		message: "ServiceAccount " + ns + "/tenant may not create ClusterRole",
	}, {
		name:    "privileged-pod",
		spec:    `{serviceAccountName: tenant, patches: [{apiVersion: apps/v1, kind: Deployment, metadata: {name: coredns}, spec: {template: {spec: {hostNetwork: true, containers: [{name: coredns, securityContext: {privileged: true}}]}}}}]}`,
		reason:  "Forbidden",
		message: "nothing was written",
	}, {
		name:    "into-kube-system",
		spec:    `{serviceAccountName: tenant, targetNamespace: kube-system}`,
		reason:  "NotPermitted",
		message: "does not allow target namespace kube-system (allowed: only the add-on's own namespace, " + ns + ")",
	}, {
		name:    "pinned-outside-policy",
		spec:    `{serviceAccountName: tenant, channel: stable, version: 1.14.6}`,
		reason:  "NotPermitted",
		message: "version 1.14.6 (allowed: ~1.12)",
	}, {
		name:    "corefile",
		spec:    `{serviceAccountName: tenant, corefile: ".:53 {\n  forward . 10.0.0.53\n}\n"}`,
		reason:  "NotPermitted",
		message: "does not allow spec.corefile (allowed free-form fields: none)",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := expectRefused(t, user, ns, tc.name, tc.spec)
			g.Expect(got).To(HavePrefix(tc.reason+": "), got)
			g.Expect(got).To(ContainSubstring(tc.message))
		})
	}

	g.Expect(canI(g, user)).To(Equal(before), "the tenant gained nothing")
	after, err := kubectl("get", "configmaps,serviceaccounts,roles,rolebindings", "-n", "kube-system",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(kubeSystem), "kube-system is unchanged")
}
