package engine

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Event reasons the engine records on add-ons.
const (
	// EventUpgraded is recorded when the applied version changes.
	EventUpgraded = "Upgraded"
	// EventPruned is recorded when objects that left the manifests are deleted.
	EventPruned = "Pruned"
	// EventReady is recorded when the add-on becomes Ready.
	EventReady = "Ready"
	// EventRecreated is recorded when objects were re-created to change immutable fields.
	EventRecreated = "Recreated"
	// EventDriftCorrected is recorded when kaddons re-applied children that drifted.
	EventDriftCorrected = "DriftCorrected"
	// EventPaused is recorded when reconciliation is suspended.
	EventPaused = "Paused"
	// EventAdopted is recorded when kaddons takes over objects it did not create.
	EventAdopted = "Adopted"
)

// recordEvents records an event for each transition between the status before and after
// a reconcile. Only transitions are recorded, so a failure that repeats on every retry
// produces one event, not a flood.
//
// The first apply of a new add-on records none of its own: the add-on's creation is its
// author's act, status.appliedVersion and lastAppliedTime record it, and the Ready event
// ("coredns 1.12.1 is ready") or a Warning marks how the install ended. That keeps a new
// add-on at one write per object plus its finalizer and status.
func (r *Reconciler) recordEvents(ctx context.Context, before, after addonsv1alpha1.Addon, st *reconcileState) {
	logChanges(ctx, before, after, st)
	oldStatus, newStatus := before.GetAddonStatus(), after.GetAddonStatus()
	if oldStatus.AppliedVersion != "" && newStatus.AppliedVersion != oldStatus.AppliedVersion {
		r.event(after, corev1.EventTypeNormal, EventUpgraded, "Apply", "Changed %s from %s to %s",
			st.resolved.Addon, oldStatus.AppliedVersion, newStatus.AppliedVersion)
	}
	for _, list := range []struct {
		refs                 []addonsv1alpha1.ObjectReference
		reason, action, note string
	}{
		{st.applied.Pruned, EventPruned, "Prune", "Deleted objects that left the manifests"},
		{st.applied.Recreated, EventRecreated, "Apply", "Deleted and re-created to change immutable fields"},
		{st.applied.Drifted, EventDriftCorrected, "Apply", "Restored objects that drifted from the manifests"},
	} {
		if len(list.refs) == 0 {
			continue
		}
		names := make([]string, 0, len(list.refs))
		for _, ref := range list.refs {
			names = append(names, ref.String())
		}
		r.event(after, corev1.EventTypeNormal, list.reason, list.action, "%s: %s", list.note, strings.Join(names, ", "))
	}

	if len(st.applied.Adopted) > 0 {
		names := make([]string, 0, len(st.applied.Adopted))
		for _, a := range st.applied.Adopted {
			from := strings.Join(a.FieldManagers, ", ")
			if from == "" {
				from = "no field managers"
			}
			names = append(names, fmt.Sprintf("%s (from %s)", a.String(), from))
		}
		r.event(after, corev1.EventTypeNormal, EventAdopted, "Adopt", "Took over objects kaddons did not create: %s",
			strings.Join(names, "; "))
	}

	oldReady := meta.FindStatusCondition(oldStatus.Conditions, addonsv1alpha1.ConditionReady)
	newReady := meta.FindStatusCondition(newStatus.Conditions, addonsv1alpha1.ConditionReady)
	if newReady == nil || (oldReady != nil && oldReady.Status == newReady.Status && oldReady.Reason == newReady.Reason) {
		return
	}
	switch {
	case newReady.Reason == addonsv1alpha1.ReasonPaused:
		r.event(after, corev1.EventTypeNormal, EventPaused, "Reconcile", "%s", newReady.Message)
	case newReady.Status == "True":
		r.event(after, corev1.EventTypeNormal, EventReady, "Reconcile", "%s", newReady.Message)
	case meta.IsStatusConditionTrue(newStatus.Conditions, addonsv1alpha1.ConditionStalled),
		meta.IsStatusConditionTrue(newStatus.Conditions, addonsv1alpha1.ConditionDegraded):
		r.event(after, corev1.EventTypeWarning, newReady.Reason, "Reconcile", "%s", newReady.Message)
	}
}

