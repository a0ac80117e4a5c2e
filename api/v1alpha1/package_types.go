package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// PackageSpec is the desired state of a Package: any package of the channels (the
// built-in ones, or an AddonSource's with spec.sourceRef), by name, with free-form values
// where the package declares them.
// +kubebuilder:validation:XValidation:rule="self.__package__ == oldSelf.__package__",message="package is immutable: create another Package"
type PackageSpec struct {
	// package names the package under the channels' packages/ folder (coredns,
	// metrics-server, or any package of an AddonSource), and the entry of the channel
	// files that recommends its version.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Package string `json:"package"`
	// version and channel select the package's version. version wins; without it the
	// channel's version applies, and without a channel the operator's default channel.
	addonv1alpha1.CommonSpec `json:",inline"`
	// patches are strategic-merge patches applied to the rendered objects they name.
	addonv1alpha1.PatchSpec `json:",inline"`
	// targetNamespace, suspend, upgrade, dependsOn and deletionPolicy are shared by every add-on.
	AddonSpec `json:",inline"`

	// values are the package's free-form values: merged over the values.yaml of a
	// package that is a Helm chart, and validated against its values.schema.json before
	// anything renders. A package without a values.schema.json (every kustomize package)
	// declares no values, and refuses them (ValuesInvalid). AddonPolicy allows them by
	// the path spec.values.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
}

// PackageStatus is the observed state of a Package.
type PackageStatus struct {
	AddonStatus `json:",inline"`
}

// Package installs any package of the channels by name and version or channel: what a
// user reaches for when kaddons has no typed kind for an add-on. It has the typed kinds'
// conditions, printer columns, contract, AddonPolicy gates and tenancy; a Helm chart
// package is installed as the release named after the Package.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=packages,singular=package,shortName=pkg,categories=addons
// +kubebuilder:printcolumn:name="Package",type=string,JSONPath=`.spec.package`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.appliedVersion`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=0
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters: it is used as a label value on every child"
type Package struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Package.
	Spec PackageSpec `json:"spec"`
	// status is the observed state of the Package.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0, healthy: false}
	// +optional
	Status PackageStatus `json:"status,omitempty"`
}

// PackageList is a list of Package.
// +kubebuilder:object:root=true
type PackageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Package `json:"items"`
}

var _ Addon = &Package{}

// ComponentName names the add-on's packages under channels/packages: spec.package.
func (p *Package) ComponentName() string { return p.Spec.Package }

// CommonSpec returns the version and channel that select the package.
func (p *Package) CommonSpec() addonv1alpha1.CommonSpec { return p.Spec.CommonSpec }

// PatchSpec returns the patches the user asked for.
func (p *Package) PatchSpec() addonv1alpha1.PatchSpec { return p.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (p *Package) GetCommonStatus() addonv1alpha1.CommonStatus { return p.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (p *Package) SetCommonStatus(status addonv1alpha1.CommonStatus) {
	p.Status.CommonStatus = status
}

// GetAddonSpec returns the lifecycle settings.
func (p *Package) GetAddonSpec() *AddonSpec { return &p.Spec.AddonSpec }

// GetAddonStatus returns the status the engine fills in.
func (p *Package) GetAddonStatus() *AddonStatus { return &p.Status.AddonStatus }

func init() {
	register(&Package{}, &PackageList{})
}
