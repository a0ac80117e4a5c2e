// Package v1alpha1 holds the wire format between kaddons and its extensions: the
// requests kaddons sends to the hooks an AddonExtension serves, and the responses it
// expects, as JSON over HTTPS (docs/extensions.md).
//
// Every request and response carries apiVersion hooks.addons.kaddons.dev/v1alpha1 and
// its kind. kaddons POSTs a request to <base>/hooks.addons.kaddons.dev/v1alpha1/<hook>,
// where <base> is the extension's URL (or Service) and <hook> its lower-case name
// (discovery, render, validate, beforeupgrade, afterready, beforedelete). An answer
// must be HTTP 200 with a JSON response of the matching kind; anything else is a
// failure of the extension, handled by its failurePolicy.
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// GroupVersion is the apiVersion of every request and response.
const GroupVersion = "hooks.addons.kaddons.dev/v1alpha1"

// PathPrefix is the path, below an extension's base URL, that every hook is served at.
const PathPrefix = "/" + GroupVersion + "/"

// Hook names a point of an add-on's lifecycle an extension can serve.
// +kubebuilder:validation:Enum=Render;Validate;BeforeUpgrade;AfterReady;BeforeDelete
type Hook string

const (
	// Render is called with the rendered objects of an add-on, after its patches and
	// before kaddons places them in namespaces, and returns them changed. It runs when
	// what decides the objects changes (the add-on's spec, the version, the extension's
	// revision), not on every reconcile.
	Render Hook = "Render"
	// Validate is called with the add-on and its resolved version before anything is
	// applied, and may refuse the spec.
	Validate Hook = "Validate"
	// BeforeUpgrade is called before an add-on changes version, and may hold the change.
	BeforeUpgrade Hook = "BeforeUpgrade"
	// AfterReady is called when every child of an add-on is healthy, once per install,
	// upgrade or spec change, and may keep the add-on from being Ready.
	AfterReady Hook = "AfterReady"
	// BeforeDelete is called when an add-on is deleted, before any child is, and may
	// hold the deletion.
	BeforeDelete Hook = "BeforeDelete"
)

// Hooks lists every hook an extension can serve, in the order of an add-on's lifecycle.
var Hooks = []Hook{Validate, Render, BeforeUpgrade, AfterReady, BeforeDelete}

// Path is the path of the hook below an extension's base URL.
func (h Hook) Path() string { return PathPrefix + lower(string(h)) }

// DiscoveryPath is the path of the discovery endpoint below an extension's base URL.
const DiscoveryPath = PathPrefix + "discovery"

// lower is strings.ToLower for the ASCII hook names, without importing strings into an
// API package.
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Kinds of the requests and responses.
const (
	KindDiscoveryRequest      = "DiscoveryRequest"
	KindDiscoveryResponse     = "DiscoveryResponse"
	KindRenderRequest         = "RenderRequest"
	KindRenderResponse        = "RenderResponse"
	KindValidateRequest       = "ValidateRequest"
	KindValidateResponse      = "ValidateResponse"
	KindBeforeUpgradeRequest  = "BeforeUpgradeRequest"
	KindBeforeUpgradeResponse = "BeforeUpgradeResponse"
	KindAfterReadyRequest     = "AfterReadyRequest"
	KindAfterReadyResponse    = "AfterReadyResponse"
	KindBeforeDeleteRequest   = "BeforeDeleteRequest"
	KindBeforeDeleteResponse  = "BeforeDeleteResponse"
)

// TypeMeta names a request's or a response's apiVersion and kind.
type TypeMeta struct {
	// apiVersion is hooks.addons.kaddons.dev/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// kind is the request's or response's kind, such as RenderRequest.
	Kind string `json:"kind"`
}

// ResponseStatus says whether the extension could answer.
type ResponseStatus string

const (
	// StatusSuccess means the extension answered; what it answered is in the rest of the
	// response (a hold, a refusal, changed objects).
	StatusSuccess ResponseStatus = "Success"
	// StatusFailure means the extension could not answer. kaddons treats it as it treats a
	// time-out: by the extension's failurePolicy.
	StatusFailure ResponseStatus = "Failure"
)

// CommonResponse is in every response.
type CommonResponse struct {
	// status is Success or Failure.
	Status ResponseStatus `json:"status"`
	// message says why, for a Failure, a refusal or a hold; kaddons shows it in the
	// add-on's conditions and events, cut to 1024 bytes.
	// +optional
	Message string `json:"message,omitempty"`
}

// RetryResponse is the answer of a blocking hook (BeforeUpgrade, AfterReady,
// BeforeDelete).
type RetryResponse struct {
	CommonResponse `json:",inline"`
	// retryAfterSeconds, when above 0, holds the add-on at this point: kaddons shows the
	// message with the hook's reason and asks again after this many seconds (at most
	// 3600). 0 lets the add-on go on.
	// +optional
	RetryAfterSeconds int32 `json:"retryAfterSeconds,omitempty"`
}

