package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"
)

// This file is the one adapter between the engine and KDP (kubebuilder-declarative-
// pattern): the rendered-object types, manifest parsing, the default object order and the
// patch list of KDP's common add-on types. Replacing a KDP piece touches only this file.

// Objects is a rendered package: KDP's manifest object list.
type Objects = manifest.Objects

// Object is one rendered object: KDP's manifest object, with helpers to edit nested
// fields, containers and pod specs.
type Object = manifest.Object

// parseObjects parses a YAML stream into rendered objects.
func parseObjects(ctx context.Context, yaml string) (*Objects, error) {
	return manifest.ParseObjects(ctx, yaml)
}

// newObject wraps u as a rendered object.
func newObject(u *unstructured.Unstructured) (*Object, error) {
	return manifest.NewObject(u)
}

// sortObjects puts objects in KDP's default order (namespaces and CRDs first, then
// configuration, then workloads), the order the golden files and kubectl show.
func sortObjects(ctx context.Context, objects *Objects) {
	objects.Sort(declarative.DefaultObjectOrder(ctx))
}

// patchesOf returns the add-on's spec.patches, or nil for a kind without them.
func patchesOf(addon any) []*runtime.RawExtension {
	if p, ok := addon.(addonv1alpha1.Patchable); ok {
		return p.PatchSpec().Patches
	}
	return nil
}
