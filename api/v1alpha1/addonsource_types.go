package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddonSourceSpec says where a channels tree (channel files and packages/) comes from:
// exactly one of oci, git, https and directory; and whom its packages are applied as.
// +kubebuilder:validation:XValidation:rule="[has(self.oci), has(self.git), has(self.https), has(self.directory)].filter(x, x).size() == 1",message="set exactly one of oci, git, https and directory"
// +kubebuilder:validation:XValidation:rule="!(has(self.serviceAccountName) && has(self.applyAsOperator) && self.applyAsOperator)",message="set at most one of serviceAccountName and applyAsOperator"
type AddonSourceSpec struct {
	// serviceAccountName is a ServiceAccount in the operator's namespace that the packages
	// of this source are applied, pruned and deleted as, for the add-ons that would
	// otherwise be applied with the operator's own identity (those in the trusted
	// namespaces that name no spec.serviceAccountName): the packages get what this
	// ServiceAccount was granted, no more. Add-ons outside the trusted namespaces are
	// applied as a ServiceAccount of their own namespace whatever the source says.
	// An add-on in a trusted namespace refuses a source that sets neither this nor
	// applyAsOperator (SourceNotTrusted).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// applyAsOperator applies the packages of this source with the operator's own
	// identity, as the built-in packages are, for the add-ons in the trusted namespaces
	// that name no spec.serviceAccountName. Whoever can change what the source serves can
	// then write anything the operator may: set it only for a source as trusted as the
	// operator's own image.
	// +optional
	ApplyAsOperator bool `json:"applyAsOperator,omitempty"`

	// oci is an image in the Manifest Bundle format (docs/bundles.md), by tag or digest.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// git is a folder of a git repository at a branch, tag, semver range or commit.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// https is a .tar.gz of a channels tree, pinned by its sha256 digest.
	// +optional
	HTTPS *HTTPSSource `json:"https,omitempty"`

	// directory is a channels tree on the operator's own file system (development and
	// air-gapped mirrors mounted into the operator's pod).
	// +optional
	Directory *DirectorySource `json:"directory,omitempty"`

	// interval is how often the source is fetched again to look for a new revision.
	// Defaults to 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('168h')",message="interval must be a duration between 10s and 168h, such as 10m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// timeout bounds one fetch: download, verification and extraction. Defaults to 2m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="timeout must be a duration between 1s and 1h, such as 2m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// insecureLoopback allows fetches from loopback addresses (127.0.0.0/8, ::1), which
	// are refused otherwise; oci.insecure needs it too. For tests and development only:
	// with the operator on the host network, loopback is the node's own, where the
	// kubelet and other node-local services listen. Link-local, cloud metadata,
	// unspecified, multicast and broadcast addresses are refused whatever it says.
	// +optional
	InsecureLoopback bool `json:"insecureLoopback,omitempty"`
}

// OCISource is an image in the Manifest Bundle format.
type OCISource struct {
	// url is the image reference, such as registry.example.com/platform/addons:v1 or
	// oci://registry.example.com/platform/addons@sha256:.... It carries no credentials:
	// they go in the Secret secretRef names.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/?#@]*:[^/?#]*@')",message="url must not carry credentials (user:password@): put them in the Secret secretRef names"
	// +required
	URL string `json:"url"`

	// digest pins the image manifest: "sha256:<64 hex>". A bundle with another digest is
	// refused.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`

	// secretRef names a Secret in the operator's namespace with registry credentials: a
	// .dockerconfigjson (an image pull Secret), or username and password; ca.crt adds
	// roots to trust.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`

	// verify checks the bundle's cosign signature (the key-based sha256-<digest>.sig tag).
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`

	// insecure allows plain HTTP to the registry. Only for registries on loopback in
	// tests, and only with spec.insecureLoopback set as well.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// OCIVerification says which keys a bundle's signature must verify against.
type OCIVerification struct {
	// secretRef names a Secret in the operator's namespace whose every key ending in .pub
	// is a PEM-encoded cosign public key; the signature must verify against one of them.
	// +required
	SecretRef LocalSecretReference `json:"secretRef"`

	// required refuses a bundle without a signature that verifies against one of the
	// keys. false also accepts a bundle that has no signature at all, for a migration
	// window only; a signature that is there must still verify. Defaults to true.
	// +optional
	Required *bool `json:"required,omitempty"`
}

// GitSource is a folder of a git repository.
type GitSource struct {
	// url is the repository: https://, ssh:// or git@host:path. It carries no
	// credentials (an https URL no user name either): they go in the Secret secretRef
	// names.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[hH][tT][tT][pP][sS]?://[^/?#]*@') && !self.matches('^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/?#@]*:[^/?#]*@')",message="url must not carry credentials (user:password@, or a token as the user of an https URL): put them in the Secret secretRef names"
	// +required
	URL string `json:"url"`

	// ref selects the revision; without it the repository's default branch.
	// +optional
	Ref *GitReference `json:"ref,omitempty"`

	// path is the folder of the repository that holds the channels tree; empty means the
	// repository's root.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="path must be relative and stay inside the repository"
	// +optional
	Path string `json:"path,omitempty"`

	// secretRef names a Secret in the operator's namespace: username and password (or a
	// token as password) for HTTPS; identity (an SSH private key) and known_hosts for SSH;
	// ca.crt adds roots to trust.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
}

// GitReference selects a git revision. The first that is set wins, in the order commit,
// tag, semver, branch.
type GitReference struct {
	// branch is a branch name; its head is fetched.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`
	// tag is a tag name.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Tag string `json:"tag,omitempty"`
	// semver is a semver range; the highest matching tag is fetched.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	SemVer string `json:"semver,omitempty"`
	// commit is a full commit SHA-1, which pins the revision.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{40}$`
	// +optional
	Commit string `json:"commit,omitempty"`
}

