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

// nodeLocalDNSInputs are the addresses node-local-dns is rendered with.
type nodeLocalDNSInputs struct {
	ClusterDNSIP string `json:"clusterDNSIP"`
	DNSDomain    string `json:"dnsDomain"`
}

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
		Inputs:     nodeLocalDNSAddresses,
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

// nodeLocalDNSAddresses works out the cluster DNS IP and domain: the spec's own values
// first, then the followed CoreDNS's (CoreDNSServiceAddress), then the packaged defaults.
func nodeLocalDNSAddresses(ctx context.Context, req engine.InputRequest) (any, error) {
	n, ok := req.Addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return nil, fmt.Errorf("expected a NodeLocalDNS, got %T", req.Addon)
	}
	c := req.Cache
	in := nodeLocalDNSInputs{ClusterDNSIP: n.Spec.ClusterDNSIP, DNSDomain: n.Spec.DNSDomain}
	if refs := followedCoreDNS(n); len(refs) > 0 && (in.ClusterDNSIP == "" || in.DNSDomain == "") {
		coreDNS := &addonsv1alpha1.CoreDNS{}
		if err := engine.Follow(ctx, c, n, refs[0], "spec.coreDNSRef", coreDNS); err != nil {
			return nil, err
		}
		in.DNSDomain = cmp.Or(in.DNSDomain, coreDNS.Spec.DNSDomain)
		ip, err := CoreDNSServiceAddress(ctx, c, coreDNS)
		switch {
		case err != nil:
			return nil, err
		case ip == "" && in.ClusterDNSIP == "":
			return nil, engine.Waiting("waiting for CoreDNS %s/%s, named by spec.coreDNSRef, to get a cluster IP", coreDNS.Namespace, coreDNS.Name)
		}
		in.ClusterDNSIP = cmp.Or(in.ClusterDNSIP, ip)
	}
	in.ClusterDNSIP = cmp.Or(in.ClusterDNSIP, packagedClusterDNSIP)
	in.DNSDomain = cmp.Or(in.DNSDomain, packagedDNSDomain)
	return in, nil
}

// transformNodeLocalDNS applies the NodeLocalDNS spec's typed fields and the followed
// addresses to the rendered package.
func transformNodeLocalDNS(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return fmt.Errorf("expected a NodeLocalDNS, got %T", in.Addon)
	}
	addresses, ok := in.Inputs.(nodeLocalDNSInputs)
	if !ok {
		return fmt.Errorf("the NodeLocalDNS addresses were not computed")
	}
	replace := strings.NewReplacer(packagedLocalIP, cmp.Or(cr.Spec.LocalIP, packagedLocalIP),
		packagedClusterDNSIP, addresses.ClusterDNSIP, packagedDNSDomain+":53", addresses.DNSDomain+":53")
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
