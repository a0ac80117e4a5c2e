package extensions

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// typeMeta is the TypeMeta of a request of kind.
func typeMeta(kind string) hooksv1alpha1.TypeMeta {
	return hooksv1alpha1.TypeMeta{APIVersion: hooksv1alpha1.GroupVersion, Kind: kind}
}

// Discover calls the extension's discovery endpoint.
func (c *Caller) Discover(ctx context.Context, e *Endpoint) (*hooksv1alpha1.DiscoveryResponse, error) {
	resp := &hooksv1alpha1.DiscoveryResponse{}
	err := c.Call(ctx, e, "Discovery", hooksv1alpha1.DiscoveryPath, hooksv1alpha1.KindDiscoveryResponse,
		hooksv1alpha1.DiscoveryRequest{TypeMeta: typeMeta(hooksv1alpha1.KindDiscoveryRequest)}, resp)
	return resp, err
}

// AddonOf is the wire form of an add-on: its identity and its spec as the user wrote it.
func AddonOf(addon addonsv1alpha1.Addon, kind, apiVersion string) (hooksv1alpha1.Addon, error) {
	spec, err := addonsv1alpha1.SpecJSON(addon)
	if err != nil {
		return hooksv1alpha1.Addon{}, err
	}
	return hooksv1alpha1.Addon{APIVersion: apiVersion, Kind: kind, Namespace: addon.GetNamespace(), Name: addon.GetName(),
		UID: addon.GetUID(), Generation: addon.GetGeneration(), Labels: addon.GetLabels(),
		Annotations: addon.GetAnnotations(), Spec: runtime.RawExtension{Raw: spec}}, nil
}

// Render calls the extension's Render hook.
func (c *Caller) Render(ctx context.Context, e *Endpoint, addon hooksv1alpha1.Addon, version string,
	objects []runtime.RawExtension) (*hooksv1alpha1.RenderResponse, error) {
	resp := &hooksv1alpha1.RenderResponse{}
	err := c.Call(ctx, e, string(hooksv1alpha1.Render), hooksv1alpha1.Render.Path(), hooksv1alpha1.KindRenderResponse,
		hooksv1alpha1.RenderRequest{TypeMeta: typeMeta(hooksv1alpha1.KindRenderRequest), Addon: addon, Version: version,
			Objects: objects}, resp)
	return resp, err
}

// Validate calls the extension's Validate hook.
func (c *Caller) Validate(ctx context.Context, e *Endpoint, addon hooksv1alpha1.Addon,
	version string) (*hooksv1alpha1.ValidateResponse, error) {
	resp := &hooksv1alpha1.ValidateResponse{}
	err := c.Call(ctx, e, string(hooksv1alpha1.Validate), hooksv1alpha1.Validate.Path(), hooksv1alpha1.KindValidateResponse,
		hooksv1alpha1.ValidateRequest{TypeMeta: typeMeta(hooksv1alpha1.KindValidateRequest), Addon: addon, Version: version}, resp)
	return resp, err
}

// Hold is a blocking hook's answer: zero lets the add-on go on.
type Hold struct {
	// RetryAfter is when to ask again; zero lets the add-on go on.
	RetryAfter time.Duration
	// Message says why, cut to what kaddons shows.
	Message string
}

// holdOf reads a blocking hook's answer.
func holdOf(e *Endpoint, hook string, r hooksv1alpha1.RetryResponse) (Hold, error) {
	if r.RetryAfterSeconds < 0 {
		return Hold{}, &CallError{Extension: e.Name, Hook: hook, Reason: FailureInvalidResponse,
			Err: fmt.Errorf("retryAfterSeconds is %d, below 0", r.RetryAfterSeconds)}
	}
	if r.RetryAfterSeconds == 0 {
		return Hold{}, nil
	}
	return Hold{RetryAfter: min(time.Duration(r.RetryAfterSeconds)*time.Second, MaxRetryAfter), Message: Truncate(r.Message)}, nil
}

// BeforeUpgrade calls the extension's BeforeUpgrade hook.
func (c *Caller) BeforeUpgrade(ctx context.Context, e *Endpoint, addon hooksv1alpha1.Addon, from, to string) (Hold, error) {
	resp := &hooksv1alpha1.BeforeUpgradeResponse{}
	hook := string(hooksv1alpha1.BeforeUpgrade)
	if err := c.Call(ctx, e, hook, hooksv1alpha1.BeforeUpgrade.Path(), hooksv1alpha1.KindBeforeUpgradeResponse,
		hooksv1alpha1.BeforeUpgradeRequest{TypeMeta: typeMeta(hooksv1alpha1.KindBeforeUpgradeRequest), Addon: addon,
			FromVersion: from, ToVersion: to}, resp); err != nil {
		return Hold{}, err
	}
	return holdOf(e, hook, resp.RetryResponse)
}

// AfterReady calls the extension's AfterReady hook.
func (c *Caller) AfterReady(ctx context.Context, e *Endpoint, addon hooksv1alpha1.Addon, version string) (Hold, error) {
	resp := &hooksv1alpha1.AfterReadyResponse{}
	hook := string(hooksv1alpha1.AfterReady)
	if err := c.Call(ctx, e, hook, hooksv1alpha1.AfterReady.Path(), hooksv1alpha1.KindAfterReadyResponse,
		hooksv1alpha1.AfterReadyRequest{TypeMeta: typeMeta(hooksv1alpha1.KindAfterReadyRequest), Addon: addon,
			Version: version}, resp); err != nil {
		return Hold{}, err
	}
	return holdOf(e, hook, resp.RetryResponse)
}

// BeforeDelete calls the extension's BeforeDelete hook.
func (c *Caller) BeforeDelete(ctx context.Context, e *Endpoint, addon hooksv1alpha1.Addon, version string) (Hold, error) {
	resp := &hooksv1alpha1.BeforeDeleteResponse{}
	hook := string(hooksv1alpha1.BeforeDelete)
	if err := c.Call(ctx, e, hook, hooksv1alpha1.BeforeDelete.Path(), hooksv1alpha1.KindBeforeDeleteResponse,
		hooksv1alpha1.BeforeDeleteRequest{TypeMeta: typeMeta(hooksv1alpha1.KindBeforeDeleteRequest), Addon: addon,
			Version: version}, resp); err != nil {
		return Hold{}, err
	}
	return holdOf(e, hook, resp.RetryResponse)
}