// HTTPSSource is a .tar.gz of a channels tree on an HTTPS server.
type HTTPSSource struct {
	// url is the archive's https:// URL. It carries no credentials: they go in the
	// Secret secretRef names.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="url must be an https:// URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^https://[^/?#]*@')",message="url must not carry credentials (user:password@, or a token as the user): put them in the Secret secretRef names"
	// +required
	URL string `json:"url"`

	// sha256 is the archive's digest, 64 hex digits: an archive with another digest is refused.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	// +required
	SHA256 string `json:"sha256"`

	// secretRef names a Secret in the operator's namespace: username and password for
	// basic authentication; ca.crt adds roots to trust.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
}

// DirectorySource is a channels tree on the operator's file system.
type DirectorySource struct {
	// path is the directory's absolute path inside the operator's container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="path must be absolute"
	// +required
	Path string `json:"path"`
}

// LocalSecretReference names a Secret in the operator's own namespace. AddonSources are
// cluster-scoped; the operator reads no Secret anywhere else for them.
type LocalSecretReference struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// AddonSourceStatus is the observed state of an AddonSource.
type AddonSourceStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready is True when the current revision was fetched, verified and passes
	// the pre-flight checks. When a later fetch fails, Ready is False with the reason, and
	// revision and digest keep naming the artifact the add-ons still use.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// revision is what was fetched, readable: tag@digest, branch@sha1:commit, the URL.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Revision string `json:"revision,omitempty"`

	// digest identifies the content of the current artifact: sha256:<hex>.
	// +kubebuilder:validation:MaxLength=80
	// +optional
	Digest string `json:"digest,omitempty"`

	// lastFetchTime is when the current artifact was last fetched and verified.
	// +optional
	LastFetchTime *metav1.Time `json:"lastFetchTime,omitempty"`

	// metadata is the bundle metadata of the current artifact.
	// +optional
	Metadata *BundleMetadata `json:"metadata,omitempty"`
}

// BundleMetadata is what a bundle says about itself (docs/bundles.md).
type BundleMetadata struct {
	// mediaType is the bundle's kind of content.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	MediaType string `json:"mediaType,omitempty"`
	// operatorID is the id of the operator the bundle is meant for; empty means any.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	OperatorID string `json:"operatorID,omitempty"`
	// minOperatorVersion is the oldest operator version that can apply the bundle.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	MinOperatorVersion string `json:"minOperatorVersion,omitempty"`
	// kubernetesVersions is the semver range of cluster versions the bundle supports.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	KubernetesVersions string `json:"kubernetesVersions,omitempty"`
}

// AddonSource is a place add-on packages come from: an OCI bundle, a git repository, an
// HTTPS archive or a directory. Add-ons use it through spec.sourceRef. Cluster admins
// create AddonSources; their Secrets live in the operator's namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,path=addonsources,singular=addonsource,shortName=asrc,categories=addons
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Fetched",type=date,JSONPath=`.status.lastFetchTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters"
type AddonSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where the packages come from.
	// +required
	Spec AddonSourceSpec `json:"spec"`
	// status is the observed state of the source.
	// Until the operator first writes it, it reads observedGeneration 0: health checks
	// that follow kstatus (Flux, Argo CD, kpt) take the object as not yet reconciled.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status AddonSourceStatus `json:"status,omitempty"`
}

// AddonSourceList is a list of AddonSources.
// +kubebuilder:object:root=true
type AddonSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddonSource `json:"items"`
}

// AppliedSource records where an add-on's applied manifests came from.
type AppliedSource struct {
	// name is the AddonSource; empty for the packages built into the operator.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`
	// revision is the source's revision that was applied.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Revision string `json:"revision,omitempty"`
	// digest is the digest of the source's artifact that was applied.
	// +kubebuilder:validation:MaxLength=80
	// +optional
	Digest string `json:"digest,omitempty"`
}

func init() {
	register(&AddonSource{}, &AddonSourceList{})
}
