package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// NodeLocalDNSSpec is the desired state of NodeLocal DNSCache.
// +kubebuilder:validation:XValidation:rule="!has(self.clusterDNSIP) || !has(self.localIP) || self.clusterDNSIP != self.localIP",message="localIP and clusterDNSIP must differ"
type NodeLocalDNSSpec struct {
	// version and channel select the NodeLocal DNSCache package. version wins; without it
	// the channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every
	// add-on. NodeLocal DNSCache must run in the namespace of the cluster's CoreDNS pods:
	// its kube-dns-upstream Service selects them.
	AddonSpec `json:",inline"`

	// localIP is the link-local address node-local-dns listens on, on every node.
	// Pods reach it when kubelet's --cluster-dns points at it. Defaults to 169.254.20.10.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="localIP must be an IPv4 or IPv6 address"
	// +optional
	LocalIP string `json:"localIP,omitempty"`

	// clusterDNSIP is the cluster IP of the kube-dns Service, which node-local-dns also
	// listens on so that pods keep working whichever address they use. Defaults to the
	// followed CoreDNS's address (see coreDNSRef), else to 10.96.0.10.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="clusterDNSIP must be an IPv4 or IPv6 address"
	// +optional
	ClusterDNSIP string `json:"clusterDNSIP,omitempty"`

	// dnsDomain is the cluster DNS domain. Defaults to the followed CoreDNS's dnsDomain,
	// else to cluster.local.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	DNSDomain string `json:"dnsDomain,omitempty"`

	// coreDNSRef names a CoreDNS add-on whose cluster IP and domain this one follows:
	// when that CoreDNS changes, node-local-dns is re-rendered to match. Until it exists
	// and has a cluster IP, nothing is applied and the reason is DependencyNotReady.
	// +optional
	CoreDNSRef *LocalAddonReference `json:"coreDNSRef,omitempty"`

	// resources replaces the node-cache container's resource requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// LocalAddonReference names an add-on of a kind the referring field implies.
type LocalAddonReference struct {
	// name is the add-on's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// namespace is the add-on's namespace; defaults to the referring add-on's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// NodeLocalDNSStatus is the observed state of NodeLocal DNSCache.
type NodeLocalDNSStatus struct {
	AddonStatus `json:",inline"`
}

// NodeLocalDNS manages NodeLocal DNSCache: a DNS cache on every node, run by a
// DaemonSet, in front of the cluster's CoreDNS.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=nodelocaldns,singular=nodelocaldns,shortName=nldns,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type NodeLocalDNS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of NodeLocal DNSCache.
	// +optional
	Spec NodeLocalDNSSpec `json:"spec,omitempty"`
	// status is the observed state of NodeLocal DNSCache.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status NodeLocalDNSStatus `json:"status,omitempty"`
}

// NodeLocalDNSList is a list of NodeLocalDNS.
// +kubebuilder:object:root=true
type NodeLocalDNSList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeLocalDNS `json:"items"`
}

var _ Addon = &NodeLocalDNS{}

// ComponentName names the add-on's packages under channels/packages.
func (*NodeLocalDNS) ComponentName() string { return "nodelocaldns" }

// CommonSpec returns the version and channel that select the package.
func (n *NodeLocalDNS) CommonSpec() addonv1alpha1.CommonSpec { return n.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (n *NodeLocalDNS) PatchSpec() addonv1alpha1.PatchSpec { return n.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (n *NodeLocalDNS) GetCommonStatus() addonv1alpha1.CommonStatus { return n.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (n *NodeLocalDNS) SetCommonStatus(s addonv1alpha1.CommonStatus) { n.Status.CommonStatus = s }

// GetAddonSpec returns the lifecycle settings.
func (n *NodeLocalDNS) GetAddonSpec() *AddonSpec { return &n.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (n *NodeLocalDNS) GetAddonStatus() *AddonStatus { return &n.Status.AddonStatus }

func init() {
	register(&NodeLocalDNS{}, &NodeLocalDNSList{})
}
