package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// DashboardSpec is the desired state of the Kubernetes Dashboard.
type DashboardSpec struct {
	// version and channel select the Dashboard package. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every
	// add-on. The Dashboard's targetNamespace defaults to kubernetes-dashboard.
	AddonSpec `json:",inline"`

	// replicas is the number of dashboard pods. Without it the package's default (1) applies.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// resources replaces the dashboard container's resource requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// metricsScraper runs the dashboard-metrics-scraper, which gives the Dashboard its CPU
	// and memory graphs (it reads the metrics API of metrics-server). Defaults to true;
	// false removes the scraper's Deployment and Service and starts the Dashboard with
	// --metrics-provider=none.
	// +optional
	MetricsScraper *bool `json:"metricsScraper,omitempty"`
}

// DashboardStatus is the observed state of the Dashboard.
type DashboardStatus struct {
	AddonStatus `json:",inline"`
}

// Dashboard manages the Kubernetes Dashboard web UI and its metrics scraper, in a
// namespace of their own.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=dashboards,singular=dashboard,shortName=kdash,categories=addons
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type Dashboard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Dashboard.
	// +optional
	Spec DashboardSpec `json:"spec,omitempty"`
	// status is the observed state of the Dashboard.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status DashboardStatus `json:"status,omitempty"`
}

// DashboardList is a list of Dashboard.
// +kubebuilder:object:root=true
type DashboardList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Dashboard `json:"items"`
}

var _ Addon = &Dashboard{}

// ComponentName names the add-on's packages under channels/packages.
func (*Dashboard) ComponentName() string { return "dashboard" }

// CommonSpec returns the version and channel that select the package.
func (d *Dashboard) CommonSpec() addonv1alpha1.CommonSpec { return d.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (d *Dashboard) PatchSpec() addonv1alpha1.PatchSpec { return d.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (d *Dashboard) GetCommonStatus() addonv1alpha1.CommonStatus { return d.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (d *Dashboard) SetCommonStatus(s addonv1alpha1.CommonStatus) { d.Status.CommonStatus = s }

// GetAddonSpec returns the lifecycle settings.
func (d *Dashboard) GetAddonSpec() *AddonSpec { return &d.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (d *Dashboard) GetAddonStatus() *AddonStatus { return &d.Status.AddonStatus }

func init() {
	register(&Dashboard{}, &DashboardList{})
}
