package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// KubeProxyMode is the way kube-proxy programs Services into the node.
// +kubebuilder:validation:Enum=iptables;nftables;ipvs
type KubeProxyMode string

// KubeProxySpec is the desired state of kube-proxy.
type KubeProxySpec struct {
	// version and channel select the kube-proxy package. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every add-on.
	AddonSpec `json:",inline"`

	// apiServerEndpoint is the host:port (10.0.0.1:6443, api.example.org:6443,
	// [fd00::1]:6443) at which kube-proxy reaches the API server. kube-proxy is what makes
	// the kubernetes Service work, so on a new cluster it must be given an address that
	// works without Service networking: the control plane's load balancer or a node's
	// address. Without it kube-proxy uses the in-cluster address (the kubernetes Service),
	// which works only where something else already routes Services.
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$`
	// +optional
	APIServerEndpoint string `json:"apiServerEndpoint,omitempty"`

	// clusterCIDR is the pod network's range (or an IPv4 and an IPv6 range, separated by
	// a comma): kube-proxy masquerades traffic to Services that comes from outside it.
	// Defaults to none, as kubeadm's without a pod subnet.
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="self.split(',').size() <= 2 && self.split(',').all(c, isCIDR(c))",message="clusterCIDR must be a CIDR, or an IPv4 and an IPv6 CIDR separated by a comma"
	// +optional
	ClusterCIDR string `json:"clusterCIDR,omitempty"`

	// mode is how kube-proxy implements Services: iptables (the default), nftables or
	// ipvs.
	// +optional
	Mode KubeProxyMode `json:"mode,omitempty"`
}

// KubeProxyStatus is the observed state of KubeProxy.
type KubeProxyStatus struct {
	AddonStatus `json:",inline"`
}

// KubeProxy manages kube-proxy, which implements Services on every node, run by a
// DaemonSet on the host network, as kubeadm installs it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=kubeproxies,singular=kubeproxy,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type KubeProxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of KubeProxy.
	// +optional
	Spec KubeProxySpec `json:"spec,omitempty"`
	// status is the observed state of KubeProxy.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status KubeProxyStatus `json:"status,omitempty"`
}

// KubeProxyList is a list of KubeProxy.
// +kubebuilder:object:root=true
type KubeProxyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeProxy `json:"items"`
}

var _ Addon = &KubeProxy{}

// ComponentName names the add-on's packages under channels/packages.
func (*KubeProxy) ComponentName() string { return "kube-proxy" }

// CommonSpec returns the version and channel that select the package.
func (k *KubeProxy) CommonSpec() addonv1alpha1.CommonSpec { return k.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (k *KubeProxy) PatchSpec() addonv1alpha1.PatchSpec { return k.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (k *KubeProxy) GetCommonStatus() addonv1alpha1.CommonStatus { return k.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (k *KubeProxy) SetCommonStatus(status addonv1alpha1.CommonStatus) {
	k.Status.CommonStatus = status
}

// GetAddonSpec returns the lifecycle settings.
func (k *KubeProxy) GetAddonSpec() *AddonSpec { return &k.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (k *KubeProxy) GetAddonStatus() *AddonStatus { return &k.Status.AddonStatus }

func init() {
	register(&KubeProxy{}, &KubeProxyList{})
}
