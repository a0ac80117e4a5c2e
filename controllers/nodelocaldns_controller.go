package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;patch;delete

// Names and values in the NodeLocal DNSCache packages that typed fields edit. The
// packages carry upstream's defaults in place of its __PILLAR__ placeholders.
const (
	nodeLocalDNSDaemonSet = "node-local-dns"
	nodeLocalDNSContainer = "node-cache"
	nodeLocalDNSConfigMap = "node-local-dns"
	packagedLocalIP       = "169.254.20.10"
	packagedClusterDNSIP  = "10.96.0.10"
	packagedDNSDomain     = "cluster.local"
)

// NodeLocalDNSDefinition declares the NodeLocal DNSCache add-on to the shared engine.
func NodeLocalDNSDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.NodeLocalDNS{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
		},
		Transforms: []engine.ObjectTransform{transformNodeLocalDNS},
		Follows:    followedCoreDNS,
		Hooks:      engine.Hooks{Default: nodeLocalDNSAddresses},
	}
}

// followedCoreDNS returns the CoreDNS a NodeLocalDNS follows, if any.
func followedCoreDNS(addon addonsv1alpha1.Addon) []addonsv1alpha1.AddonReference {
	n, ok := addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok || n.Spec.CoreDNSRef == nil {
		return nil
	}
	return []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: n.Spec.CoreDNSRef.Name, Namespace: n.Spec.CoreDNSRef.Namespace}}
}

// nodeLocalDNSAddresses is NodeLocalDNS's Default hook: it fills in spec.clusterDNSIP
// and spec.dnsDomain, where the spec leaves them empty, from the followed CoreDNS
// (CoreDNSServiceAddress), else with the packaged defaults. It waits (DependencyNotReady)
// while the CoreDNS does not exist or has no address yet.
func nodeLocalDNSAddresses(ctx context.Context, req engine.HookRequest) engine.HookResult {
	n, ok := req.Addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return engine.HookResult{Err: fmt.Errorf("expected a NodeLocalDNS, got %T", req.Addon)}
	}
	spec := &n.Spec
	if refs := followedCoreDNS(n); len(refs) > 0 && (spec.ClusterDNSIP == "" || spec.DNSDomain == "") {
		coreDNS := &addonsv1alpha1.CoreDNS{}
		if res := engine.Follow(ctx, req.Cache, n, refs[0], "spec.coreDNSRef", coreDNS); res.Holds() {
			return res
		}
		ip, err := CoreDNSServiceAddress(ctx, req.Cache, coreDNS)
		switch {
		case err != nil:
			return engine.HookResult{Err: err}
		case ip == "" && spec.ClusterDNSIP == "":
			return engine.Hold(addonsv1alpha1.ReasonDependencyNotReady,
				"waiting for CoreDNS %s/%s, named by spec.coreDNSRef, to get a cluster IP", coreDNS.Namespace, coreDNS.Name)
		}
		spec.DNSDomain = cmp.Or(spec.DNSDomain, coreDNS.Spec.DNSDomain)
		spec.ClusterDNSIP = cmp.Or(spec.ClusterDNSIP, ip)
	}
	spec.ClusterDNSIP = cmp.Or(spec.ClusterDNSIP, packagedClusterDNSIP)
	spec.DNSDomain = cmp.Or(spec.DNSDomain, packagedDNSDomain)
	return engine.HookResult{}
}

// transformNodeLocalDNS applies the NodeLocalDNS spec's typed fields, with the addresses
// its Default hook filled in, to the rendered package.
func transformNodeLocalDNS(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return fmt.Errorf("expected a NodeLocalDNS, got %T", in.Addon)
	}
	if cr.Spec.ClusterDNSIP == "" || cr.Spec.DNSDomain == "" {
		return fmt.Errorf("the NodeLocalDNS addresses were not filled in by its Default hook")
	}
	replace := strings.NewReplacer(packagedLocalIP, cmp.Or(cr.Spec.LocalIP, packagedLocalIP),
		packagedClusterDNSIP, cr.Spec.ClusterDNSIP, packagedDNSDomain+":53", cr.Spec.DNSDomain+":53")
	cm, err := engine.MustFindObject(objects, "ConfigMap", nodeLocalDNSConfigMap)
	if err != nil {
		return err
	}
	if err := engine.ReplaceInData(cm, "Corefile", replace); err != nil {
		return err
	}
	ds, err := engine.MustFindObject(objects, "DaemonSet", nodeLocalDNSDaemonSet)
	if err != nil {
		return err
	}
	if err := engine.ReplaceInContainer(ds, nodeLocalDNSContainer, replace); err != nil {
		return err
	}
	return engine.ApplyPodFields(ds, nodeLocalDNSContainer, engine.PodFields{Resources: cr.Spec.Resources})
}
