package engine

import (
	"context"
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch

// driftExclusions gathers the ssa.Exclusions of one add-on: spec.driftExclusions, the
// definition's own, and spec.replicas of every rendered Deployment or StatefulSet that a
// HorizontalPodAutoscaler targets (read from the cache). A malformed pointer, or a
// spec.driftExclusions target that matches no rendered object, is a spec error.
func (r *Reconciler) driftExclusions(ctx context.Context, st *reconcileState) (ssa.Exclusions, error) {
	out := ssa.Exclusions{}
	add := func(source string, list []addonsv1alpha1.DriftExclusion, strict bool) error {
		for i, ex := range list {
			matched := false
			for _, o := range st.rendered.objects.Items {
				ref := ssa.RefOf(o.UnstructuredObject())
				if !ex.Target.Matches(ref) {
					continue
				}
				matched = true
				for _, p := range ex.Paths {
					path, err := ssa.ParsePointer(p)
					if err != nil {
						return fmt.Errorf("%s[%d].paths: %w", source, i, err)
					}
					out[ref] = append(out[ref], path)
				}
			}
			if strict && !matched {
				return fmt.Errorf("%s[%d] targets %s %s, which the package does not contain", source, i, ex.Target.Kind, ex.Target.Name)
			}
		}
		return nil
	}
	if err := add("spec.driftExclusions", st.addon.GetAddonSpec().DriftExclusions, true); err != nil {
		return nil, err
	}
	if err := add("the definition's driftExclusions", r.def.DriftExclusions, false); err != nil {
		return nil, err
	}
	scaled, err := r.scaledWorkloads(ctx, st)
	if err != nil {
		return nil, err
	}
	for ref := range scaled {
		out[ref] = append(out[ref], []string{"spec", "replicas"})
	}
	return out, nil
}

// scaledWorkloads returns the rendered workloads a HorizontalPodAutoscaler targets.
func (r *Reconciler) scaledWorkloads(ctx context.Context, st *reconcileState) (map[addonsv1alpha1.ObjectReference]bool, error) {
	scaled := map[addonsv1alpha1.ObjectReference]bool{}
	namespaces := map[string]bool{}
	for _, o := range st.rendered.objects.Items {
		if o.Group == "apps" && (o.Kind == "Deployment" || o.Kind == "StatefulSet") {
			namespaces[o.GetNamespace()] = true
		}
	}
	for ns := range namespaces {
		hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
		if err := r.client.List(ctx, hpas, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing HorizontalPodAutoscalers in %s: %w", ns, err)
		}
		for _, h := range hpas.Items {
			target := h.Spec.ScaleTargetRef
			for _, o := range st.rendered.objects.Items {
				if o.Kind == target.Kind && o.GetName() == target.Name && o.GetNamespace() == h.Namespace &&
					strings.HasPrefix(target.APIVersion, "apps/") {
					scaled[ssa.RefOf(o.UnstructuredObject())] = true
				}
			}
		}
	}
	return scaled, nil
}
