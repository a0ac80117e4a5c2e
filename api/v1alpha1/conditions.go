package v1alpha1

// Condition types reported on every add-on. Ready is the summary; Progressing and
// Degraded say why it is not Ready; Stalled appears only when a human must act.
const (
	// ConditionReady is True when the add-on's manifests are applied and every child is healthy.
	ConditionReady = "Ready"
	// ConditionProgressing is True while kaddons applies manifests or waits for children to roll out.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when an add-on that was Ready no longer is, or an apply failed.
	ConditionDegraded = "Degraded"
	// ConditionStalled is True when a configuration error stops reconciliation until the spec changes.
	ConditionStalled = "Stalled"
	// ConditionUpgradeable is False when the add-on's running version does not support the
	// next Kubernetes minor, so a cluster upgrade would break it (OpenShift's ClusterOperator
	// contract): its message names a version that does.
	ConditionUpgradeable = "Upgradeable"
)

// Condition reasons. Each engine phase has its own failure reason, so the condition says
// where a reconcile stopped.
const (
	// ReasonReconciled means the manifests are applied and every child is healthy.
	ReasonReconciled = "Reconciled"
	// ReasonApplying means kaddons is applying the rendered manifests.
	ReasonApplying = "Applying"
	// ReasonChildrenNotReady means the manifests are applied but some children are not ready yet.
	ReasonChildrenNotReady = "ChildrenNotReady"
	// ReasonPaused means reconciliation is suspended by spec.suspend, the paused annotation,
	// or the operator configuration's paused kinds.
	ReasonPaused = "Paused"
	// ReasonDependencyNotReady means an add-on in spec.dependsOn, or one whose settings this
	// add-on follows (a NodeLocalDNS's CoreDNS), is missing or not Ready.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonDependencyCycle means spec.dependsOn forms a cycle.
	ReasonDependencyCycle = "DependencyCycle"
	// ReasonUpgradeFailed means a new version did not become Ready within the upgrade timeout.
	ReasonUpgradeFailed = "UpgradeFailed"
	// ReasonInvalidMode means a child carries an unknown addons.kaddons.dev/mode value.
	ReasonInvalidMode = "InvalidMode"
	// ReasonOwnershipConflict means a rendered object already exists and belongs to
	// another add-on; kaddons does not take it over.
	ReasonOwnershipConflict = "OwnershipConflict"
	// ReasonAdoptionRequired means rendered objects already exist that kaddons did not
	// create; they are left untouched until spec.adopt says to take them over.
	ReasonAdoptionRequired = "AdoptionRequired"
	// ReasonCorefileMigrationFailed means an existing Corefile cannot be migrated to the
	// CoreDNS version being applied (a plugin it uses was removed); nothing is applied.
	ReasonCorefileMigrationFailed = "CorefileMigrationFailed"
	// ReasonInvalidDriftExclusion means an entry of spec.driftExclusions is malformed or
	// targets an object the package does not contain.
	ReasonInvalidDriftExclusion = "InvalidDriftExclusion"
	// ReasonImmutableField means a new manifest changes a field the API server does not
	// allow to change, and spec.upgrade.recreateOnImmutable is not set.
	ReasonImmutableField = "ImmutableField"
	// ReasonDeleting means the add-on is being deleted and its children are being removed.
	ReasonDeleting = "Deleting"
	// ReasonDependentsExist means the add-on is being deleted, but other add-ons that
	// depend on it (spec.dependsOn, or a NodeLocalDNS following its CoreDNS) still exist:
	// its deletion waits until they are gone.
	ReasonDependentsExist = "DependentsExist"

	// ReasonDowngradeRefused means the add-on would move to an older version than the
	// one it runs, and spec.upgrade.allowDowngrade is not set: a pinned version is
	// Stalled; a channel-following add-on stays Ready on the version it runs.
	ReasonDowngradeRefused = "DowngradeRefused"
	// ReasonUpgradeAwaitingApproval means a newer version is available
	// (status.availableVersion) and spec.upgrade.approval is Manual: the add-on stays on
	// the version it runs until spec.upgrade.approvedVersion names the new one.
	ReasonUpgradeAwaitingApproval = "UpgradeAwaitingApproval"
	// ReasonUpgradeOutsidePolicy means the channel lists a newer version that
	// spec.upgrade.policy does not move to by itself (another minor under SameMinor).
	ReasonUpgradeOutsidePolicy = "UpgradeOutsidePolicy"
	// ReasonKubernetesVersionSupported means the running version supports the next
	// Kubernetes minor (Upgradeable is True).
	ReasonKubernetesVersionSupported = "KubernetesVersionSupported"
	// ReasonNextKubernetesVersionUnsupported means the running version does not support
	// the next Kubernetes minor (Upgradeable is False).
	ReasonNextKubernetesVersionUnsupported = "NextKubernetesVersionUnsupported"
	// ReasonKubernetesVersionUnknown means the cluster's version could not be read, so
	// Upgradeable is Unknown.
	ReasonKubernetesVersionUnknown = "KubernetesVersionUnknown"

	// ReasonInvalidVersion means spec.version is not a valid version string.
	ReasonInvalidVersion = "InvalidVersion"
	// ReasonVersionNotFound means no package exists for the requested version.
	ReasonVersionNotFound = "VersionNotFound"
	// ReasonChannelNotFound means the requested channel does not exist or does not list the add-on.
	ReasonChannelNotFound = "ChannelNotFound"
	// ReasonInvalidPatch means an entry of spec.patches is not a well-formed patch.
	ReasonInvalidPatch = "InvalidPatch"
	// ReasonPatchTargetNotFound means an entry of spec.patches matches no rendered object.
	ReasonPatchTargetNotFound = "PatchTargetNotFound"
	// ReasonRenderFailed means the package could not be built into manifests.
	ReasonRenderFailed = "RenderFailed"
	// ReasonPackageRefused means the package holds or refers to something kaddons does not
	// build: a symbolic link, a path outside the package (absolute, or through ".."), a
	// remote base or URL, a Helm chart through kustomize's helmCharts, or a package with both
	// a kustomization.yaml and a Chart.yaml. The message names the file and the reference;
	// nothing is applied or pruned until the package changes.
	ReasonPackageRefused = "PackageRefused"
	// ReasonPackageTooLarge means the package exceeds a cap on its total bytes, its number
	// of files or the number of objects it renders. The message names the cap; nothing is
	// applied or pruned until the package changes.
	ReasonPackageTooLarge = "PackageTooLarge"
	// ReasonChartRefused means a Helm chart package needs something kaddons does not
	// render: a dependency that is not vendored under charts/ (the message names it and
	// its repository; kaddons never downloads a chart), a values.schema.json that refers
	// to a schema outside the chart, a library chart, a chart API version it does not
	// read, or a crds/ file that holds anything but CustomResourceDefinitions. Nothing is
	// applied or pruned until the package changes.
	ReasonChartRefused = "ChartRefused"
	// ReasonValuesInvalid means the values given to a Helm chart break its
	// values.schema.json; the message names the field. Nothing is rendered or applied.
	ReasonValuesInvalid = "ValuesInvalid"
	// ReasonHookNotSupported means a Helm chart renders a hook that kaddons cannot map to
	// an apply wave (test, pre-delete, post-delete, pre-rollback, post-rollback, an
	// unknown hook, or one that is both before and after the release); the message names
	// the object and the hook. Nothing is applied or pruned until the package changes.
	ReasonHookNotSupported = "HookNotSupported"
	// ReasonCRDVersionRemoved means a CustomResourceDefinition of the package drops a
	// version that the API server still stores custom resources at (its
	// status.storedVersions), or stops serving a version while custom resources of it
	// exist: they could no longer be read through it. Nothing is applied until the
	// package keeps the version, spec.upgrade.allowCRDVersionRemoval is set (for a served
	// version), or the resources are migrated and the version removed from
	// status.storedVersions.
	ReasonCRDVersionRemoved = "CRDVersionRemoved"
	// ReasonApplyFailed means the API server rejected one or more objects.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonPruneFailed means objects that no longer belong to the add-on could not be deleted.
	ReasonPruneFailed = "PruneFailed"
	// ReasonInventoryTooLarge means the package renders more objects (or longer names)
	// than status.inventory holds (MaxInventoryObjects, MaxInventoryBytes), or than the
	// write-ahead record can carry. Nothing is applied or pruned until the package or
	// spec changes.
	ReasonInventoryTooLarge = "InventoryTooLarge"
	// ReasonObjectTooLarge means the API server or etcd refused a rendered object as too
	// large (413 RequestEntityTooLarge, "request is too large", an object over 1 MiB or its
	// annotations over 256 KiB, more than the 2 MiB the API server sends etcd). The message
	// names it.
	ReasonObjectTooLarge = "ObjectTooLarge"
	// ReasonNotPermitted means no AddonPolicy permits the add-on in its namespace, at its
	// version or channel, or with its patches. The message names the rule it broke.
	ReasonNotPermitted = "NotPermitted"
	// ReasonForbidden means the API server's RBAC refused a write of the add-on's
	// ServiceAccount (spec.serviceAccountName, or the default one outside the trusted
	// namespaces). The message names each verb and object; nothing was written. kaddons
	// looks again every minute, so a permission an admin grants is picked up.
	ReasonForbidden = "Forbidden"
	// ReasonHealthCheckFailed means the health of the children could not be read.
	ReasonHealthCheckFailed = "HealthCheckFailed"

	// ReasonSourceNotReady means the AddonSource in spec.sourceRef does not exist or has
	// no fetched artifact yet; nothing is applied or pruned until it has one.
	ReasonSourceNotReady = "SourceNotReady"

	// ReasonSourceNotTrusted means an add-on in a trusted namespace, which is not applied
	// as a ServiceAccount of its own, uses an AddonSource that names no identity to apply
	// its packages as (spec.serviceAccountName or spec.applyAsOperator), or that is
	// neither pinned by digest nor verified by signature; nothing is applied or pruned.
	ReasonSourceNotTrusted = "SourceNotTrusted"
	// ReasonOperatorMismatch means the bundle names another operator id than this
	// operator's (pre-flight); nothing is applied or pruned.
	ReasonOperatorMismatch = "OperatorMismatch"
	// ReasonOperatorTooOld means the bundle needs a newer operator version than the one
	// running (pre-flight); nothing is applied or pruned.
	ReasonOperatorTooOld = "OperatorTooOld"
	// ReasonKubernetesVersionUnsupported means the cluster's Kubernetes version is outside
	// the bundle's range (pre-flight), or outside the kubeVersion range of a Helm chart
	// package's Chart.yaml; nothing is applied or pruned.
	ReasonKubernetesVersionUnsupported = "KubernetesVersionUnsupported"
	// ReasonFetched means an AddonSource's current revision was fetched and verified and
	// passes the pre-flight checks.
	ReasonFetched = "Fetched"
	// ReasonFetchFailed means an AddonSource could not be fetched; add-ons keep the
	// artifact fetched before, if any.
	ReasonFetchFailed = "FetchFailed"
	// ReasonInvalidSource means an AddonSource's spec or the Secret it names cannot be
	// used (a missing Secret, credentials its kind cannot use).
	ReasonInvalidSource = "InvalidSource"
	// ReasonVerificationFailed means a required signature of an AddonSource's bundle is
	// missing or does not verify against its keys.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonDigestMismatch means fetched content is not what its digest pin says.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonArchiveRefused means a fetched archive or tree breaks the extraction rules (a
	// path outside the tree, a link, a device, a duplicate, a cap on size or count).
	ReasonArchiveRefused = "ArchiveRefused"
	// ReasonInvalidBundle means a bundle's or a package's metadata is malformed.
	ReasonInvalidBundle = "InvalidBundle"
	// ReasonPreflightFailed means the pre-flight checks could not run (the cluster's
	// version could not be read); retried.
	ReasonPreflightFailed = "PreflightFailed"
	// ReasonWaveCycle means the package's apply waves (the wave and wave-after
	// annotations) do not form a DAG: a cycle, or a wave that does not exist. Nothing
	// was applied.
	ReasonWaveCycle = "WaveCycle"
	// ReasonWaveNotReady means a wave of the package waits for an earlier one to be
	// healthy: what comes before is applied, the rest is not yet.
	ReasonWaveNotReady = "WaveNotReady"
	// ReasonInvalidSpec means the add-on's Validate or Default hook refused its spec;
	// nothing was applied.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonInitializationBlocked means the add-on's Initialize hook holds back its first
	// apply; nothing was applied, and the hook is asked again.
	ReasonInitializationBlocked = "InitializationBlocked"
	// ReasonUpgradeBlocked means the add-on's BeforeUpgrade hook holds back a change of
	// version; what runs is left as it is, and the hook is asked again.
	ReasonUpgradeBlocked = "UpgradeBlocked"
	// ReasonNotServing means the add-on's children are ready but its AfterReady hook found
	// that it does not serve yet.
	ReasonNotServing = "NotServing"
	// ReasonDeletionBlocked means the add-on's Cleanup hook holds back its deletion;
	// nothing was deleted yet, and the hook is asked again.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonHookFailed means a hook could not answer (an error, not a refusal); retried
	// with back-off.
	ReasonHookFailed = "HookFailed"
	// ReasonExtensionNotReady means an AddonExtension with failurePolicy Fail selects the
	// add-on but is not Discovered: the add-on waits, nothing applied, until it is.
	ReasonExtensionNotReady = "ExtensionNotReady"
	// ReasonExtensionUnreachable means a call to an extension timed out, or TLS or the
	// connection failed, or it answered with an HTTP error; retried with back-off.
	ReasonExtensionUnreachable = "ExtensionUnreachable"
	// ReasonExtensionInvalidResponse means an extension answered with something that is
	// not a valid response (not JSON, the wrong kind, larger than the cap); retried.
	ReasonExtensionInvalidResponse = "ExtensionInvalidResponse"
	// ReasonExtensionFailed means an extension answered that it could not answer (status
	// Failure); retried.
	ReasonExtensionFailed = "ExtensionFailed"
	// ReasonExtensionResponseRefused means a Render extension returned objects kaddons
	// refuses: an object left out or moved to another namespace, a kind the add-on may not
	// have, an added object that names a namespace. Nothing is applied; retried.
	ReasonExtensionResponseRefused = "ExtensionResponseRefused"
	// ReasonExtensionIgnored marks Degraded (the add-on went on) when a call to an
	// extension with failurePolicy Ignore failed; the message says which and why.
	ReasonExtensionIgnored = "ExtensionIgnored"

	// ReasonDiscovered means an AddonExtension's discovery endpoint answered and serves
	// every hook its spec names.
	ReasonDiscovered = "Discovered"
	// ReasonDiscoveryFailed means an AddonExtension's discovery endpoint could not be
	// reached or answered with something that is not a DiscoveryResponse; retried.
	ReasonDiscoveryFailed = "DiscoveryFailed"
	// ReasonHooksNotServed means an AddonExtension's discovery endpoint does not list a
	// hook its spec names, or only at a version kaddons does not speak.
	ReasonHooksNotServed = "HooksNotServed"
	// ReasonInvalidExtension means an AddonExtension's spec cannot be used (its CA bundle
	// holds no certificate, its namespace selector does not parse).
	ReasonInvalidExtension = "InvalidExtension"
)
