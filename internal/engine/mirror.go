package engine

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// mirrorImages is the transform that points every container image of the rendered
// workloads at the settings' registry mirror.
func mirrorImages(_ context.Context, in RenderInput, objects *Objects) error {
	mirror := in.Settings.RegistryMirror
	if mirror == "" {
		return nil
	}
	for _, o := range objects.Items {
		if !hasPodTemplate(o) {
			continue
		}
		if err := o.MutateContainers(func(c map[string]any) error {
			image, ok := c["image"].(string)
			if !ok || image == "" {
				return fmt.Errorf("%s %s has a container without an image", o.Kind, o.GetName())
			}
			c["image"] = MirrorImage(image, mirror)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// hasPodTemplate reports whether o holds containers: a Pod, a CronJob or an object with a
// pod template (Deployment, DaemonSet, StatefulSet, Job, ...).
func hasPodTemplate(o *Object) bool {
	u := o.UnstructuredObject().Object
	const spec = "spec"
	for _, podSpec := range [][]string{
		{spec},
		{spec, "template", spec},
		{spec, "jobTemplate", spec, "template", spec},
	} {
		if _, found, _ := unstructured.NestedSlice(u, append(podSpec, "containers")...); found {
			return true
		}
	}
	return false
}

// MirrorImage replaces the registry of image with mirror. An image without a registry
// (kubernetesui/dashboard:v2.7.0) is a Docker Hub image and keeps its whole path.
func MirrorImage(image, mirror string) string {
	mirror = strings.TrimSuffix(mirror, "/")
	path := image
	if first, rest, ok := strings.Cut(image, "/"); ok &&
		(strings.ContainsAny(first, ".:") || first == "localhost") {
		path = rest
	}
	return mirror + "/" + path
}
