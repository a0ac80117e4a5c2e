package engine_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
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
	"github.com/kaddons/kaddons/internal/engine/enginetest"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// trustOnly narrows the trusted namespaces to kube-system and the operator's namespace,
// as an installed operator has them, until the test ends.
func trustOnly(t *testing.T) {
	t.Helper()
	withSettings(t, engine.Settings{Tenancy: &engine.Tenancy{TrustedNamespaces: []string{metav1.NamespaceSystem, policyNamespace}}})
}

// labelledChildren lists the objects of kind in ns that carry the add-on's instance label.
func labelledChildren(g Gomega, list client.ObjectList, ns, name string) {
	g.ExpectWithOffset(1, k8sClient.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{ssa.LabelName: name, ssa.LabelNamespace: ns})).To(Succeed())
}

// tenantPolicy creates, in the operator's namespace, an AddonPolicy that delegates CoreDNS
// to the namespace ns: rule "tenant" allows versions ~1.11 (oldVersion, not newVersion),
// patches on every kind, and only ns as target namespace; rule "stable" allows the stable
// channel. It is deleted when the test ends, and later tests wait until the manager's
// cache holds no policy (with none, the suite's trusted namespaces are permitted).
func tenantPolicy(t *testing.T, ns string) *configv1alpha1.AddonPolicy {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	p := &configv1alpha1.AddonPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: policyNamespace, Name: "tenant-" + ns},
		Spec: configv1alpha1.AddonPolicySpec{Rules: []configv1alpha1.AddonPolicyRule{
			{Name: "tenant", NamespaceSelector: selector, Kinds: []string{"CoreDNS"}, Versions: "~1.11"},
			{Name: "stable", NamespaceSelector: selector, Kinds: []string{"CoreDNS"}, Channels: []string{"stable"}},
		}},
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { deletePolicy(t, p) })
	return p
}

