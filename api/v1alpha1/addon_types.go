package v1alpha1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"
)

// Addon is the contract between an add-on type and the shared engine. Every add-on kind
// implements it, so the engine never needs to know which add-on it reconciles.
// +kubebuilder:object:generate=false
type Addon interface {
	addonv1alpha1.CommonObject
	addonv1alpha1.Patchable

	// GetAddonSpec returns the lifecycle settings shared by every add-on.
	GetAddonSpec() *AddonSpec
	// GetAddonStatus returns the add-on's status for the engine to fill in.
	GetAddonStatus() *AddonStatus
}

// Annotations users put on add-ons and on their children.
const (
	// AnnotationPaused set to "true" on an add-on stops all applying and pruning for it.
	AnnotationPaused = "addons.kaddons.dev/paused"
	// AnnotationRequestedAt on an add-on asks for a full reconcile now, as Flux's
	// reconcile.fluxcd.io/requestedAt does: when its value (any string, by convention a
	// time) differs from status.lastHandledReconcileAt, every rendered object is applied,
	// drifted or not, and the value is copied to status.lastHandledReconcileAt.
	// `kubectl kaddons reconcile` sets it and waits for the copy.
	AnnotationRequestedAt = "addons.kaddons.dev/requested-at"
	// AnnotationMode on a child changes how kaddons manages it: ensure-exists creates it
	// when missing but never overwrites it; ignore leaves it alone entirely.
	AnnotationMode = "addons.kaddons.dev/mode"
	// AnnotationWave on an object of a package names the apply wave it belongs to;
	// objects without it are in the wave "default".
	AnnotationWave = "addons.kaddons.dev/wave"
	// AnnotationWaveAfter on an object of a package lists, comma-separated, the waves
	// that must be healthy (kstatus Current) before its wave is applied. The waves must
	// form a DAG.
	AnnotationWaveAfter = "addons.kaddons.dev/wave-after"
	// AnnotationRecreate on an object of a package set to RecreateOnImmutable lets kaddons
	// delete and create it again when a new version changes its immutable fields, as
	// spec.upgrade.recreateOnImmutable does for every object of the add-on. The Helm
	// chart renderer sets it on hook objects (a migration Job's template changes with its
	// image), as Helm's before-hook-creation deletes a hook before creating it again.
	AnnotationRecreate = "addons.kaddons.dev/recreate"
	// RecreateOnImmutable is the value of AnnotationRecreate.
	RecreateOnImmutable = "on-immutable-change"
	// ModeEnsureExists is the ensure-exists value of AnnotationMode.
	ModeEnsureExists = "ensure-exists"
	// ModeIgnore is the ignore value of AnnotationMode.
	ModeIgnore = "ignore"
	// AnnotationInventoryRecord is kaddons' write-ahead record on an add-on: the objects
	// it is about to create beyond status.inventory, written before it creates them (in
	// the same patch that adds the finalizer to a new add-on). Not for users to set.
	AnnotationInventoryRecord = "addons.kaddons.dev/inventory-record"
)

