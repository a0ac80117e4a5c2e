package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// Helpers for add-ons whose existing installs keep a configuration file that adoption
// must carry over (CoreDNS's Corefile).

// AnnotationAdoptedConfig on an adopted ConfigMap holds the configuration file kaddons
// took over (migrated to the version it applied), before typed fields are applied to it:
// what later renders start from. Edits to the ConfigMap's data are drift and are undone;
// to change the file, set the add-on's own field for it (spec.corefile).
const AnnotationAdoptedConfig = "addons.kaddons.dev/adopted-config"

// SetConfigData sets the data entry key of the rendered ConfigMap o to value. adopted,
// when not empty, is the configuration file kaddons took over (before typed fields were
// applied to it), recorded in AnnotationAdoptedConfig so that the next renders start
// from it.
func SetConfigData(o *Object, key, value, adopted string) error {
	if err := o.SetNestedField(value, "data", key); err != nil {
		return err
	}
	if adopted == "" {
		return nil
	}
	return o.SetNestedField(adopted, "metadata", "annotations", AnnotationAdoptedConfig)
}

// ExistingConfig names a configuration file of a package, kept in a ConfigMap, and the
// workload whose image says which version wrote it.
type ExistingConfig struct {
	// ConfigMap is the ConfigMap's name in the target namespace; Key its data entry.
	ConfigMap, Key string
	// Deployment and Container name the workload and container whose image tag is the
	// running version.
	Deployment, Container string
}

// Config is an existing configuration file the add-on keeps.
type Config struct {
	// Value is the file's content; "" when kaddons writes the file itself.
	Value string
	// Version is the add-on version that wrote it ("" when unknown).
	Version string
	// Adopting is true while the add-on takes the file over for the first time (Version
	// is then the running workload's, not one kaddons applied).
	Adopting bool
}

// AdoptedConfig returns the configuration file want names when the add-on takes it over
// or took it over before, with the version that wrote it. That is:
//   - a ConfigMap in status.adopted: the file as kaddons took it over and last applied it
//     (its AnnotationAdoptedConfig, read through the cache), written for
//     status.appliedVersion;
//   - with spec.adopt IfUnmanaged, a ConfigMap that exists without kaddons' labels: its
//     data and the image tag of the running workload, read from the API server as the
//     add-on's identity (req.API; only while the cache does not hold the ConfigMap,
//     that is until it is adopted).
//
// req is a Default hook's request: the other hooks have no API reader, or run too late.
func AdoptedConfig(ctx context.Context, req HookRequest, want ExistingConfig) (Config, error) {
	key := client.ObjectKey{Namespace: req.TargetNamespace, Name: want.ConfigMap}
	ref := addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: key.Namespace, Name: key.Name}
	status := req.Addon.GetAddonStatus()
	adopted := slices.ContainsFunc(status.Adopted, func(a addonsv1alpha1.AdoptedObject) bool {
		return ssa.SameObject(a.ObjectReference, ref)
	})
	if !adopted && req.Addon.GetAddonSpec().Adopt != addonsv1alpha1.AdoptIfUnmanaged {
		// Nothing to take over: the package's file applies, and nothing is read.
		return Config{}, nil
	}
	cm := &corev1.ConfigMap{}
	cacheErr := req.Cache.Get(ctx, key, cm)
	switch {
	case cacheErr == nil && adopted:
		value, ok := cm.Annotations[AnnotationAdoptedConfig]
		if !ok {
			value = cm.Data[want.Key]
		}
		return Config{Value: value, Version: status.AppliedVersion}, nil
	case cacheErr == nil:
		// kaddons created it: the package's file applies.
		return Config{}, nil
	case !apierrors.IsNotFound(cacheErr):
		return Config{}, fmt.Errorf("reading %s: %w", ref, cacheErr)
	case adopted:
		// Adopted before, gone now: the package's file applies again.
		return Config{}, nil
	}
	if req.API == nil {
		return Config{}, fmt.Errorf("reading %s: the hook request has no API reader (only Default's has)", ref)
	}
	if err := req.API.Get(ctx, key, cm); apierrors.IsNotFound(err) {
		return Config{}, nil
	} else if err != nil {
		return Config{}, fmt.Errorf("reading %s: %w", ref, err)
	}
	if ssa.OwnerOf(cm.Labels) != "" {
		// Managed already (the cache lags, or another add-on owns it: apply says which).
		return Config{}, nil
	}
	version := ""
	deploy := &appsv1.Deployment{}
	if err := req.API.Get(ctx, client.ObjectKey{Namespace: req.TargetNamespace, Name: want.Deployment}, deploy); err == nil {
		for _, c := range deploy.Spec.Template.Spec.Containers {
			if c.Name == want.Container {
				version = ImageTag(c.Image)
			}
		}
	} else if !apierrors.IsNotFound(err) {
		return Config{}, fmt.Errorf("reading Deployment %s/%s: %w", req.TargetNamespace, want.Deployment, err)
	}
	return Config{Value: cm.Data[want.Key], Version: version, Adopting: true}, nil
}

// ImageTag returns the tag of image without a leading v, or "" when it has none:
// registry.k8s.io/coredns/coredns:v1.12.1 gives 1.12.1.
func ImageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon < 0 || colon < slash {
		return ""
	}
	return strings.TrimPrefix(image[colon+1:], "v")
}
