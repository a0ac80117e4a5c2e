package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// KubeRouterSpec is the desired state of kube-router, the cluster's pod network.
type KubeRouterSpec struct {
	// version and channel select the kube-router package. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every add-on.
	AddonSpec `json:",inline"`

	// apiServerEndpoint is the host:port (10.0.0.1:6443, api.example.org:6443,
	// [fd00::1]:6443) at which kube-router reaches the API server, with its service
	// account's token. On a new cluster the kubernetes Service works only once kube-proxy
	// has programmed it, so kube-router is best given an address that works without:
	// the control plane's load balancer or a node's address. Without it kube-router uses
	// the in-cluster address (the kubernetes Service).
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$`
	// +optional
	APIServerEndpoint string `json:"apiServerEndpoint,omitempty"`

	// networkPolicy runs kube-router's network policy firewall (--run-firewall), which
	// enforces the cluster's NetworkPolicies. Defaults to true.
	// +optional
	NetworkPolicy *bool `json:"networkPolicy,omitempty"`

	// cniConfDir is the folder on each node where the container runtime reads its CNI
	// configuration; kube-router writes its conflist there. Defaults to /etc/cni/net.d, the
	// folder containerd and CRI-O read unless configured otherwise.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_.-]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..' || p == '.')",message="must not contain . or .. segments"
	// +optional
	CNIConfDir string `json:"cniConfDir,omitempty"`

	// cniBinDir is the folder on each node where the container runtime looks for CNI
	// plugins; kube-router installs the plugins it uses (bridge, host-local, portmap,
	// loopback) there unless present. Defaults to /opt/cni/bin.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_.-]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..' || p == '.')",message="must not contain . or .. segments"
	// +optional
	CNIBinDir string `json:"cniBinDir,omitempty"`
}

// KubeRouterStatus is the observed state of KubeRouter.
type KubeRouterStatus struct {
	AddonStatus `json:",inline"`
}

// KubeRouter manages kube-router as the cluster's CNI: pod networking (a bridge on every
// node, routes to the other nodes' pod CIDRs over BGP) and network policies, run by a
// DaemonSet on the host network before the nodes are Ready.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=kuberouters,singular=kuberouter,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type KubeRouter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of KubeRouter.
	// +optional
	Spec KubeRouterSpec `json:"spec,omitempty"`
	// status is the observed state of KubeRouter.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status KubeRouterStatus `json:"status,omitempty"`
}

// KubeRouterList is a list of KubeRouter.
// +kubebuilder:object:root=true
type KubeRouterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeRouter `json:"items"`
}

var _ Addon = &KubeRouter{}

// ComponentName names the add-on's packages under channels/packages.
func (*KubeRouter) ComponentName() string { return "kube-router" }

// CommonSpec returns the version and channel that select the package.
func (k *KubeRouter) CommonSpec() addonv1alpha1.CommonSpec { return k.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (k *KubeRouter) PatchSpec() addonv1alpha1.PatchSpec { return k.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (k *KubeRouter) GetCommonStatus() addonv1alpha1.CommonStatus { return k.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (k *KubeRouter) SetCommonStatus(status addonv1alpha1.CommonStatus) {
	k.Status.CommonStatus = status
}

// GetAddonSpec returns the lifecycle settings.
func (k *KubeRouter) GetAddonSpec() *AddonSpec { return &k.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (k *KubeRouter) GetAddonStatus() *AddonStatus { return &k.Status.AddonStatus }

func init() {
	register(&KubeRouter{}, &KubeRouterList{})
}
