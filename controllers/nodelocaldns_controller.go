package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=nodelocaldns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;update;patch;delete

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
// first, then the followed CoreDNS's (its fixed clusterIP, else the address its kube-dns
// Service got), then the packaged defaults.
func nodeLocalDNSAddresses(ctx context.Context, c client.Reader, addon addonsv1alpha1.Addon) (any, error) {
	n, ok := addon.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return nil, fmt.Errorf("expected a NodeLocalDNS, got %T", addon)
	}
	in := nodeLocalDNSInputs{ClusterDNSIP: n.Spec.ClusterDNSIP, DNSDomain: n.Spec.DNSDomain}
	if refs := followedCoreDNS(n); len(refs) > 0 && (in.ClusterDNSIP == "" || in.DNSDomain == "") {
		coreDNS := &addonsv1alpha1.CoreDNS{}
		err := engine.GetAddon(ctx, c, n, refs[0], coreDNS)
		if apierrors.IsNotFound(err) {
			return nil, engine.Waiting("waiting for CoreDNS %s, named by spec.coreDNSRef: not found", refName(n, refs[0]))
		}
		if err != nil {
			return nil, err
		}
		if in.DNSDomain == "" {
			in.DNSDomain = coreDNS.Spec.DNSDomain
		}
		if in.ClusterDNSIP == "" {
			ip, err := coreDNSAddress(ctx, c, coreDNS)
			if err != nil {
				return nil, err
			}
			if ip == "" {
				return nil, engine.Waiting("waiting for CoreDNS %s, named by spec.coreDNSRef, to get a cluster IP", refName(n, refs[0]))
			}
			in.ClusterDNSIP = ip
		}
	}
	if in.ClusterDNSIP == "" {
		in.ClusterDNSIP = packagedClusterDNSIP
	}
	if in.DNSDomain == "" {
		in.DNSDomain = packagedDNSDomain
	}
	return in, nil
}

// coreDNSAddress returns the cluster IP of a CoreDNS add-on: its spec.clusterIP, else the
// address of the kube-dns Service in its inventory, read from the cache.
func coreDNSAddress(ctx context.Context, c client.Reader, coreDNS *addonsv1alpha1.CoreDNS) (string, error) {
	if coreDNS.Spec.ClusterIP != "" {
		return coreDNS.Spec.ClusterIP, nil
	}
	for _, ref := range coreDNS.Status.Inventory {
		if ref.Group != "" || ref.Kind != "Service" || ref.Name != coreDNSService {
			continue
		}
		svc := &corev1.Service{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, svc)
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", ref, err)
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return "", nil
		}
		return svc.Spec.ClusterIP, nil
	}
	return "", nil
}

// refName formats ref as namespace/name, defaulting the namespace to from's.
func refName(from addonsv1alpha1.Addon, ref addonsv1alpha1.AddonReference) string {
	if ref.Namespace == "" {
		return from.GetNamespace() + "/" + ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}

// transformNodeLocalDNS applies the NodeLocalDNS spec's typed fields and the followed
// addresses to the rendered package.
func transformNodeLocalDNS(ctx context.Context, obj declarative.DeclarativeObject, objects *manifest.Objects) error {
	cr, ok := obj.(*addonsv1alpha1.NodeLocalDNS)
	if !ok {
		return fmt.Errorf("expected a NodeLocalDNS, got %T", obj)
	}
	in, ok := engine.InputsFrom(ctx).(nodeLocalDNSInputs)
	if !ok {
		return fmt.Errorf("the NodeLocalDNS addresses were not computed")
	}
	localIP := cr.Spec.LocalIP
	if localIP == "" {
		localIP = packagedLocalIP
	}
	replace := strings.NewReplacer(packagedLocalIP, localIP, packagedClusterDNSIP, in.ClusterDNSIP)

	cm, err := engine.MustFindObject(objects, "ConfigMap", nodeLocalDNSConfigMap)
	if err != nil {
		return err
	}
	data, _, _ := cm.NestedStringMap("data")
	corefile := replace.Replace(data["Corefile"])
	corefile = strings.ReplaceAll(corefile, packagedDNSDomain+":53", in.DNSDomain+":53")
	if err := cm.SetNestedField(corefile, "data", "Corefile"); err != nil {
		return err
	}

	ds, err := engine.MustFindObject(objects, "DaemonSet", nodeLocalDNSDaemonSet)
	if err != nil {
		return err
	}
	if err := engine.MutateContainer(ds, nodeLocalDNSContainer, func(c map[string]any) error {
		args, _ := c["args"].([]any)
		for i, a := range args {
			if s, ok := a.(string); ok {
				args[i] = replace.Replace(s)
			}
		}
		if probe, ok := c["livenessProbe"].(map[string]any); ok {
			if get, ok := probe["httpGet"].(map[string]any); ok && get["host"] == packagedLocalIP {
				get["host"] = localIP
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return engine.ApplyPodFields(ds, nodeLocalDNSContainer, engine.PodFields{Resources: cr.Spec.Resources})
}