// deletePolicy deletes p and waits until the manager's cache holds no AddonPolicy.
func deletePolicy(t *testing.T, p *configv1alpha1.AddonPolicy) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, p))).To(Succeed())
	g.Eventually(func(g Gomega) {
		list := &configv1alpha1.AddonPolicyList{}
		g.Expect(testMgr.GetClient().List(ctx, list, client.InNamespace(policyNamespace))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// updateTenantRule changes the policy's first rule (tenant).
func updateTenantRule(t *testing.T, p *configv1alpha1.AddonPolicy, mutate func(*configv1alpha1.AddonPolicyRule)) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(p), p)).To(Succeed())
		mutate(&p.Spec.Rules[0])
		g.Expect(k8sClient.Update(context.Background(), p)).To(Succeed())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// childIdentities maps each referenced object to its UID and resourceVersion: a refusal
// must neither recreate nor change what runs.
func childIdentities(g Gomega, refs []addonsv1alpha1.ObjectReference) map[addonsv1alpha1.ObjectReference]string {
	g.ExpectWithOffset(1, refs).NotTo(BeEmpty())
	out := map[addonsv1alpha1.ObjectReference]string{}
	for _, r := range refs {
		live, err := liveObject(r)
		g.ExpectWithOffset(1, err).NotTo(HaveOccurred(), "%s", r)
		out[r] = string(live.GetUID()) + "/" + live.GetResourceVersion()
	}
	return out
}

// expectNothingWritten checks that no object carries the instance labels of the add-on
// ns/name, in ns, in kube-system or cluster-wide.
func expectNothingWritten(g Gomega, c *addonsv1alpha1.CoreDNS) {
	ctx := context.Background()
	g.ExpectWithOffset(1, c.Status.Inventory.Objects()).To(BeEmpty())
	for _, target := range []string{c.Namespace, metav1.NamespaceSystem} {
		deploys := &appsv1.DeploymentList{}
		labelledChildren(g, deploys, target, c.Name)
		g.ExpectWithOffset(1, deploys.Items).To(BeEmpty(), "nothing is written in %s", target)
		cms := &corev1.ConfigMapList{}
		labelledChildren(g, cms, target, c.Name)
		g.ExpectWithOffset(1, cms.Items).To(BeEmpty(), "nothing is written in %s", target)
	}
	crbs := &rbacv1.ClusterRoleBindingList{}
	g.ExpectWithOffset(1, k8sClient.List(ctx, crbs, client.MatchingLabels{ssa.LabelName: c.Name, ssa.LabelNamespace: c.Namespace})).To(Succeed())
	g.ExpectWithOffset(1, crbs.Items).To(BeEmpty())
	crs := &rbacv1.ClusterRoleList{}
	g.ExpectWithOffset(1, k8sClient.List(ctx, crs, client.MatchingLabels{ssa.LabelName: c.Name, ssa.LabelNamespace: c.Namespace})).To(Succeed())
	g.ExpectWithOffset(1, crs.Items).To(BeEmpty())
}

// TestTenantGainsNothing runs add-ons in a namespace the operator does not trust, as a
// tenant whose ServiceAccount has only the built-in edit role there: without an
// AddonPolicy nothing is applied; with one, whatever the add-on asks for, the operator
// writes nothing the policy and the tenant's own permissions do not allow, every refusal
// leaves what runs as it was (UIDs and resourceVersions), and the tenant's permissions are
// the same afterwards (SubjectAccessReview).
func TestTenantGainsNothing(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	trustOnly(t)
	ns := newNamespace(t)
	user := enginetest.TenantAccount(t, k8sClient, ns, "tenant")
	before := enginetest.AllowedPowers(g, k8sClient, user, ns)
	for name, allowed := range before {
		g.Expect(allowed).To(BeFalse(), "the tenant has %q before any add-on", name)
	}
	kubeSystem := &appsv1.DeploymentList{}
	g.Expect(k8sClient.List(ctx, kubeSystem, client.InNamespace(metav1.NamespaceSystem))).To(Succeed())
	const ruleName = "rules[0] (tenant)"
	policyRule := "AddonPolicy " + policyNamespace + "/tenant-" + ns + " " + ruleName

	noPolicy := enginetest.NewCoreDNS(ns, oldVersion)
	noPolicy.Name = "no-policy"
	noPolicy.Spec.ServiceAccountName = "tenant"
	t.Run("no AddonPolicy: refused, and told how to permit it", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(k8sClient.Create(ctx, noPolicy)).To(Succeed())
		stalled := waitStalled(t, noPolicy, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(stalled.Message).To(ContainSubstring("which the operator does not trust"))
		g.Expect(stalled.Message).To(ContainSubstring("create an AddonPolicy in namespace " + policyNamespace +
			" whose namespaceSelector selects namespace " + ns))
		expectNothingWritten(g, noPolicy)
	})

	policy := tenantPolicy(t, ns)

	t.Run("an AddonPolicy permits, and the tenant's own RBAC still decides", func(t *testing.T) {
		g := NewWithT(t)
		// The policy change re-evaluates the refused add-on: now the ServiceAccount, which
		// may not write the package's cluster RBAC, is refused by the API server.
		stalled := waitStalled(t, noPolicy, addonsv1alpha1.ReasonForbidden)
		g.Expect(stalled.Message).To(ContainSubstring("ServiceAccount " + ns + "/tenant may not"))
		expectNothingWritten(g, noPolicy)
	})

	t.Run("no ServiceAccount: refused, nothing written", func(t *testing.T) {
		g := NewWithT(t)
		c := enginetest.NewCoreDNS(ns, oldVersion)
		c.Name = "no-account"
		g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
		stalled := waitStalled(t, c, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(stalled.Message).To(ContainSubstring("namespace " + ns + " is not trusted"))
		g.Expect(stalled.Message).To(ContainSubstring("spec.serviceAccountName"))
		expectNothingWritten(g, c)
	})

	escalations := []struct {
		name    string
		patch   string
		change  func(*addonsv1alpha1.CoreDNS)
		reason  string
		wantMsg string
	}{{
		name: "bind the tenant to the operator's ClusterRole",
		patch: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"system:coredns"},` +
			`"subjects":[{"kind":"ServiceAccount","name":"tenant","namespace":"` + ns + `"}]}`,
		reason:  addonsv1alpha1.ReasonForbidden,
		wantMsg: "create ClusterRoleBinding",
	}, {
		name: "add rules to the add-on's ClusterRole",
		patch: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:coredns"},` +
			`"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`,
		reason:  addonsv1alpha1.ReasonForbidden,
		wantMsg: "create ClusterRole",
	}, {
		name:    "install into kube-system",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = metav1.NamespaceSystem },
		reason:  addonsv1alpha1.ReasonNotPermitted,
		wantMsg: policyRule + " does not allow target namespace kube-system (allowed: only the add-on's own namespace, " + ns + ")",
	}, {
		name:    "a pinned version outside the policy, with an allowed channel",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Channel, c.Spec.Version = "stable", newVersion },
		reason:  addonsv1alpha1.ReasonNotPermitted,
		wantMsg: policyRule + " does not allow version " + newVersion + " (allowed: ~1.11)",
	}, {
		name:    "a Corefile the policy does not allow",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Corefile = ".:53 {\n    forward . 10.0.0.53\n}\n" },
		reason:  addonsv1alpha1.ReasonNotPermitted,
		wantMsg: policyRule + " does not allow spec.corefile (allowed free-form fields: none)",
	}}
	for i, tc := range escalations {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := enginetest.NewCoreDNS(ns, oldVersion)
			c.Name = "escalation-" + string(rune('a'+i))
			c.Spec.ServiceAccountName = "tenant"
			if tc.patch != "" {
				c.Spec.Patches = append(c.Spec.Patches, enginetest.RawPatch(tc.patch))
			}
			if tc.change != nil {
				tc.change(c)
			}
			g.Expect(k8sClient.Create(ctx, c)).To(Succeed())
			stalled := waitStalled(t, c, tc.reason)
			g.Expect(stalled.Message).To(ContainSubstring(tc.wantMsg))
			if tc.reason == addonsv1alpha1.ReasonForbidden {
				g.Expect(stalled.Message).To(ContainSubstring("ServiceAccount " + ns + "/tenant may not"))
				g.Expect(stalled.Message).To(ContainSubstring("nothing was written"))
			}
			expectNothingWritten(g, c)
		})
	}

	t.Run("kube-system allowed by the policy is still refused by RBAC", func(t *testing.T) {
		g := NewWithT(t)
		updateTenantRule(t, policy, func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = []string{metav1.NamespaceSystem} })
		c := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "escalation-c"}}
		stalled := waitStalled(t, c, addonsv1alpha1.ReasonForbidden)
		g.Expect(stalled.Message).To(ContainSubstring("ServiceAccount " + ns + "/tenant may not"))
		g.Expect(stalled.Message).To(ContainSubstring("Deployment kube-system/coredns"))
		expectNothingWritten(g, c)
		updateTenantRule(t, policy, func(r *configv1alpha1.AddonPolicyRule) { r.TargetNamespaces = nil })
		waitStalled(t, c, addonsv1alpha1.ReasonNotPermitted)
	})

	// The refused add-ons go before the grant below would let some of them through (each
	// would claim the namespace's coredns objects).
	refused := &addonsv1alpha1.CoreDNSList{}
	g.Expect(k8sClient.List(ctx, refused, client.InNamespace(ns))).To(Succeed())
	for i := range refused.Items {
		g.Expect(k8sClient.Delete(ctx, &refused.Items[i])).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.List(ctx, refused, client.InNamespace(ns))).To(Succeed())
		g.Expect(refused.Items).To(BeEmpty())
	}).WithTimeout(eventuallyTimeout).Should(Succeed())

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

	granted := enginetest.AllowedPowers(g, k8sClient, user, ns)
	g.Expect(granted).To(HaveKeyWithValue("create ClusterRoleBindings", true))

	c := enginetest.NewCoreDNS(ns, oldVersion)
	c.Spec.ServiceAccountName = "tenant"
	createCoreDNS(t, c)
	waitApplied(t, c, oldVersion)
	markWorkloadsAvailable(t, ns)
	waitReason(t, c, addonsv1alpha1.ReasonReconciled)
	g.Expect(enginetest.AllowedPowers(g, k8sClient, user, ns)).To(Equal(granted), "installing the add-on gave the tenant nothing")
	getAddon(g, c)
	running := childIdentities(g, c.Status.Inventory.Objects())
	// unchanged checks that what runs is what ran before the refusals: same UIDs, same
	// resourceVersions, and the tenant gained nothing.
	unchanged := func(g Gomega) {
		g.ExpectWithOffset(1, childIdentities(g, c.Status.Inventory.Objects())).To(Equal(running))
		g.ExpectWithOffset(1, enginetest.AllowedPowers(g, k8sClient, user, ns)).To(Equal(granted))
	}

	t.Run("the API server refuses an escalating patch; what runs is left alone", func(t *testing.T) {
		g := NewWithT(t)
		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = append(c.Spec.Patches, enginetest.RawPatch(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",`+
				`"metadata":{"name":"system:coredns"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["list"]}]}`))
		})
		stalled := waitStalled(t, c, addonsv1alpha1.ReasonForbidden)
		g.Expect(stalled.Message).To(ContainSubstring("attempting to grant RBAC permissions not currently held"), "the API server's escalation check refused it")
		unchanged(g)
	})

	// The admin keeps patches off the workloads: patches may target ConfigMaps only. A pod
	// template the tenant's own edit role could write is refused by the policy.
	updateTenantRule(t, policy, func(r *configv1alpha1.AddonPolicyRule) { r.PatchKinds = []string{"ConfigMap"} })
	podTemplates := []struct{ name, spec string }{
		{"privileged container", `{"containers":[{"name":"coredns","securityContext":{"privileged":true}}]}`},
		{"hostPath volume", `{"volumes":[{"name":"host","hostPath":{"path":"/"}}],` +
			`"containers":[{"name":"coredns","volumeMounts":[{"name":"host","mountPath":"/host"}]}]}`},
		{"host network", `{"hostNetwork":true}`},
		{"another ServiceAccount", `{"serviceAccountName":"tenant"}`},
	}
	for _, tc := range podTemplates {
		t.Run("pod template: "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.Patches = []*runtime.RawExtension{enginetest.RawPatch(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},` +
					`"spec":{"template":{"spec":` + tc.spec + `}}}`)}
			})
			stalled := waitStalled(t, c, addonsv1alpha1.ReasonNotPermitted)
			g.Expect(stalled.Message).To(Equal(policyRule + " does not allow spec.patches on Deployment (allowed kinds: ConfigMap)"))
			unchanged(g)
			d := &appsv1.Deployment{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, d)).To(Succeed())
			g.Expect(d.Spec.Template.Spec.HostNetwork).To(BeFalse())
			g.Expect(d.Spec.Template.Spec.Volumes).NotTo(ContainElement(HaveField("HostPath", Not(BeNil()))))
			g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal("coredns"))
			g.Expect(d.Spec.Template.Spec.Containers[0].SecurityContext).To(Or(BeNil(), HaveField("Privileged", Or(BeNil(), HaveValue(BeFalse())))))
		})
	}

	refusals := []struct {
		name    string
		change  func(*addonsv1alpha1.CoreDNS)
		wantMsg string
	}{{
		name:    "targetNamespace kube-system",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = metav1.NamespaceSystem },
		wantMsg: policyRule + " does not allow target namespace kube-system (allowed: only the add-on's own namespace, " + ns + ")",
	}, {
		name:    "a pinned version outside the policy, with an allowed channel",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Channel, c.Spec.Version = "stable", newVersion },
		wantMsg: policyRule + " does not allow version " + newVersion + " (allowed: ~1.11)",
	}, {
		name:    "a Corefile",
		change:  func(c *addonsv1alpha1.CoreDNS) { c.Spec.Corefile = ".:53 {\n    forward . 10.0.0.53\n}\n" },
		wantMsg: policyRule + " does not allow spec.corefile (allowed free-form fields: none)",
	}}
	for _, tc := range refusals {
		t.Run("running add-on: "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.Patches = nil
				tc.change(c)
			})
			stalled := waitStalled(t, c, addonsv1alpha1.ReasonNotPermitted)
			g.Expect(stalled.Message).To(Equal(tc.wantMsg))
			unchanged(g)
			updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
				c.Spec.TargetNamespace, c.Spec.Channel, c.Spec.Version, c.Spec.Corefile = "", "", oldVersion, ""
			})
			waitReason(t, c, addonsv1alpha1.ReasonReconciled)
			unchanged(g)
		})
	}

	t.Run("dependsOn in another namespace says only Ready or not Ready", func(t *testing.T) {
		g := NewWithT(t)
		other := newNamespace(t)
		// Refused in its own namespace, with a message that names it and its settings.
		hidden := enginetest.NewCoreDNS(other, oldVersion)
		hidden.Name = "hidden"
		g.Expect(k8sClient.Create(ctx, hidden)).To(Succeed())
		otherStalled := waitStalled(t, hidden, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(otherStalled.Message).To(ContainSubstring(other))

		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.DependsOn = []addonsv1alpha1.AddonReference{
				{Kind: "CoreDNS", Namespace: other, Name: "hidden"},
				{Kind: "CoreDNS", Namespace: other, Name: "absent"},
			}
		})
		waiting := waitReason(t, c, addonsv1alpha1.ReasonDependencyNotReady)
		g.Expect(waiting.Message).To(Equal("waiting for CoreDNS " + other + "/hidden: not Ready; CoreDNS " + other + "/absent: not Ready"))
		g.Expect(waiting.Message).NotTo(ContainSubstring(addonsv1alpha1.ReasonNotPermitted))
		g.Expect(waiting.Message).NotTo(ContainSubstring("not found"))
		unchanged(g)
		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) { c.Spec.DependsOn = nil })
		waitReason(t, c, addonsv1alpha1.ReasonReconciled)
	})

	t.Run("a ConfigMap patch the policy allows is applied as the tenant", func(t *testing.T) {
		g := NewWithT(t)
		updateCoreDNS(t, c, func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = []*runtime.RawExtension{enginetest.RawPatch(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns",` +
				`"labels":{"team":"dns"}}}`)}
		})
		g.Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "coredns"}, cm)).To(Succeed())
			g.Expect(cm.Labels).To(HaveKeyWithValue("team", "dns"))
			g.Expect(cm.ManagedFields).To(ContainElement(HaveField("Manager", "kaddons")))
		}).WithTimeout(eventuallyTimeout).Should(Succeed())
		waitReason(t, c, addonsv1alpha1.ReasonReconciled)
		g.Expect(enginetest.AllowedPowers(g, k8sClient, user, ns)).To(Equal(granted))
	})

	t.Run("deleting the last AddonPolicy stops applying, and leaves what runs", func(t *testing.T) {
		g := NewWithT(t)
		getAddon(g, c)
		running = childIdentities(g, c.Status.Inventory.Objects())
		deletePolicy(t, policy)
		stalled := waitStalled(t, c, addonsv1alpha1.ReasonNotPermitted)
		g.Expect(stalled.Message).To(ContainSubstring("create an AddonPolicy in namespace " + policyNamespace))
		unchanged(g)
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
	g.Expect(enginetest.AllowedPowers(g, k8sClient, user, ns)).To(Equal(granted), "the tenant gained nothing")
}

// deploymentVersions maps each Deployment's name to its UID and resourceVersion.
func deploymentVersions(list *appsv1.DeploymentList) map[string]string {
	out := map[string]string{}
	for _, d := range list.Items {
		out[d.Name] = string(d.UID) + "/" + d.ResourceVersion
	}
	return out
}
