package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine/ssa"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The write-ahead record (annotation addons.kaddons.dev/inventory-record) lists the
// objects an apply is about to create beyond status.inventory. It is written on the
// add-on itself, before the first write of an apply that adds objects: for a new add-on in
// the same JSON patch that adds the finalizer (so creating an add-on costs no request
// more), for a later change that adds objects in one patch of its own. status can not
// carry it: it is a subresource, and the finalizer patch can not write it. Once an apply
// has written every object and the status patch recorded the inventory,
// status.inventoryRecord holds the record's id and the record is ignored; until then its
// objects count as inventory for prune and delete, so an apply interrupted at any point
// (a crash, a failed status patch) leaves nothing that kaddons will not prune or delete.

// recordPlainLimit is the size up to which the record stays readable JSON; a bigger
// record is gzipped and base64-encoded behind recordGzipPrefix.
const recordPlainLimit = 16 << 10

// maxRecordBytes caps the encoded record: the API server allows 256 KiB of annotations
// in all, and the user's own annotations need room too.
const maxRecordBytes = 192 << 10

// maxRecordDecoded caps what a compressed record may expand to when read.
const maxRecordDecoded = 4 << 20

// recordGzipPrefix marks a compressed record.
const recordGzipPrefix = "gzip:"

// inventoryRecord is the content of the write-ahead annotation.
type inventoryRecord struct {
	// ID identifies this record: the add-on's resource version it was written over.
	ID string `json:"id"`
	// Objects are the objects that may exist beyond status.inventory.
	Objects addonsv1alpha1.Inventory `json:"objects"`
}

// encodeRecord returns the annotation value of rec, or an *inventoryTooLargeError when
// even compressed it does not fit.
func encodeRecord(rec inventoryRecord) (string, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if len(data) <= recordPlainLimit {
		return string(data), nil
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(data); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	value := recordGzipPrefix + base64.StdEncoding.EncodeToString(buf.Bytes())
	if len(value) > maxRecordBytes {
		return "", &inventoryTooLargeError{what: fmt.Sprintf("the write-ahead record of %d objects takes %d bytes compressed, over its cap of %d",
			rec.Objects.Len(), len(value), maxRecordBytes)}
	}
	return value, nil
}

// decodeRecord parses an annotation value written by encodeRecord.
func decodeRecord(value string) (inventoryRecord, error) {
	var rec inventoryRecord
	data := []byte(value)
	if rest, ok := strings.CutPrefix(value, recordGzipPrefix); ok {
		compressed, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return rec, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(compressed))
		if err != nil {
			return rec, err
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxRecordDecoded+1))
		if err != nil {
			return rec, err
		}
		if len(data) > maxRecordDecoded {
			return rec, fmt.Errorf("it expands to more than %d bytes", maxRecordDecoded)
		}
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, err
	}
	if rec.ID == "" {
		return rec, errors.New("it has no id")
	}
	return rec, nil
}

// pendingObjects returns the objects addon's write-ahead record lists beyond its
// inventory, and the record's id, while status.inventoryRecord does not show that an
// apply covered the record. A record that cannot be read (only a person editing the
// annotation makes one) is logged and ignored.
func pendingObjects(ctx context.Context, addon addonsv1alpha1.Addon) ([]addonsv1alpha1.ObjectReference, string) {
	value, ok := addon.GetAnnotations()[addonsv1alpha1.AnnotationInventoryRecord]
	if !ok {
		return nil, ""
	}
	rec, err := decodeRecord(value)
	if err != nil {
		log.FromContext(ctx).Error(err, "Ignoring the unreadable write-ahead record", "annotation", addonsv1alpha1.AnnotationInventoryRecord)
		return nil, ""
	}
	status := addon.GetAddonStatus()
	if rec.ID == status.InventoryRecord {
		return nil, ""
	}
	return ssa.StaleObjects(rec.Objects.Objects(), status.Inventory.Objects()), rec.ID
}

