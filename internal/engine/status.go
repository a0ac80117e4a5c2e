package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
)

// JSON patch operations: add (or replace) a value, and test one.
const (
	opAdd  = "add"
	opTest = "test"
)

// patchOp is one RFC 6902 JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patchStatus is the one place that writes an add-on's status. It writes only when the
// status differs from original, and replaces the whole status with a JSON patch: a merge
// patch could not remove fields that became empty, and a diff would leave out KDP's
// required status.healthy while it is false.
func (r *Reconciler) patchStatus(ctx context.Context, original, obj addonsv1alpha1.Addon) error {
	syncReady(obj)
	if equality.Semantic.DeepEqual(original.GetAddonStatus(), obj.GetAddonStatus()) {
		return nil
	}
	// The base is the resource version the status is written over: the write-ahead
	// patch may have moved it past original's.
	key, base := client.ObjectKeyFromObject(obj), obj.GetResourceVersion()
	body, err := json.Marshal([]patchOp{{Op: opAdd, Path: "/status", Value: obj.GetAddonStatus()}})
	if err != nil {
		return err
	}
	if err := r.client.Status().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body)); err != nil {
		return fmt.Errorf("writing status: %w", client.IgnoreNotFound(err))
	}
	r.written.store(key, writtenStatus{uid: obj.GetUID(), baseResourceVersion: base, status: obj.GetAddonStatus().DeepCopy()})
	return nil
}

// syncReady sets status.ready, for tools that read a field rather than conditions: true
// only when the Ready condition is True for the add-on's current generation.
func syncReady(obj addonsv1alpha1.Addon) {
	status := obj.GetAddonStatus()
	c := meta.FindStatusCondition(status.Conditions, addonsv1alpha1.ConditionReady)
	status.Ready = c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration()
}

// recordApplied records in status that version was applied for generation.
func recordApplied(status *addonsv1alpha1.AddonStatus, generation int64, version string, now time.Time) {
	if status.AppliedVersion != version || status.ObservedGeneration != generation || status.LastAppliedTime == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		status.LastAppliedTime = &t
	}
	status.AppliedVersion = version
	trackUpgrade(status, version, now)
}

// recordAdopted adds the objects an apply took over to status.adopted.
func recordAdopted(status *addonsv1alpha1.AddonStatus, adopted []addonsv1alpha1.AdoptedObject) {
	for _, a := range adopted {
		if !slices.ContainsFunc(status.Adopted, func(o addonsv1alpha1.AdoptedObject) bool { return ssa.SameObject(o.ObjectReference, a.ObjectReference) }) {
			status.Adopted = append(status.Adopted, a)
		}
	}
}

// specHash digests addon's spec without spec.suspend, the one field that pausing changes.
func specHash(addon addonsv1alpha1.Addon) string {
	data, err := json.Marshal(addon)
	if err != nil {
		return ""
	}
	var obj struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return ""
	}
	delete(obj.Spec, "suspend")
	spec, err := json.Marshal(obj.Spec)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(spec)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// patchMetadata applies JSON patch ops to obj, keeps its kind, and remembers the write
// so that its watch event costs no reconcile (echoes).
func (r *Reconciler) patchMetadata(ctx context.Context, obj addonsv1alpha1.Addon, ops []patchOp) error {
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	r.echoes.Begin(r.gvk.GroupKind(), obj)
	err = r.client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body))
	r.echoes.End(r.gvk.GroupKind(), obj, err)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	return nil
}