// AddonStatus is the status shared by every add-on kind.
type AddonStatus struct {
	addonv1alpha1.CommonStatus `json:",inline"`

	// conditions describe the add-on's state: Ready is the summary, Progressing,
	// Degraded and Stalled say why.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ready is true when the Ready condition is True for the add-on's current generation,
	// for tools that gate on a field rather than on conditions.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// appliedSpecHash is a digest of the spec (spec.suspend left out) that was last
	// applied: a paused add-on compares it with its spec to tell whether a change is
	// waiting, and keeps observedGeneration behind while one is.
	// +kubebuilder:validation:MaxLength=80
	// +optional
	AppliedSpecHash string `json:"appliedSpecHash,omitempty"`

	// appliedVersion is the package version whose manifests were last applied in full.
	// +optional
	AppliedVersion string `json:"appliedVersion,omitempty"`

	// source is where the applied manifests came from: the AddonSource, its revision and
	// its digest. Unset for the packages built into the operator.
	// +optional
	Source *AppliedSource `json:"source,omitempty"`

	// lastHandledReconcileAt is the value of the addons.kaddons.dev/requested-at
	// annotation that the last reconcile handled.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// availableVersion is a newer version the add-on's channel offers that it does not
	// move to by itself: one that waits for approval (spec.upgrade.approval: Manual) or
	// lies outside spec.upgrade.policy. Empty when the add-on runs the version it should.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	AvailableVersion string `json:"availableVersion,omitempty"`

	// lastHealthyVersion is the last version that was applied and Ready; a failed
	// upgrade rolls back to it.
	// +optional
	LastHealthyVersion string `json:"lastHealthyVersion,omitempty"`

	// upgrade tracks a version change in progress, and the last one that failed.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// lastAppliedTime is when the manifests were last applied in full.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`

	// adopted lists the objects kaddons took over with spec.adopt: IfUnmanaged, and who
	// managed them before.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Adopted []AdoptedObject `json:"adopted,omitempty"`

	// inventory lists every object kaddons applied for this add-on, grouped by API group,
	// version, kind and namespace. Objects that leave the rendered manifests are pruned
	// from it; deleting the add-on deletes all of them. It holds at most 10000 objects in
	// at most 768 KiB of JSON, which keeps the add-on well under etcd's request limit;
	// kaddons checks both before applying.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	Inventory Inventory `json:"inventory,omitempty"`

	// inventoryRecord is the id of the last write-ahead record (the
	// addons.kaddons.dev/inventory-record annotation) that inventory covers. A record
	// with another id lists objects that an interrupted apply may have created beyond
	// the inventory: kaddons prunes and deletes them as inventory entries.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	InventoryRecord string `json:"inventoryRecord,omitempty"`
}