// InventoryObjects returns every object kaddons may have created for addon, as prune and
// delete see them: status.inventory plus the objects of a write-ahead record the
// inventory does not cover yet.
func InventoryObjects(ctx context.Context, addon addonsv1alpha1.Addon) []addonsv1alpha1.ObjectReference {
	pending, _ := pendingObjects(ctx, addon)
	return ssa.UnionObjects(addon.GetAddonStatus().Inventory.Objects(), pending)
}

// checkInventorySize fails closed, before anything is applied, on a rendered set the
// inventory cannot hold.
func checkInventorySize(refs []addonsv1alpha1.ObjectReference) error {
	if len(refs) > addonsv1alpha1.MaxInventoryObjects {
		return &inventoryTooLargeError{what: fmt.Sprintf("the package renders %d objects; an add-on's inventory holds at most %d",
			len(refs), addonsv1alpha1.MaxInventoryObjects)}
	}
	if size := addonsv1alpha1.NewInventory(refs).EncodedSize(); size > addonsv1alpha1.MaxInventoryBytes {
		return &inventoryTooLargeError{what: fmt.Sprintf("the inventory of the package's %d objects takes %d bytes; it may take at most %d",
			len(refs), size, addonsv1alpha1.MaxInventoryBytes)}
	}
	return nil
}

// inventoryTooLargeError reports a rendered set that the inventory or the write-ahead
// record cannot hold; nothing was applied.
type inventoryTooLargeError struct{ what string }

func (e *inventoryTooLargeError) Error() string {
	return e.what + "; nothing was applied. Split the package into several add-ons"
}

// writeAhead runs right before an apply's first write, with the objects the apply will
// inventory. A set the inventory cannot hold is refused there, with nothing written. When some of them are neither in the inventory nor in the pending record,
// it writes a new record listing them and the pending ones, in one JSON patch that also
// adds the finalizer when it is missing and tests the resource version, so it never
// writes over a record it has not read. Otherwise it writes nothing (or the finalizer
// alone). The add-on's metadata in st follows the patch; its status is left as the
// phases made it.
func (r *Reconciler) writeAhead(ctx context.Context, st *reconcileState, desired []addonsv1alpha1.ObjectReference) error {
	if err := checkInventorySize(desired); err != nil {
		return err
	}
	obj := st.addon
	known := obj.GetAddonStatus().Inventory.Objects()
	additions := ssa.StaleObjects(desired, ssa.UnionObjects(known, st.pending))
	ops := []patchOp{{Op: opTest, Path: "/metadata/resourceVersion", Value: obj.GetResourceVersion()}}
	if !controllerutil.ContainsFinalizer(obj, Finalizer) {
		ops = append(ops, addFinalizerOp(obj))
	}
	if len(additions) == 0 && len(ops) == 1 {
		return nil
	}
	var rec inventoryRecord
	if len(additions) > 0 {
		rec = inventoryRecord{ID: obj.GetResourceVersion(), Objects: addonsv1alpha1.NewInventory(ssa.UnionObjects(st.pending, additions))}
		value, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		if obj.GetAnnotations() == nil {
			ops = append(ops, patchOp{Op: opAdd, Path: "/metadata/annotations", Value: map[string]string{addonsv1alpha1.AnnotationInventoryRecord: value}})
		} else {
			ops = append(ops, patchOp{Op: opAdd, Path: "/metadata/annotations/" + jsonPointerEscape(addonsv1alpha1.AnnotationInventoryRecord), Value: value})
		}
	}
	patched := obj.DeepCopyObject().(addonsv1alpha1.Addon)
	if err := r.patchMetadata(ctx, patched, ops); err != nil {
		return fmt.Errorf("recording the objects about to be created: %w", err)
	}
	obj.SetResourceVersion(patched.GetResourceVersion())
	obj.SetFinalizers(patched.GetFinalizers())
	obj.SetAnnotations(patched.GetAnnotations())
	if rec.ID != "" {
		st.pending, st.record = rec.Objects.Objects(), rec.ID
	}
	return nil
}

// jsonPointerEscape escapes one JSON pointer (RFC 6901) token.
func jsonPointerEscape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}
