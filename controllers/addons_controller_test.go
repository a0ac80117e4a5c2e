package controllers

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// setVersion pins cr to version. Every add-on's spec embeds KDP's CommonSpec, whose
// Version field it sets, so that no list of kinds here needs a new case per add-on.
func setVersion(cr addonsv1alpha1.Addon, version string) {
	field := reflect.ValueOf(cr).Elem().FieldByName("Spec").FieldByName("Version")
	if !field.IsValid() || !field.CanSet() {
		panic(fmt.Sprintf("setVersion: %T has no spec.version", cr))
	}
	field.SetString(version)
}

// addonCase describes one add-on kind for the shared lifecycle test.
type addonCase struct {
	// newCR returns the add-on, named and placed in ns.
	newCR func(ns string) addonsv1alpha1.Addon
	// from and to are the versions of the upgrade; to is empty while the add-on ships
	// one version only (as make addon writes it).
	from, to string
	// workload is the Deployment or DaemonSet whose image the upgrade changes.
	workload addonsv1alpha1.ObjectReference
	// childNamespace is where the namespaced children go, for an add-on in ns.
	childNamespace func(ns string) string
	// kinds are the kinds the inventory must hold.
	kinds []string
	// clusterScoped are the cluster-scoped children (and children pinned outside the
	// add-on's namespace) that deleting the add-on must remove, for an add-on in ns.
	clusterScoped func(ns string) []addonsv1alpha1.ObjectReference
	// ready checks the Ready condition once the workloads are available.
	ready func(g Gomega, ready metav1.Condition, ns string)
	// waitsForWorkloads is set when the package holds a later apply wave back until its
	// workloads are available (metrics-server's APIService waits for its Deployment).
	// envtest runs no kubelet, so the test marks them available (releaseWaves) before it
	// waits for a version to be applied.
	waitsForWorkloads bool
}

// ref builds a reference to a v1 object.
func ref(group, kind, ns, name string) addonsv1alpha1.ObjectReference {
	return addonsv1alpha1.ObjectReference{Group: group, Version: "v1", Kind: kind, Namespace: ns, Name: name}
}

