package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// KubeletAddressType is a kind of node address metrics-server may use to reach kubelets.
// +kubebuilder:validation:Enum=InternalIP;ExternalIP;Hostname;InternalDNS;ExternalDNS
type KubeletAddressType string

// MetricsServerSpec is the desired state of the cluster's metrics-server.
type MetricsServerSpec struct {
	// version and channel select the metrics-server package. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every add-on.
	AddonSpec `json:",inline"`

	// replicas is the number of metrics-server pods. Without it the package's default (1) applies.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// resources replaces the metrics-server container's resource requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// kubeletInsecureTLS skips verifying the kubelets' serving certificates
	// (--kubelet-insecure-tls). Needed where kubelets use self-signed certificates, as in
	// kind or kubeadm clusters without serving-certificate rotation.
	// +optional
	KubeletInsecureTLS bool `json:"kubeletInsecureTLS,omitempty"`

	// kubeletPreferredAddressTypes is the order in which node address types are tried to
	// reach kubelets (--kubelet-preferred-address-types). Without it the package's order
	// (InternalIP, ExternalIP, Hostname) applies.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +optional
	KubeletPreferredAddressTypes []KubeletAddressType `json:"kubeletPreferredAddressTypes,omitempty"`

	// metricResolution is how often metrics are scraped from the kubelets
	// (--metric-resolution). Without it the package's default (15s) applies.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('10m')",message="metricResolution must be between 10s and 10m"
	// +optional
	MetricResolution *metav1.Duration `json:"metricResolution,omitempty"`
}

// MetricsServerStatus is the observed state of metrics-server.
type MetricsServerStatus struct {
	AddonStatus `json:",inline"`
}

// MetricsServer manages metrics-server and the aggregated metrics.k8s.io API it serves,
// which kubectl top and the HorizontalPodAutoscaler read.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=metricsservers,singular=metricsserver,shortName=ms,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type MetricsServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of metrics-server.
	// +optional
	Spec MetricsServerSpec `json:"spec,omitempty"`
	// status is the observed state of metrics-server.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status MetricsServerStatus `json:"status,omitempty"`
}

// MetricsServerList is a list of MetricsServer.
// +kubebuilder:object:root=true
type MetricsServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MetricsServer `json:"items"`
}

var _ Addon = &MetricsServer{}

// ComponentName names the add-on's packages under channels/packages.
func (*MetricsServer) ComponentName() string { return "metrics-server" }

// CommonSpec returns the version and channel that select the package.
func (m *MetricsServer) CommonSpec() addonv1alpha1.CommonSpec { return m.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (m *MetricsServer) PatchSpec() addonv1alpha1.PatchSpec { return m.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (m *MetricsServer) GetCommonStatus() addonv1alpha1.CommonStatus { return m.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (m *MetricsServer) SetCommonStatus(s addonv1alpha1.CommonStatus) { m.Status.CommonStatus = s }

// GetAddonSpec returns the lifecycle settings.
func (m *MetricsServer) GetAddonSpec() *AddonSpec { return &m.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (m *MetricsServer) GetAddonStatus() *AddonStatus { return &m.Status.AddonStatus }

func init() {
	register(&MetricsServer{}, &MetricsServerList{})
}