// logChangedMessage is the message of the line a reconcile that changed something logs.
const logChangedMessage = "Changed the add-on"

// maxLoggedObjects bounds how many objects of each list the line names; the rest are
// counted.
const maxLoggedObjects = 20

// logChanges logs one Info line when the reconcile changed something, saying what:
// the objects it wrote and the version they belong to, the version it upgraded from (or
// rolled back from), what it pruned, re-created, restored from drift or adopted, and the
// version a failed upgrade rolls back to. A reconcile that changed nothing logs nothing.
// The line goes to the reconcile's logger (ctx), with its controller, add-on and
// reconcileID keys.
func logChanges(ctx context.Context, before, after addonsv1alpha1.Addon, st *reconcileState) {
	kv := changes(before, after, st)
	if len(kv) == 0 {
		return
	}
	log.FromContext(ctx).Info(logChangedMessage, kv...)
}

// changes returns the key and value pairs of the change log line; none when the
// reconcile changed nothing.
func changes(before, after addonsv1alpha1.Addon, st *reconcileState) []any {
	var kv []any
	if n := len(st.applied.Applied); n > 0 {
		kv = append(kv, "applied", n)
	}
	oldVersion, newVersion := before.GetAddonStatus().AppliedVersion, after.GetAddonStatus().AppliedVersion
	switch {
	case oldVersion == "" || oldVersion == newVersion:
	case st.wanted != "":
		// resolve pinned the last healthy version: this is the rollback's apply.
		kv = append(kv, "rolledBackFrom", oldVersion)
	default:
		kv = append(kv, "upgradedFrom", oldVersion)
	}
	for _, list := range []struct {
		key  string
		refs []addonsv1alpha1.ObjectReference
	}{
		{"pruned", st.applied.Pruned},
		{"recreated", st.applied.Recreated},
		{"driftCorrected", st.applied.Drifted},
		{"adopted", adoptedRefs(st.applied.Adopted)},
	} {
		if len(list.refs) > 0 {
			kv = append(kv, list.key, loggedRefs(list.refs))
		}
	}
	if failed, to, ok := rollbackStarted(before, after); ok {
		kv = append(kv, "upgradeFailed", failed, "rollingBackTo", to)
	}
	if len(kv) == 0 {
		return nil
	}
	// The version the written objects belong to: a partial apply leaves
	// status.appliedVersion at the version applied in full before.
	version := st.resolved.Version
	if version == "" {
		version = newVersion
	}
	return append([]any{"version", version}, kv...)
}

// adoptedRefs returns the references of adopted objects.
func adoptedRefs(adopted []addonsv1alpha1.AdoptedObject) []addonsv1alpha1.ObjectReference {
	refs := make([]addonsv1alpha1.ObjectReference, 0, len(adopted))
	for _, a := range adopted {
		refs = append(refs, a.ObjectReference)
	}
	return refs
}

// loggedRefs names the first maxLoggedObjects objects of refs and counts the rest.
func loggedRefs(refs []addonsv1alpha1.ObjectReference) []string {
	names := make([]string, 0, min(len(refs), maxLoggedObjects+1))
	for i, ref := range refs {
		if i == maxLoggedObjects {
			names = append(names, fmt.Sprintf("and %d more", len(refs)-i))
			break
		}
		names = append(names, ref.String())
	}
	return names
}

// event records one event on the add-on.
func (r *Reconciler) event(obj addonsv1alpha1.Addon, eventType, reason, action, format string, args ...any) {
	r.recorder.Eventf(obj, nil, eventType, reason, action, "%s", eventNote(fmt.Sprintf(format, args...)))
}

// maxEventNote is the longest note the API server accepts on an event; it rejects the
// whole event beyond it.
const maxEventNote = 1024

// truncatedSuffix ends a note cut to maxEventNote. The add-on's status has the whole
// message (and status.adopted every adopted object).
const truncatedSuffix = " ... (cut; the add-on's status has all of it)"

// eventNote returns message cut to what an event may hold, at a character boundary, so
// that a long list of objects loses its tail rather than the whole event.
func eventNote(message string) string {
	if len(message) <= maxEventNote {
		return message
	}
	cut := maxEventNote - len(truncatedSuffix)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + truncatedSuffix
}
