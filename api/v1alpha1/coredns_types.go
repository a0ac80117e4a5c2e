package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// CoreDNSSpec is the desired state of the cluster's CoreDNS.
// +kubebuilder:validation:XValidation:rule="!has(self.corefile) || !has(self.dnsDomain) || self.dnsDomain == 'cluster.local'",message="dnsDomain cannot be combined with corefile: write the domain into the Corefile"
type CoreDNSSpec struct {
	// version and channel select the CoreDNS package. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches (JSON merge patches for kinds without a schema)
	// applied to the rendered objects they name by apiVersion, kind and metadata.name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// suspend, upgrade, dependsOn and deletionPolicy are shared by every add-on.
	AddonSpec `json:",inline"`

	// dnsDomain is the cluster DNS domain that CoreDNS serves.
	// +kubebuilder:default="cluster.local"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	DNSDomain string `json:"dnsDomain,omitempty"`

	// clusterIP is the fixed cluster IP of the kube-dns Service, the address kubelets hand
	// to pods as their nameserver. Without it the API server allocates one.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="clusterIP must be an IPv4 or IPv6 address"
	// +optional
	ClusterIP string `json:"clusterIP,omitempty"`

	// replicas is the number of CoreDNS pods. Without it the package's default (2) applies.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// resources replaces the CoreDNS container's resource requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// nodeSelector replaces the CoreDNS pods' node selector.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations are added to the CoreDNS pods' tolerations.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// corefile replaces the whole Corefile shipped by the package.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	Corefile string `json:"corefile,omitempty"`
}

// CoreDNSStatus is the observed state of CoreDNS.
type CoreDNSStatus struct {
	AddonStatus `json:",inline"`
}

// CoreDNS manages the cluster's DNS server, CoreDNS, and its kube-dns Service.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=coredns,singular=coredns,shortName=cdns,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type CoreDNS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of CoreDNS.
	// +optional
	Spec CoreDNSSpec `json:"spec,omitempty"`
	// status is the observed state of CoreDNS.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status CoreDNSStatus `json:"status,omitempty"`
}

// CoreDNSList is a list of CoreDNS.
// +kubebuilder:object:root=true
type CoreDNSList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CoreDNS `json:"items"`
}

var _ Addon = &CoreDNS{}

// ComponentName names the add-on's packages under channels/packages.
func (*CoreDNS) ComponentName() string { return "coredns" }

// CommonSpec returns the version and channel that select the package.
func (c *CoreDNS) CommonSpec() addonv1alpha1.CommonSpec { return c.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (c *CoreDNS) PatchSpec() addonv1alpha1.PatchSpec { return c.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (c *CoreDNS) GetCommonStatus() addonv1alpha1.CommonStatus { return c.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (c *CoreDNS) SetCommonStatus(s addonv1alpha1.CommonStatus) { c.Status.CommonStatus = s }

// GetAddonSpec returns the lifecycle settings.
func (c *CoreDNS) GetAddonSpec() *AddonSpec { return &c.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (c *CoreDNS) GetAddonStatus() *AddonStatus { return &c.Status.AddonStatus }

func init() {
	register(&CoreDNS{}, &CoreDNSList{})
}
