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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		if apierrors.IsNotFound(err) {
			// The add-on is gone: it has no status left to write.
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
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

// recordApply records in the status what the apply phase did: the inventory the apply
// left (after a failed one too: it keeps every object that may exist), the write-ahead
// record it covers, the objects it took over (those of a failed apply too, or of one
// that stopped at a wave that waits: the next apply finds them the add-on's own), and,
// when nothing failed, the applied version, generation, source and spec hash. err is the
// apply's error; nil with nothing applied (plan found nothing to write) records only the
// spec hash and the source.
func recordApply(st *reconcileState, err error, now time.Time) {
	status := st.addon.GetAddonStatus()
	res := st.applied
	recordAdopted(status, res.Adopted)
	if err == nil {
		if res.Applied != nil {
			recordApplied(status, st.addon.GetGeneration(), st.resolved.Version, now)
		}
		recordSource(status, st.artifact)
		status.AppliedSpecHash = specHash(st.stored())
	}
	if res.Applied != nil && (err == nil || errorIs[*ssa.PruneError](err)) && st.record != "" {
		// Every object was written and whatever left the set was pruned or kept in the
		// inventory: the inventory covers the write-ahead record now.
		status.InventoryRecord = st.record
	}
	if res.Inventory != nil {
		status.Inventory = addonsv1alpha1.NewInventory(res.Inventory)
	}
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

// recordSource records in status the source whose manifests were just applied (or found
// already in place): nil for the built-in packages.
func recordSource(status *addonsv1alpha1.AddonStatus, src SourceArtifact) {
	if src.Name == "" {
		status.Source = nil
		return
	}
	status.Source = &addonsv1alpha1.AppliedSource{Name: src.Name, Revision: src.Revision, Digest: src.Digest}
}

// trackUpgrade records when a version that is not yet known to be healthy was first
// applied, so the health phase can tell when its upgrade timeout runs out.
func trackUpgrade(status *addonsv1alpha1.AddonStatus, version string, now time.Time) {
	if version == status.LastHealthyVersion {
		if status.Upgrade != nil {
			status.Upgrade.Version, status.Upgrade.StartedAt = "", nil
			if status.Upgrade.FailedVersion == "" {
				status.Upgrade = nil
			}
		}
		return
	}
	if status.Upgrade == nil {
		status.Upgrade = &addonsv1alpha1.UpgradeStatus{}
	}
	if status.Upgrade.Version != version || status.Upgrade.StartedAt == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		status.Upgrade.Version, status.Upgrade.StartedAt = version, &t
	}
}
