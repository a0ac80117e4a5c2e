// Package sources fetches channels trees (channel files plus packages/<addon>/<version>/) from
// the places an AddonSource names: an OCI registry (the Manifest Bundle format), a git
// repository, an HTTPS .tar.gz or a directory. Every fetch is verified (digest, signature),
// extracted with caps, and cached on disk by digest, so that all add-ons using one revision
// share one copy.
package sources

import (
	"context"
	"time"
)

// Kind names where a source's channels tree comes from.
type Kind string

// The source kinds.
const (
	// KindOCI is an image in the Manifest Bundle format, by tag or digest.
	KindOCI Kind = "oci"
	// KindGit is a path in a git repository at a branch, tag, semver range or commit.
	KindGit Kind = "git"
	// KindHTTPS is a .tar.gz of a channels tree with a required sha256 digest.
	KindHTTPS Kind = "https"
	// KindDirectory is a channels tree on the operator's own file system.
	KindDirectory Kind = "directory"
)

// Request says what to fetch. The controller that owns an AddonSource builds it from the
// resource's spec and the Secrets it references.
type Request struct {
	// Kind is where the tree comes from.
	Kind Kind
	// URL is the image reference (oci), the repository URL (git), the archive URL (https) or
	// the directory path (directory).
	URL string
	// Git selects the revision of a git source.
	Git GitRef
	// Path is the folder inside the repository or archive that holds the channels tree.
	Path string
	// Digest pins the content: "sha256:<hex>". Required for https; for oci it pins the
	// manifest digest; for git it may pin the commit as "sha1:<hex>".
	Digest string
	// Auth holds credentials read from the source's Secret.
	Auth Auth
	// Verify, when set, requires a valid signature (oci).
	Verify *Verification
	// Timeout bounds the whole fetch.
	Timeout time.Duration
}

// GitRef selects a git revision; the first non-empty field wins in the order Commit, Tag,
// SemVer, Branch.
type GitRef struct {
	Branch string
	Tag    string
	SemVer string
	Commit string
}

// Auth holds the credentials of a fetch. Only the fields the kind uses are read.
type Auth struct {
	// Username and Password authenticate to a registry, a git server over HTTPS or an HTTPS
	// server (basic auth). A token goes in Password.
	Username string
	Password string
	// DockerConfigJSON is a .dockerconfigjson, as in an image pull Secret (oci).
	DockerConfigJSON []byte
	// SSHPrivateKey and KnownHosts authenticate to a git server over SSH.
	SSHPrivateKey []byte
	KnownHosts    []byte
	// CA is a PEM bundle of extra roots to trust (https, oci, git over HTTPS).
	CA []byte
	// Insecure allows plain HTTP to a registry (oci), a git server or an archive server
	// (https); only to a loopback address, and only with InsecureLoopback set as well.
	Insecure bool
	// InsecureLoopback allows connections to loopback addresses (127.0.0.0/8, ::1), which
	// every fetch otherwise refuses: with the manager on the host network, loopback is
	// the node's own. For tests and development only. Link-local, cloud metadata,
	// unspecified, multicast and broadcast addresses are refused whatever it says.
	InsecureLoopback bool
}

// Verification lists the public keys a signature must verify against.
type Verification struct {
	// PublicKeys are PEM-encoded public keys (cosign's key-based format).
	PublicKeys [][]byte
	// AllowUnsigned accepts a bundle that has no signature at all; a signature that is
	// there but does not verify is still refused.
	AllowUnsigned bool
}

// Artifact is a fetched, verified and extracted channels tree.
type Artifact struct {
	// Revision is what was fetched, readable: a tag@digest, branch@sha1:commit, the URL.
	Revision string
	// Digest identifies the content: "sha256:<hex>" of the bundle manifest (oci), of the
	// archive (https), of the extracted tree (git, directory).
	Digest string
	// Dir holds the extracted tree: channel files at the top, packages/ below. It is read
	// only and shared by every add-on that uses this revision.
	Dir string
	// Metadata is the bundle metadata read from metadata/annotations.yaml (and, for oci,
	// the image labels; the file wins on conflict).
	Metadata Metadata
}

// Metadata is the bundle's metadata: what it is and who may apply it.
type Metadata struct {
	// MediaType is the bundle's kind of content; MediaTypeChannels for a kaddons tree.
	MediaType string
	// OperatorID is the id of the operator the bundle is meant for; empty means any.
	OperatorID string
	// MinOperatorVersion is the oldest operator version that can apply the bundle.
	MinOperatorVersion string
	// KubernetesVersions is a semver range of the cluster versions the bundle supports.
	KubernetesVersions string
}

// Fetcher fetches sources.
type Fetcher interface {
	// Fetch fetches, verifies and extracts what the request names, or returns the cached
	// copy of that digest. Its errors are *Error with a Reason.
	Fetch(ctx context.Context, req Request) (*Artifact, error)
}
