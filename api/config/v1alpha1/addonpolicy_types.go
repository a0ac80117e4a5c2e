package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition type and reasons of an AddonPolicy. They sit next to the type because the
// add-on conditions in api/v1alpha1 belong to another API group.
const (
	// AddonPolicyConditionReady is True when every rule of the policy is valid, so every
	// rule takes part in evaluation.
	AddonPolicyConditionReady = "Ready"
	// AddonPolicyReasonValid means every rule's namespace selector and version constraint
	// is valid.
	AddonPolicyReasonValid = "Valid"
	// AddonPolicyReasonInvalidRule means at least one rule has a namespace selector or a
	// version constraint that cannot be parsed. Such a rule never permits anything; the
	// other rules of the policy still apply.
	AddonPolicyReasonInvalidRule = "InvalidRule"
)

// AddonPolicySpec is the set of rules through which a cluster admin delegates add-ons to
// namespaces.
type AddonPolicySpec struct {
	// rules are evaluated in order. An add-on is permitted when at least one rule of any
	// AddonPolicy applies to it (its namespaceSelector matches the add-on's namespace and
	// its kinds include the add-on's kind) and allows its channel, resolved version,
	// target namespace, patches and free-form fields.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +required
	Rules []AddonPolicyRule `json:"rules"`
}

// AddonPolicyRule says which add-ons the namespaces it selects may run.
type AddonPolicyRule struct {
	// name identifies the rule in the messages of the add-ons it permits or denies. Without
	// it the rule is called rules[<index>].
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`

	// namespaceSelector selects, by their labels, the namespaces the rule applies to.
	// Every namespace carries the label kubernetes.io/metadata.name=<name>, so one
	// namespace can be selected by name. {} selects every namespace.
	// +required
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`

	// kinds lists the add-on kinds the rule applies to, such as CoreDNS or MetricsServer.
	// Empty means every kind.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +optional
	Kinds []string `json:"kinds,omitempty"`

	// channels lists the channels the add-ons may take their version from: spec.channel,
	// or the operator's default channel when they set neither spec.version nor
	// spec.channel. Empty means any channel. An add-on that sets spec.version takes no
	// version from a channel, even when it also sets spec.channel, so a rule that lists
	// channels does not allow it.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	Channels []string `json:"channels,omitempty"`

	// versions is a semantic version constraint that the package version the add-on
	// resolves to (spec.version, the channel's version, or the version a failed upgrade
	// rolls back to) must satisfy, such as ">=1.11.0, <1.13.0" (comma means and, || means or; ~ and ^ ranges
	// are understood). A constraint without a pre-release part does not match pre-release
	// versions. Empty means any version. A constraint that cannot be parsed makes the rule
	// invalid: it then permits nothing and the policy's Ready condition says why.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Versions string `json:"versions,omitempty"`

	// targetNamespaces lists the namespaces, besides the add-on's own, that the add-ons may
	// install their namespaced objects into: spec.targetNamespace, or the kind's default
	// target namespace (kubernetes-dashboard for a Dashboard). Empty means only the
	// add-on's own namespace. "*" allows every namespace.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +optional
	TargetNamespaces []string `json:"targetNamespaces,omitempty"`

	// allowPatches says whether the add-ons may set spec.patches. Unset means true.
	// +kubebuilder:default=true
	// +optional
	AllowPatches *bool `json:"allowPatches,omitempty"`

	// patchKinds lists the kinds of rendered objects that spec.patches may target, such as
	// Deployment or ConfigMap, whatever their API group. Empty means every kind. It
	// narrows allowPatches; it permits nothing when allowPatches is false.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +optional
	PatchKinds []string `json:"patchKinds,omitempty"`

	// freeFormFields lists the free-form fields, besides spec.patches, that the add-ons may
	// set, by path: fields whose content reaches the rendered objects without a schema,
	// such as spec.corefile of a CoreDNS. Each add-on kind declares its own
	// (docs/configuration.md lists them). Empty means none; "*" allows every one.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|spec(\.[A-Za-z][A-Za-z0-9]*)+)$`
	// +optional
	FreeFormFields []string `json:"freeFormFields,omitempty"`

	// sources lists the AddonSources the add-ons may name in spec.sourceRef. The packages
	// built into the operator (no spec.sourceRef) are always allowed. Empty means no
	// AddonSource; "*" allows every one.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$`
	// +optional
	Sources []string `json:"sources,omitempty"`
}

// AddonPolicyStatus is the observed state of an AddonPolicy.
type AddonPolicyStatus struct {
	// observedGeneration is the metadata.generation that the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the policy's state. Ready is False with reason InvalidRule when
	// a rule's namespaceSelector or versions cannot be parsed; its message names the rule.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AddonPolicy delegates add-ons to namespaces: it says which add-on kinds the namespaces
// it selects may run, from which channels, at which versions, into which target
// namespaces, and with which patches and free-form fields. Only the policies in the
// operator's own namespace (kaddons-system) count; policies in other namespaces are
// ignored, so a tenant cannot grant itself anything. With no AddonPolicy at all, the
// add-ons in the namespaces the operator trusts are permitted and all others refused.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,path=addonpolicies,singular=addonpolicy,shortName=apol,categories=kaddons
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AddonPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the policy's rules.
	// +required
	Spec AddonPolicySpec `json:"spec"`
	// status is the observed state of the policy.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status AddonPolicyStatus `json:"status,omitempty"`
}

// AddonPolicyList is a list of AddonPolicy.
// +kubebuilder:object:root=true
type AddonPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddonPolicy `json:"items"`
}

func init() {
	register(&AddonPolicy{}, &AddonPolicyList{})
}
