// Package v1alpha1 is the bench-only API of the stock KDP reconciler: StockCoreDNS, a
// kind shaped like KDP's guestbook example (CommonSpec, PatchSpec, CommonStatus and the
// conditions NewKstatusCheck writes), so stock KDP can run the same CoreDNS packages as
// kaddons side by side.
//
// After editing, regenerate with
//
//	bin/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./test/bench/api/...
//	bin/controller-gen crd paths=./test/bench/api/... output:crd:artifacts:config=test/bench/testdata/crd
//
// +kubebuilder:object:generate=true
// +groupName=bench.kaddons.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

var (
	// GroupVersion is the group and version of the bench API.
	GroupVersion = schema.GroupVersion{Group: "bench.kaddons.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the bench types.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &StockCoreDNS{}, &StockCoreDNSList{})
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the bench types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// StockCoreDNSSpec selects the CoreDNS package and patches it, as KDP's guestbook does.
type StockCoreDNSSpec struct {
	addonv1alpha1.CommonSpec `json:",inline"`
	addonv1alpha1.PatchSpec  `json:",inline"`
}

// StockCoreDNSStatus is KDP's common status plus the conditions NewKstatusCheck sets.
type StockCoreDNSStatus struct {
	addonv1alpha1.CommonStatus `json:",inline"`

	// conditions holds the Ready condition that KDP's kstatus check computes.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StockCoreDNS is CoreDNS reconciled by an unmodified KDP reconciler, for comparison.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=stockcoredns,singular=stockcoredns
// +kubebuilder:metadata:labels="applyset.kubernetes.io/is-parent-type=true"
type StockCoreDNS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects and patches the package.
	// +optional
	Spec StockCoreDNSSpec `json:"spec,omitempty"`
	// status is written by KDP.
	// +optional
	Status StockCoreDNSStatus `json:"status,omitempty"`
}

// StockCoreDNSList is a list of StockCoreDNS.
// +kubebuilder:object:root=true
type StockCoreDNSList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StockCoreDNS `json:"items"`
}

var (
	_ addonv1alpha1.CommonObject = &StockCoreDNS{}
	_ addonv1alpha1.Patchable    = &StockCoreDNS{}
)

// ComponentName names the package under channels/packages.
func (*StockCoreDNS) ComponentName() string { return "coredns" }

// CommonSpec returns the version and channel.
func (o *StockCoreDNS) CommonSpec() addonv1alpha1.CommonSpec { return o.Spec.CommonSpec }

// PatchSpec returns the patches.
func (o *StockCoreDNS) PatchSpec() addonv1alpha1.PatchSpec { return o.Spec.PatchSpec }

// GetCommonStatus returns KDP's common status.
func (o *StockCoreDNS) GetCommonStatus() addonv1alpha1.CommonStatus { return o.Status.CommonStatus }

// SetCommonStatus sets KDP's common status.
func (o *StockCoreDNS) SetCommonStatus(s addonv1alpha1.CommonStatus) { o.Status.CommonStatus = s }