func addonCases() map[string]addonCase {
	sameNamespace := func(ns string) string { return ns }
	isReady := func(g Gomega, ready metav1.Condition, _ string) {
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonReconciled))
	}
	return map[string]addonCase{
		"MetricsServer": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				return &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: ns}}
			},
			from: "0.7.2", to: "0.8.0",
			workload:       ref("apps", "Deployment", "", "metrics-server"),
			childNamespace: sameNamespace,
			kinds:          []string{"ServiceAccount", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Service", "Deployment", "APIService"},
			clusterScoped: func(ns string) []addonsv1alpha1.ObjectReference {
				return []addonsv1alpha1.ObjectReference{
					ref("apiregistration.k8s.io", "APIService", "", "v1beta1.metrics.k8s.io"),
					ref("rbac.authorization.k8s.io", "ClusterRole", "", "system:metrics-server-"+ns),
					ref("rbac.authorization.k8s.io", "ClusterRole", "", "system:aggregated-metrics-reader-"+ns),
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "system:metrics-server-"+ns),
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "metrics-server:system:auth-delegator-"+ns),
					// The binding to a Role that exists only in kube-system stays there.
					ref("rbac.authorization.k8s.io", "RoleBinding", "kube-system", "metrics-server-auth-reader-"+ns),
				}
			},
			// The API server cannot reach the metrics-server pods (nothing runs them),
			// so the APIService is not Available and the add-on is not Ready: it says so.
			ready: expectOnlyAPIServiceUnavailable,
			// The APIService is in the wave "api", after the Deployment's.
			waitsForWorkloads: true,
		},
		"Dashboard": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				d := &addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Name: "dashboard", Namespace: ns}}
				d.Spec.TargetNamespace = ns + "-ui"
				return d
			},
			from: "2.6.1", to: "2.7.0",
			workload:       ref("apps", "Deployment", "", "kubernetes-dashboard"),
			childNamespace: func(ns string) string { return ns + "-ui" },
			kinds: []string{"Namespace", "ServiceAccount", "Service", "Secret", "ConfigMap", "Role", "RoleBinding",
				"ClusterRole", "ClusterRoleBinding", "Deployment"},
			clusterScoped: func(ns string) []addonsv1alpha1.ObjectReference {
				return []addonsv1alpha1.ObjectReference{
					ref("", "Namespace", "", ns+"-ui"),
					ref("rbac.authorization.k8s.io", "ClusterRole", "", "kubernetes-dashboard-"+ns+"-ui"),
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "kubernetes-dashboard-"+ns+"-ui"),
				}
			},
			ready: isReady,
		},
		"NodeLocalDNS": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				return &addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Name: "nodelocaldns", Namespace: ns}}
			},
			from: "1.23.1", to: "1.25.0",
			workload:       ref("apps", "DaemonSet", "", "node-local-dns"),
			childNamespace: sameNamespace,
			kinds:          []string{"ServiceAccount", "Service", "ConfigMap", "DaemonSet"},
			clusterScoped:  func(string) []addonsv1alpha1.ObjectReference { return nil },
			ready:          isReady,
		},
		"KubeProxy": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				return &addonsv1alpha1.KubeProxy{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: ns}}
			},
			from:           "1.37.2",
			workload:       ref("apps", "DaemonSet", "", "kube-proxy"),
			childNamespace: sameNamespace,
			kinds:          []string{"ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "DaemonSet"},
			clusterScoped: func(ns string) []addonsv1alpha1.ObjectReference {
				return []addonsv1alpha1.ObjectReference{
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "kubeadm:node-proxier-"+ns),
				}
			},
			ready: isReady,
		},
		"KubeRouter": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				return &addonsv1alpha1.KubeRouter{ObjectMeta: metav1.ObjectMeta{Name: "kube-router", Namespace: ns}}
			},
			from:           "2.1.0",
			workload:       ref("apps", "DaemonSet", "", "kube-router"),
			childNamespace: sameNamespace,
			kinds:          []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"},
			clusterScoped: func(ns string) []addonsv1alpha1.ObjectReference {
				return []addonsv1alpha1.ObjectReference{
					ref("rbac.authorization.k8s.io", "ClusterRole", "", "kube-router-"+ns),
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "kube-router-"+ns),
				}
			},
			ready: isReady,
		},
		"Package": {
			newCR: func(ns string) addonsv1alpha1.Addon {
				return &addonsv1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: ns},
					Spec: addonsv1alpha1.PackageSpec{Package: "coredns"}}
			},
			from: "1.11.3", to: "1.12.1",
			workload:       ref("apps", "Deployment", "", "coredns"),
			childNamespace: sameNamespace,
			kinds:          []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"},
			clusterScoped: func(ns string) []addonsv1alpha1.ObjectReference {
				return []addonsv1alpha1.ObjectReference{
					ref("rbac.authorization.k8s.io", "ClusterRole", "", "system:coredns-"+ns),
					ref("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "system:coredns-"+ns),
				}
			},
			ready: isReady,
		},
		// make addon (hack/addon) writes each new kind's case above this line.
	}
}

