package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/corefile"
	"github.com/kaddons/kaddons/internal/engine"
)

// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=coredns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=coredns/status,verbs=get;patch
// +kubebuilder:rbac:groups=addons.kaddons.dev,resources=coredns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts;configmaps;services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create;patch;delete
// kaddons can only grant CoreDNS the permissions it holds itself:
// +kubebuilder:rbac:groups="",resources=endpoints;services;pods;namespaces,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// Names of the objects in the CoreDNS packages that typed fields edit.
const (
	coreDNSDeployment = "coredns"
	coreDNSContainer  = "coredns"
	coreDNSConfigMap  = "coredns"
	coreDNSService    = "kube-dns"
	defaultDNSDomain  = "cluster.local"
)

// CoreDNSDefinition declares the CoreDNS add-on to the shared engine.
func CoreDNSDefinition() engine.Definition {
	return engine.Definition{
		Prototype:     &addonsv1alpha1.CoreDNS{},
		HomeNamespace: metav1.NamespaceSystem,
		Children: []schema.GroupVersionKind{
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
			corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			corev1.SchemeGroupVersion.WithKind("Service"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
			appsv1.SchemeGroupVersion.WithKind("Deployment"),
			policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
		},
		Transforms: []engine.ObjectTransform{transformCoreDNS},
		// The Corefile is written into the ConfigMap as given: AddonPolicy decides who may set it.
		FreeFormFields: []string{"spec.corefile"},
		Hooks:          engine.Hooks{Default: adoptedCorefile},
	}
}

// coreDNSInputs carries a Corefile that kaddons did not write, migrated to the version
// being applied. It is not spec.corefile: the adopted file still takes spec.dnsDomain,
// and AddonPolicy does not count it as a free-form field the user set.
type coreDNSInputs struct {
	Corefile string `json:"corefile,omitempty"`
}

// adoptedCorefile is CoreDNS's Default hook: it keeps the Corefile of an install kaddons
// adopts (or adopted), migrated from the version that wrote it, for the transform.
// spec.corefile, when set, wins.
func adoptedCorefile(ctx context.Context, req engine.HookRequest) engine.HookResult {
	if cr, ok := req.Addon.(*addonsv1alpha1.CoreDNS); !ok || cr.Spec.Corefile != "" {
		return engine.HookResult{}
	}
	existing, err := engine.AdoptedConfig(ctx, req, engine.ExistingConfig{ConfigMap: coreDNSConfigMap, Key: "Corefile",
		Deployment: coreDNSDeployment, Container: coreDNSContainer})
	if err != nil || existing.Value == "" {
		return engine.HookResult{Err: err}
	}
	migrated, err := corefile.Migrate(existing.Value, existing.Version, req.Package.Version, !existing.Adopting)
	var failed *corefile.MigrationError
	switch {
	case errors.As(err, &failed):
		return corefileBlocked(failed)
	case err != nil:
		return engine.HookResult{Err: err}
	}
	return engine.HookResult{Inputs: coreDNSInputs{Corefile: migrated}}
}

// corefileBlocked stops the add-on, nothing applied, rather than apply a Corefile that
// would lose what an admin configured: Stalled, looked at again every minute (an admin
// may edit the Corefile). The message says which of the spec's fields lift the block.
func corefileBlocked(err *corefile.MigrationError) engine.HookResult {
	return engine.HookResult{Reason: addonsv1alpha1.ReasonCorefileMigrationFailed, Terminal: true,
		Message: err.Error() + "; nothing was changed. Set spec.corefile, pin spec.version, or edit the Corefile"}
}

// corefileDomain matches the zone list of the kubernetes plugin in the packaged Corefile.
var corefileDomain = regexp.MustCompile(`(?m)^(\s*kubernetes\s+)cluster\.local(\s)`)

// transformCoreDNS applies the CoreDNS spec's typed fields to the rendered package.
func transformCoreDNS(_ context.Context, in engine.RenderInput, objects *engine.Objects) error {
	cr, ok := in.Addon.(*addonsv1alpha1.CoreDNS)
	if !ok {
		return fmt.Errorf("expected a CoreDNS, got %T", in.Addon)
	}
	spec := cr.Spec
	adopted, _ := in.Inputs.(coreDNSInputs)

	if spec.Corefile != "" || adopted.Corefile != "" || (spec.DNSDomain != "" && spec.DNSDomain != defaultDNSDomain) {
		cm, err := engine.MustFindObject(objects, "ConfigMap", coreDNSConfigMap)
		if err != nil {
			return err
		}
		text := spec.Corefile
		if text == "" {
			current, _, _ := cm.NestedStringMap("data")
			text = corefileDomain.ReplaceAllString(cmp.Or(adopted.Corefile, current["Corefile"]), "${1}"+spec.DNSDomain+"${2}")
		}
		if err := engine.SetConfigData(cm, "Corefile", text, adopted.Corefile); err != nil {
			return err
		}
	}

	if err := engine.SetClusterIP(objects, coreDNSService, spec.ClusterIP); err != nil {
		return err
	}

	deploy, err := engine.MustFindObject(objects, "Deployment", coreDNSDeployment)
	if err != nil {
		return err
	}
	return engine.ApplyPodFields(deploy, coreDNSContainer, engine.PodFields{
		Replicas:     spec.Replicas,
		Resources:    spec.Resources,
		NodeSelector: spec.NodeSelector,
		Tolerations:  spec.Tolerations,
	})
}

// CoreDNSServiceAddress returns the cluster IP of a CoreDNS add-on: its spec.clusterIP,
// else the address its kube-dns Service got, read through c. It is "" while there is none.
// Add-ons that follow a CoreDNS (NodeLocalDNS) use it.
func CoreDNSServiceAddress(ctx context.Context, c client.Reader, coreDNS *addonsv1alpha1.CoreDNS) (string, error) {
	if coreDNS.Spec.ClusterIP != "" {
		return coreDNS.Spec.ClusterIP, nil
	}
	return engine.ServiceAddress(ctx, c, coreDNS, coreDNSService)
}
