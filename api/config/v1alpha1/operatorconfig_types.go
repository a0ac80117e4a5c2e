package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OperatorConfigName is the only name an OperatorConfig may have: there is one per cluster.
const OperatorConfigName = "default"

// Condition type and reasons of an OperatorConfig.
const (
	// ConditionReady is True when the spec is in force, and False when it was rejected.
	ConditionReady = "Ready"
	// ReasonApplied means the spec, merged onto the configuration file, is in force.
	ReasonApplied = "Applied"
	// ReasonInvalidConfiguration means the spec was rejected; the previous settings stay
	// in force and the message says which field is wrong.
	ReasonInvalidConfiguration = "InvalidConfiguration"
)

// OperatorConfigSpec holds the operator settings that may change while it runs. Every
// field is optional: an unset field keeps the value of the configuration file (--config),
// and deleting the OperatorConfig returns to the file's settings.
type OperatorConfigSpec struct {
	// defaultChannel is the channel for add-ons that name neither a version nor a
	// channel. It must be a channel the operator has.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	DefaultChannel string `json:"defaultChannel,omitempty"`

	// registryMirror replaces the registry of every image the add-ons run, for example
	// mirror.example.com/k8s, for air-gapped clusters.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RegistryMirror string `json:"registryMirror,omitempty"`

	// pausedAddonKinds lists the add-on kinds, such as CoreDNS, that are not reconciled:
	// nothing of theirs is applied or pruned, and what runs keeps running.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	PausedAddonKinds []string `json:"pausedAddonKinds,omitempty"`

	// logLevel is the least severe level the operator logs: error, info or debug.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	LogLevel string `json:"logLevel,omitempty"`

	// resyncInterval is how often every add-on is reconciled again without an event;
	// 0s turns it off.
	// +optional
	ResyncInterval *metav1.Duration `json:"resyncInterval,omitempty"`

	// trustedNamespaces lists the namespaces whose add-ons are applied with the operator's
	// own identity; add-ons elsewhere are applied as a ServiceAccount of their namespace.
	// Unset keeps the configuration file's list; [] trusts no namespace; ["*"] trusts
	// every namespace.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?|\*)$`
	// +optional
	TrustedNamespaces []string `json:"trustedNamespaces,omitempty"`

	// defaultServiceAccountName is the ServiceAccount impersonated for add-ons outside the
	// trusted namespaces that set no spec.serviceAccountName.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DefaultServiceAccountName string `json:"defaultServiceAccountName,omitempty"`
}

// EffectiveSettings are the settings in force: the configuration file merged with the
// OperatorConfig's spec.
type EffectiveSettings struct {
	// defaultChannel is the channel for add-ons that name neither a version nor a channel.
	// +optional
	DefaultChannel string `json:"defaultChannel,omitempty"`
	// registryMirror replaces the registry of every image; empty means none.
	// +optional
	RegistryMirror string `json:"registryMirror,omitempty"`
	// pausedAddonKinds lists the add-on kinds that are not reconciled.
	// +listType=atomic
	// +optional
	PausedAddonKinds []string `json:"pausedAddonKinds,omitempty"`
	// logLevel is the least severe level logged.
	// +optional
	LogLevel string `json:"logLevel,omitempty"`
	// resyncInterval is how often every add-on is reconciled again; 0s means never.
	// +optional
	ResyncInterval metav1.Duration `json:"resyncInterval,omitempty"`
	// trustedNamespaces are the namespaces whose add-ons are applied with the operator's
	// own identity.
	// +listType=atomic
	// +optional
	TrustedNamespaces []string `json:"trustedNamespaces,omitempty"`
	// defaultServiceAccountName is impersonated for add-ons outside the trusted
	// namespaces that name no ServiceAccount; empty means they are refused.
	// +optional
	DefaultServiceAccountName string `json:"defaultServiceAccountName,omitempty"`
}

// OperatorConfigStatus reports which settings are in force.
type OperatorConfigStatus struct {
	// observedGeneration is the generation of the spec last evaluated.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// effective are the settings in force. After a rejected change they are still the
	// previous ones.
	// +optional
	Effective *EffectiveSettings `json:"effective,omitempty"`

	// conditions: Ready is True when the spec is in force, False with reason
	// InvalidConfiguration when it was rejected.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// OperatorConfig changes the operator's settings while it runs. There is at most one,
// cluster-scoped and named default.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=opcfg,categories=kaddons
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="the OperatorConfig must be named default"
type OperatorConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the settings to change.
	// +optional
	Spec OperatorConfigSpec `json:"spec,omitempty"`
	// status reports the settings in force.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status OperatorConfigStatus `json:"status,omitempty"`
}

// OperatorConfigList is a list of OperatorConfig.
// +kubebuilder:object:root=true
type OperatorConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OperatorConfig `json:"items"`
}

func init() {
	register(&OperatorConfig{}, &OperatorConfigList{})
}