// TestAddonLifecycle creates, upgrades, repairs and deletes each add-on kind besides
// CoreDNS, which has tests of its own.
func TestAddonLifecycle(t *testing.T) {
	ctx := context.Background()
	for kind, tc := range addonCases() {
		t.Run(kind, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			childNS := tc.childNamespace(ns)
			cr := tc.newCR(ns)
			setVersion(cr, tc.from)
			g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
			if tc.waitsForWorkloads {
				releaseWaves(t, cr, childNS)
			}
			waitApplied(t, cr, tc.from)

			kinds := map[string]bool{}
			for _, r := range cr.GetAddonStatus().Inventory.Objects() {
				kinds[r.Kind] = true
				live, err := liveObject(r)
				g.Expect(err).NotTo(HaveOccurred(), "%s", r)
				g.Expect(live.GetLabels()).To(HaveKeyWithValue("addons.kaddons.dev/name", cr.GetName()), "%s", r)
				if r.Namespace != "" && r.Namespace != "kube-system" {
					g.Expect(r.Namespace).To(Equal(childNS), "%s", r)
				}
			}
			g.Expect(kinds).To(HaveLen(len(tc.kinds)), "inventory: %v", cr.GetAddonStatus().Inventory.Objects())
			for _, k := range tc.kinds {
				g.Expect(kinds).To(HaveKey(k))
			}
			clusterScoped := tc.clusterScoped(ns)
			g.Expect(cr.GetAddonStatus().Inventory.Objects()).To(ContainElements(clusterScoped))

			workload := tc.workload
			workload.Namespace = childNS
			uids := map[addonsv1alpha1.ObjectReference]types.UID{}
			for _, r := range cr.GetAddonStatus().Inventory.Objects() {
				live, err := liveObject(r)
				g.Expect(err).NotTo(HaveOccurred())
				uids[r] = live.GetUID()
			}

			t.Run("upgrade updates in place", func(t *testing.T) {
				if tc.to == "" {
					t.Skip("the add-on ships one version: there is nothing to upgrade to yet")
				}
				g := NewWithT(t)
				before := workloadImages(g, workload)
				updateAddon(t, cr, func() { setVersion(cr, tc.to) })
				if tc.waitsForWorkloads {
					// The new version's workload is written, and has not rolled out.
					releaseWaves(t, cr, childNS)
				}
				waitApplied(t, cr, tc.to)
				after := workloadImages(g, workload)
				g.Expect(after).NotTo(Equal(before))
				g.Expect(after[0]).To(HaveSuffix(tc.to))
				for r, uid := range uids {
					live, err := liveObject(r)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(live.GetUID()).To(Equal(uid), "%s was replaced instead of updated", r)
				}
			})

			t.Run("ready reports the children", func(t *testing.T) {
				markWorkloadsAvailable(t, childNS)
				NewWithT(t).Eventually(func(g Gomega) {
					getAddon(g, cr)
					ready := readyCondition(cr.GetAddonStatus())
					g.Expect(ready.ObservedGeneration).To(Equal(cr.GetGeneration()))
					tc.ready(g, ready, ns)
				}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
			})

			t.Run("drift is undone", func(t *testing.T) {
				g := NewWithT(t)
				victims := []addonsv1alpha1.ObjectReference{ref("", "ServiceAccount", childNS, "")}
				if len(clusterScoped) > 0 {
					victims = append(victims, clusterScoped[len(clusterScoped)-1])
				}
				for _, v := range victims {
					if v.Name == "" {
						v.Name = inventoryName(cr, v.Kind)
					}
					live, err := liveObject(v)
					g.Expect(err).NotTo(HaveOccurred(), "%s", v)
					g.Expect(k8sClient.Delete(ctx, live)).To(Succeed())
					g.Eventually(func(g Gomega) {
						restored, err := liveObject(v)
						g.Expect(err).NotTo(HaveOccurred())
						g.Expect(restored.GetUID()).NotTo(Equal(live.GetUID()))
					}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed(), "%s was not restored", v)
				}
			})

			t.Run("delete removes every child, cluster-scoped included", func(t *testing.T) {
				g := NewWithT(t)
				getAddon(g, cr)
				inventory := cr.GetAddonStatus().Inventory.Objects()
				g.Expect(k8sClient.Delete(ctx, cr)).To(Succeed())
				g.Eventually(func() bool {
					return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), cr.DeepCopyObject().(client.Object)))
				}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(BeTrue(), "the add-on was not released")
				expectGone(t, inventory)
			})
		})
	}
}

// expectOnlyAPIServiceUnavailable checks the Ready condition of a MetricsServer whose
// Deployment is available: the API server cannot reach the metrics-server pods (envtest
// runs none), so the APIService is not Available, and it is the one child Ready names.
func expectOnlyAPIServiceUnavailable(g Gomega, ready metav1.Condition, _ string) {
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
	g.Expect(ready.Message).To(ContainSubstring("APIService v1beta1.metrics.k8s.io: Available=False"))
	g.Expect(ready.Message).NotTo(ContainSubstring("Deployment"))
}

// releaseWaves lets an add-on whose package waits for its workloads (waitsForWorkloads)
// apply its last wave: it waits until the add-on holds that wave back (Progressing,
// WaveNotReady, for its current generation: the earlier waves, the workloads included, are
// written as this generation renders them) and then marks the workloads in ns available,
// as the kubelet and the Deployment controller would.
func releaseWaves(t *testing.T, cr addonsv1alpha1.Addon, ns string) {
	t.Helper()
	waitCondition(t, cr, addonsv1alpha1.ConditionProgressing, addonsv1alpha1.ReasonWaveNotReady)
	markWorkloadsAvailable(t, ns)
}

// workloadImages returns the container images of a Deployment or DaemonSet.
func workloadImages(g Gomega, r addonsv1alpha1.ObjectReference) []string {
	var spec corev1.PodSpec
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
	if r.Kind == "DaemonSet" {
		ds := &appsv1.DaemonSet{}
		g.Expect(k8sClient.Get(context.Background(), key, ds)).To(Succeed())
		spec = ds.Spec.Template.Spec
	} else {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(context.Background(), key, d)).To(Succeed())
		spec = d.Spec.Template.Spec
	}
	images := make([]string, 0, len(spec.Containers))
	for _, c := range spec.Containers {
		images = append(images, c.Image)
	}
	return images
}

// inventoryName returns the name of the first object of kind in the add-on's inventory.
func inventoryName(cr addonsv1alpha1.Addon, kind string) string {
	for _, r := range cr.GetAddonStatus().Inventory.Objects() {
		if r.Kind == kind {
			return r.Name
		}
	}
	return ""
}