// InventoryEntry lists the objects of one API group, version, kind and namespace.
type InventoryEntry struct {
	// group is the API group of the objects; empty for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// version is the API version the objects were applied with.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Version string `json:"version"`
	// kind is the objects' kind.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// namespace is the objects' namespace; empty for cluster-scoped objects.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// names are the objects' names, in the order they were applied.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Names []string `json:"names,omitempty"`
	// name is one object's name, as inventories written by kaddons before names existed
	// list it. kaddons reads it and writes names instead.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// ObjectReference identifies one object that kaddons applied.
type ObjectReference struct {
	// group is the API group of the object; empty for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// version is the API version the object was applied with.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Version string `json:"version"`
	// kind is the object's kind.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// namespace is the object's namespace; empty for cluster-scoped objects.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name is the object's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// GroupVersionKind returns the object's group, version and kind.
func (r ObjectReference) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// String formats the reference as Kind namespace/name, the form used in messages.
func (r ObjectReference) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// AddonSpec holds the lifecycle settings every add-on kind shares.
type AddonSpec struct {
	// sourceRef names the AddonSource (cluster-scoped) whose packages this add-on uses.
	// Empty means the packages built into the operator. An AddonPolicy may restrict which
	// sources the add-ons of a namespace may name.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SourceRef string `json:"sourceRef,omitempty"`

	// targetNamespace is the namespace the add-on's namespaced objects are installed in.
	// Defaults to the add-on kind's own namespace where it has one (the Dashboard's
	// kubernetes-dashboard), otherwise to the namespace of this resource. A namespace that
	// kaddons creates for the add-on is deleted with it; one that existed before is never
	// adopted or deleted.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// serviceAccountName is a ServiceAccount in this resource's namespace that kaddons
	// impersonates to apply, prune and delete the add-on's objects, so the API server's
	// RBAC decides what the add-on may touch, as for its author. Add-ons in namespaces the
	// operator does not trust (runtime.tenancy.trustedNamespaces: kube-system and the
	// operator's namespace unless configured) are always applied as a ServiceAccount:
	// this one, else the configuration's defaultServiceAccountName; with neither they are
	// refused. In a trusted namespace an unset name means the operator's own identity.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// suspend stops all applying and pruning for this add-on while true, like the
	// addons.kaddons.dev/paused annotation. What runs keeps running.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// upgrade controls health-gated upgrades.
	// +optional
	Upgrade *UpgradeSpec `json:"upgrade,omitempty"`

	// dependsOn lists add-ons that must be Ready before this one is applied.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	DependsOn []AddonReference `json:"dependsOn,omitempty"`

	// deletionPolicy says what happens to the children when the add-on is deleted:
	// Delete removes them; Orphan leaves them running and removes only kaddons' labels,
	// owner references and finalizer, to hand the add-on to another tool.
	// +kubebuilder:validation:Enum=Delete;Orphan
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// adopt says what happens to an object the package renders that already exists and
	// that kaddons did not create (kubeadm's CoreDNS, another tool's metrics-server).
	// Never, the default, leaves every such object exactly as it is, applies nothing and
	// reports AdoptionRequired naming them. IfUnmanaged takes them over: kaddons' labels,
	// the inventory, and the fields the package sets; from then on deletionPolicy applies
	// to them as to objects kaddons created. Objects another add-on owns are never taken.
	// +kubebuilder:validation:Enum=Never;IfUnmanaged
	// +optional
	Adopt AdoptionPolicy `json:"adopt,omitempty"`

	// driftExclusions leave fields of rendered objects to other controllers or to people:
	// each field is set when kaddons creates the object, then released. kaddons no longer
	// applies it, and changes to it are not drift. kaddons adds its own: spec.replicas of
	// a Deployment that a HorizontalPodAutoscaler targets, and data the add-on fills in
	// at run time (the Dashboard's CSRF Secret).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	DriftExclusions []DriftExclusion `json:"driftExclusions,omitempty"`
}

// AdoptionPolicy says whether kaddons takes over existing objects it did not create.
type AdoptionPolicy string

const (
	// AdoptNever leaves existing objects alone and reports them (the default).
	AdoptNever AdoptionPolicy = "Never"
	// AdoptIfUnmanaged takes over existing objects that no add-on owns.
	AdoptIfUnmanaged AdoptionPolicy = "IfUnmanaged"
)

// DriftExclusion names fields of one rendered object that kaddons sets only on creation.
type DriftExclusion struct {
	// target is the rendered object, by kind and name (and group and namespace, when
	// the kind or name alone is ambiguous).
	// +required
	Target ObjectSelector `json:"target"`
	// paths are JSON pointers (RFC 6901) to the fields, such as /spec/replicas or
	// /data. A field under /metadata other than labels and annotations cannot be excluded.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^(/([^/~]|~[01])*)+$`
	// +kubebuilder:validation:items:MaxLength=256
	// +required
	Paths []string `json:"paths"`
}

// ObjectSelector picks rendered objects.
type ObjectSelector struct {
	// group is the object's API group; empty matches any group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// kind is the object's kind, e.g. Deployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// name is the object's rendered name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// namespace is the object's rendered namespace; empty matches any.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Matches reports whether the selector picks the object ref.
func (s ObjectSelector) Matches(ref ObjectReference) bool {
	return s.Kind == ref.Kind && s.Name == ref.Name && (s.Group == "" || s.Group == ref.Group) &&
		(s.Namespace == "" || s.Namespace == ref.Namespace)
}

// AdoptedObject records one object kaddons took over.
type AdoptedObject struct {
	ObjectReference `json:",inline"`
	// fieldManagers are the field managers that owned fields of the object when kaddons
	// adopted it, such as kubeadm or kubectl-client-side-apply.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	FieldManagers []string `json:"fieldManagers,omitempty"`
	// adoptedAt is when kaddons took it over.
	// +optional
	AdoptedAt *metav1.Time `json:"adoptedAt,omitempty"`
}

// DeletionPolicy says what deleting an add-on does to its children.
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes every child with the add-on.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyOrphan leaves the children running, unlabelled and unowned.
	DeletionPolicyOrphan DeletionPolicy = "Orphan"
)

// UpgradeSpec controls health-gated upgrades.
type UpgradeSpec struct {
	// timeout is how long a new version may take to become Ready before the upgrade
	// counts as failed. Defaults to 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="timeout must be a duration between 1s and 24h, such as 10m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// rollback re-applies the last healthy version when an upgrade fails. Defaults to true.
	// +optional
	Rollback *bool `json:"rollback,omitempty"`

	// recreateOnImmutable deletes and re-creates an object whose new manifest changes a
	// field the API server does not allow to change (a Deployment's selector, a
	// Service's clusterIP). Without it such a change is reported and nothing is deleted.
	// +optional
	RecreateOnImmutable bool `json:"recreateOnImmutable,omitempty"`

	// policy says which newer versions an add-on that follows a channel moves to by
	// itself: Latest (the default) the newest version the channel lists that supports the
	// cluster; SameMinor only newer patch versions of the minor it runs (a newer minor is
	// shown in status.availableVersion and waits for the spec to name it). A pinned
	// spec.version is never moved.
	// +kubebuilder:validation:Enum=Latest;SameMinor
	// +optional
	Policy UpgradePolicy `json:"policy,omitempty"`

	// approval is Automatic (the default) or Manual. Under Manual, a channel-following
	// add-on stays on the version it runs; a newer one is shown in status.availableVersion
	// (reason UpgradeAwaitingApproval) until approvedVersion names it, as OLM's install
	// plans wait for approval.
	// +kubebuilder:validation:Enum=Automatic;Manual
	// +optional
	Approval UpgradeApproval `json:"approval,omitempty"`

	// approvedVersion approves the move to this version under approval: Manual. It is
	// usually copied from status.availableVersion.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ApprovedVersion string `json:"approvedVersion,omitempty"`

	// allowDowngrade lets the add-on move to an older version than the one it runs,
	// whether the spec pins it or the channel moves back. Without it a pinned downgrade is
	// refused (Stalled, DowngradeRefused) and a channel-following add-on stays where it is.
	// A rollback after a failed upgrade is not a downgrade the user asked for, and needs
	// no permission.
	// +optional
	AllowDowngrade bool `json:"allowDowngrade,omitempty"`

	// ignoreKubernetesVersion applies a pinned version whose package does not declare
	// support for the running Kubernetes version. Without it such a version is refused
	// (Stalled, KubernetesVersionUnsupported).
	// +optional
	IgnoreKubernetesVersion bool `json:"ignoreKubernetesVersion,omitempty"`

	// allowCRDVersionRemoval applies a CustomResourceDefinition that stops serving a
	// version while objects of it exist. Without it such an update is refused (Stalled,
	// CRDVersionRemoved) and the live definition is left as it is. A definition that drops
	// a version still listed in its status.storedVersions is refused either way (by
	// kaddons without it, by the API server with it) until the stored objects are migrated
	// and the version removed from status.storedVersions.
	// +optional
	AllowCRDVersionRemoval bool `json:"allowCRDVersionRemoval,omitempty"`
}

// UpgradePolicy says which newer versions a channel-following add-on moves to by itself.
type UpgradePolicy string

// Upgrade policies.
const (
	// UpgradePolicyLatest moves to the newest supported version the channel lists.
	UpgradePolicyLatest UpgradePolicy = "Latest"
	// UpgradePolicySameMinor moves only to newer patch versions of the running minor.
	UpgradePolicySameMinor UpgradePolicy = "SameMinor"
)

// UpgradeApproval says whether a channel-following add-on's moves wait for approval.
type UpgradeApproval string

// Upgrade approvals.
const (
	// UpgradeApprovalAutomatic moves without waiting.
	UpgradeApprovalAutomatic UpgradeApproval = "Automatic"
	// UpgradeApprovalManual waits until spec.upgrade.approvedVersion names the version.
	UpgradeApprovalManual UpgradeApproval = "Manual"
)

// AddonReference names another add-on.
type AddonReference struct {
	// kind is the add-on's kind, e.g. CoreDNS.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// name is the add-on's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// namespace is the add-on's namespace; defaults to this add-on's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// UpgradeStatus tracks a version change until it is healthy or has failed.
type UpgradeStatus struct {
	// version is the version being rolled out.
	// +optional
	Version string `json:"version,omitempty"`
	// startedAt is when it was first applied.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// failedVersion is the last version that did not become Ready in time. kaddons does
	// not apply it again until the spec changes.
	// +optional
	FailedVersion string `json:"failedVersion,omitempty"`
	// failedGeneration is the add-on generation that asked for failedVersion.
	// +optional
	FailedGeneration int64 `json:"failedGeneration,omitempty"`
}

// SpecJSON returns the JSON of addon's spec as the API server stores it: the object
// encoded, its spec taken out ({} when it has none). Extensions receive it, and the render
// cache keys on it.
func SpecJSON(addon Addon) (json.RawMessage, error) {
	data, err := json.Marshal(addon)
	if err != nil {
		return nil, fmt.Errorf("encoding %s/%s: %w", addon.GetNamespace(), addon.GetName(), err)
	}
	var fields struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	if len(fields.Spec) == 0 {
		return json.RawMessage("{}"), nil
	}
	return fields.Spec, nil
}
