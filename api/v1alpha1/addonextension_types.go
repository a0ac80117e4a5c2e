package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
)

// AddonExtensionSpec registers an extension: a program of its own, reached over HTTPS,
// that kaddons calls at fixed points of the lifecycle of the add-ons it selects
// (docs/extensions.md).
type AddonExtensionSpec struct {
	// clientConfig says how kaddons reaches the extension and how it trusts its
	// certificate.
	// +required
	ClientConfig ExtensionClientConfig `json:"clientConfig"`

	// hooks are the hooks kaddons calls the extension for. Each must be one its
	// discovery endpoint lists; until all are, the extension is not Discovered.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +required
	Hooks []hooksv1alpha1.Hook `json:"hooks"`

	// selector chooses the add-ons the extension applies to; empty selects every add-on.
	// +optional
	Selector ExtensionSelector `json:"selector,omitempty"`

	// timeout bounds each call, discovery included. Defaults to 10s; at most 30s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('30s')",message="timeout must be a duration between 1s and 30s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// failurePolicy says what a failed call does to the add-on: Fail (the default) holds
	// it where it is, nothing applied, with reason ExtensionFailed (or ExtensionNotReady
	// while the extension is not Discovered); Ignore lets it go on as if the extension
	// had let it, and marks it Degraded with reason ExtensionIgnored. A call fails when
	// it times out, TLS or the connection fails, or the answer is not a valid response
	// (garbage, too large, a refused Render).
	// +kubebuilder:validation:Enum=Fail;Ignore
	// +kubebuilder:default=Fail
	// +optional
	FailurePolicy ExtensionFailurePolicy `json:"failurePolicy,omitempty"`
}

// ExtensionFailurePolicy says what a failed call to an extension does to an add-on.
type ExtensionFailurePolicy string

const (
	// FailurePolicyFail holds the add-on where it is.
	FailurePolicyFail ExtensionFailurePolicy = "Fail"
	// FailurePolicyIgnore lets the add-on go on and says so.
	FailurePolicyIgnore ExtensionFailurePolicy = "Ignore"
)

// ExtensionClientConfig says how to reach an extension: exactly one of url and service.
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.service)",message="set exactly one of url and service"
type ExtensionClientConfig struct {
	// url is the extension's base URL: https://host[:port][/path], no user, query or
	// fragment. The hooks are served below it (docs/extensions.md).
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="url must be https://"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^https://[^/?#]*@') && !self.matches('[?#]')",message="url must carry no user, query or fragment"
	// +optional
	URL *string `json:"url,omitempty"`

	// service is a Service the extension listens behind, reached by its cluster DNS name
	// <name>.<namespace>.svc, which its certificate must be valid for.
	// +optional
	Service *ExtensionServiceReference `json:"service,omitempty"`

	// caBundle is the PEM-encoded CA bundle the extension's serving certificate must
	// chain to. Required: kaddons never trusts an extension by the system roots alone.
	// +kubebuilder:validation:MinLength=1
	// +required
	CABundle []byte `json:"caBundle"`
}

// ExtensionServiceReference names the Service of an extension.
type ExtensionServiceReference struct {
	// namespace of the Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`
	// name of the Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// path is the base path the hooks are served below; empty means /.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9._~-]*)*$`
	// +optional
	Path string `json:"path,omitempty"`
	// port of the Service. Defaults to 443.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=443
	// +optional
	Port int32 `json:"port,omitempty"`
}

// ExtensionSelector chooses the add-ons an extension applies to.
type ExtensionSelector struct {
	// kinds are the add-on kinds, such as CoreDNS; empty means every kind.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	Kinds []string `json:"kinds,omitempty"`
	// namespaceSelector chooses the add-ons by the labels of their namespace; empty
	// means every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// AddonExtensionStatus is what kaddons found out about an extension.
type AddonExtensionStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Discovered is True when the discovery endpoint answered and serves
	// every hook in spec.hooks at a version kaddons speaks. Only a Discovered extension
	// is called; one that is not holds the add-ons it selects (failurePolicy Fail) or is
	// skipped (Ignore).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// hooks are the hooks the discovery endpoint listed, with their versions.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Hooks []DiscoveredHook `json:"hooks,omitempty"`

	// revision is the revision the extension last reported; a change renders the add-ons
	// its Render hook applies to again.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Revision string `json:"revision,omitempty"`

	// lastDiscoveryTime is when discovery last answered.
	// +optional
	LastDiscoveryTime *metav1.Time `json:"lastDiscoveryTime,omitempty"`
}

// DiscoveredHook is a hook an extension's discovery endpoint listed.
type DiscoveredHook struct {
	// name is the hook.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// apiVersion is the version of the wire format the extension speaks for it.
	// +kubebuilder:validation:MaxLength=253
	// +required
	APIVersion string `json:"apiVersion"`
}

// ConditionDiscovered is the AddonExtension condition that says its discovery endpoint
// answered and serves every hook its spec names.
const ConditionDiscovered = "Discovered"

// AddonExtension registers an extension that kaddons calls over HTTPS at fixed points of
// the lifecycle of the add-ons it selects: to change their rendered objects, refuse a
// spec, hold an upgrade or a deletion, or check an add-on serves. Only cluster admins
// create AddonExtensions; the extension runs with its own, narrower permissions.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,path=addonextensions,singular=addonextension,shortName=aext,categories=addons
// +kubebuilder:printcolumn:name="Hooks",type=string,JSONPath=`.spec.hooks`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.failurePolicy`
// +kubebuilder:printcolumn:name="Discovered",type=string,JSONPath=`.status.conditions[?(@.type=="Discovered")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Discovered")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters"
type AddonExtension struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where the extension listens, which hooks it serves and for which add-ons.
	// +required
	Spec AddonExtensionSpec `json:"spec"`
	// status is what discovery found.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status AddonExtensionStatus `json:"status,omitempty"`
}

// AddonExtensionList is a list of AddonExtensions.
// +kubebuilder:object:root=true
type AddonExtensionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddonExtension `json:"items"`
}

func init() {
	register(&AddonExtension{}, &AddonExtensionList{})
}