// Addon is the add-on a hook is called for.
type Addon struct {
	// apiVersion and kind of the add-on, such as addons.kaddons.dev/v1alpha1 and CoreDNS.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// namespace and name of the add-on.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// uid and generation of the add-on.
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	// labels and annotations of the add-on.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// spec is the add-on's spec, as the user wrote it.
	Spec runtime.RawExtension `json:"spec"`
}

// DiscoveryRequest asks an extension which hooks it serves.
type DiscoveryRequest struct {
	TypeMeta `json:",inline"`
}

// DiscoveryResponse lists the hooks an extension serves.
type DiscoveryResponse struct {
	TypeMeta       `json:",inline"`
	CommonResponse `json:",inline"`
	// hooks are the hooks the extension serves.
	Hooks []HookHandler `json:"hooks"`
	// revision changes whenever the extension's answers may change for the same request
	// (its settings changed). kaddons renders every add-on the extension's Render hook
	// applies to again when it does; discovery runs every few minutes.
	// +optional
	Revision string `json:"revision,omitempty"`
}

// HookHandler is one hook an extension serves.
type HookHandler struct {
	// name is the hook.
	Name Hook `json:"name"`
	// apiVersion is the version of the request and response the extension speaks for it;
	// hooks.addons.kaddons.dev/v1alpha1 is the only one.
	APIVersion string `json:"apiVersion"`
}

// RenderRequest carries an add-on's rendered objects to an extension.
type RenderRequest struct {
	TypeMeta `json:",inline"`
	// addon is the add-on.
	Addon Addon `json:"addon"`
	// version is the package version being rendered.
	Version string `json:"version"`
	// objects are the rendered objects, after the add-on's typed fields and patches,
	// before kaddons places them in namespaces and labels them.
	Objects []runtime.RawExtension `json:"objects"`
}

// RenderResponse returns an add-on's objects, changed.
type RenderResponse struct {
	TypeMeta       `json:",inline"`
	CommonResponse `json:",inline"`
	// objects are every object of the request, changed or not, in any order, and any
	// object the extension adds. Each object of the request must come back with the same
	// apiVersion, kind, namespace and name: one left out or moved to another namespace
	// refuses the whole answer. An added object must be of a kind the add-on may have
	// and must not name a namespace: it goes where the add-on's objects go. Everything
	// that comes back passes the same checks as spec.patches (docs/extensions.md).
	Objects []runtime.RawExtension `json:"objects"`
}

// ValidateRequest asks an extension whether an add-on's spec may be applied.
type ValidateRequest struct {
	TypeMeta `json:",inline"`
	// addon is the add-on.
	Addon Addon `json:"addon"`
	// version is the package version the add-on resolved to.
	Version string `json:"version"`
}

// ValidateResponse accepts or refuses an add-on's spec.
type ValidateResponse struct {
	TypeMeta       `json:",inline"`
	CommonResponse `json:",inline"`
	// violations, when not empty, refuse the spec: the add-on is Stalled with reason
	// InvalidSpec and these messages, and nothing is applied until its spec changes.
	// +optional
	Violations []string `json:"violations,omitempty"`
}

// BeforeUpgradeRequest asks an extension whether an add-on may change version.
type BeforeUpgradeRequest struct {
	TypeMeta `json:",inline"`
	// addon is the add-on.
	Addon Addon `json:"addon"`
	// fromVersion is the version running, toVersion the one about to be applied.
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
}

// BeforeUpgradeResponse lets an upgrade go on or holds it.
type BeforeUpgradeResponse struct {
	TypeMeta      `json:",inline"`
	RetryResponse `json:",inline"`
}

// AfterReadyRequest tells an extension that every child of an add-on is healthy.
type AfterReadyRequest struct {
	TypeMeta `json:",inline"`
	// addon is the add-on.
	Addon Addon `json:"addon"`
	// version is the version applied.
	Version string `json:"version"`
}

// AfterReadyResponse lets the add-on be Ready or keeps it Progressing.
type AfterReadyResponse struct {
	TypeMeta      `json:",inline"`
	RetryResponse `json:",inline"`
}

// BeforeDeleteRequest tells an extension that an add-on is being deleted.
type BeforeDeleteRequest struct {
	TypeMeta `json:",inline"`
	// addon is the add-on.
	Addon Addon `json:"addon"`
	// version is the version applied; empty when nothing was.
	// +optional
	Version string `json:"version,omitempty"`
}

// BeforeDeleteResponse lets the deletion go on or holds it, every child kept.
type BeforeDeleteResponse struct {
	TypeMeta      `json:",inline"`
	RetryResponse `json:",inline"`
}
