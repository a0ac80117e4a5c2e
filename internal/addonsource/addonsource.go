// Package addonsource is the logic of the AddonSource controller: it turns an AddonSource
// and the Secrets it names into a fetch request (internal/sources), and the result of a
// fetch and of its pre-flight check into the AddonSource's status. It reads the cluster
// only through the reader it is given and writes nothing.
package addonsource

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

// Defaults of an AddonSource's timings.
const (
	// DefaultInterval is how often a source is fetched again when spec.interval is unset.
	DefaultInterval = 10 * time.Minute
	// DefaultTimeout bounds one fetch when spec.timeout is unset.
	DefaultTimeout = 2 * time.Minute
)

// Keys read from the Secrets an AddonSource names.
const (
	KeyUsername         = "username"
	KeyPassword         = "password"
	KeyCA               = "ca.crt"
	KeySSHIdentity      = "identity"
	KeyKnownHosts       = "known_hosts"
	KeyPublicKeySuffix  = ".pub"
	KeyDockerConfigJSON = corev1.DockerConfigJsonKey
)

// Interval returns how often src is fetched.
func Interval(src *addonsv1alpha1.AddonSource) time.Duration {
	if src.Spec.Interval != nil && src.Spec.Interval.Duration > 0 {
		return src.Spec.Interval.Duration
	}
	return DefaultInterval
}

// Timeout returns the bound of one fetch of src.
func Timeout(src *addonsv1alpha1.AddonSource) time.Duration {
	if src.Spec.Timeout != nil && src.Spec.Timeout.Duration > 0 {
		return src.Spec.Timeout.Duration
	}
	return DefaultTimeout
}

// Request builds the fetch request of src. Secrets are read from namespace (the
// operator's own) through reader, which must read past the manager's label-filtered
// cache. A missing Secret or key is a *sources.Error with ReasonInvalidSource.
func Request(ctx context.Context, reader client.Reader, namespace string, src *addonsv1alpha1.AddonSource) (sources.Request, error) {
	spec := src.Spec
	req := sources.Request{Timeout: Timeout(src), Auth: sources.Auth{InsecureLoopback: spec.InsecureLoopback}}
	var secretRef *addonsv1alpha1.LocalSecretReference
	switch {
	case spec.OCI != nil:
		req.Kind, req.URL, req.Digest = sources.KindOCI, spec.OCI.URL, spec.OCI.Digest
		req.Auth.Insecure = spec.OCI.Insecure
		secretRef = spec.OCI.SecretRef
		if v := spec.OCI.Verify; v != nil {
			data, err := readSecret(ctx, reader, namespace, v.SecretRef.Name)
			if err != nil {
				return req, err
			}
			keys := publicKeys(data)
			if len(keys) == 0 {
				return req, invalid("Secret %s/%s holds no public key (a key whose name ends in %s)",
					namespace, v.SecretRef.Name, KeyPublicKeySuffix)
			}
			// required: false still verifies every signature that is there; it only
			// lets through a bundle that has none.
			req.Verify = &sources.Verification{PublicKeys: keys, AllowUnsigned: v.Required != nil && !*v.Required}
		}
	case spec.Git != nil:
		req.Kind, req.URL, req.Path = sources.KindGit, spec.Git.URL, spec.Git.Path
		if ref := spec.Git.Ref; ref != nil {
			req.Git = sources.GitRef{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Commit: ref.Commit}
		}
		secretRef = spec.Git.SecretRef
	case spec.HTTPS != nil:
		req.Kind, req.URL, req.Digest = sources.KindHTTPS, spec.HTTPS.URL, "sha256:"+spec.HTTPS.SHA256
		secretRef = spec.HTTPS.SecretRef
	case spec.Directory != nil:
		req.Kind, req.URL = sources.KindDirectory, spec.Directory.Path
	default:
		return req, invalid("the AddonSource sets none of oci, git, https and directory")
	}
	if secretRef != nil {
		data, err := readSecret(ctx, reader, namespace, secretRef.Name)
		if err != nil {
			return req, err
		}
		req.Auth.Username, req.Auth.Password = string(data[KeyUsername]), string(data[KeyPassword])
		req.Auth.CA = data[KeyCA]
		req.Auth.DockerConfigJSON = data[KeyDockerConfigJSON]
		req.Auth.SSHPrivateKey, req.Auth.KnownHosts = data[KeySSHIdentity], data[KeyKnownHosts]
	}
	return req, nil
}

// readSecret reads the data of the Secret name in namespace.
func readSecret(ctx context.Context, reader client.Reader, namespace, name string) (map[string][]byte, error) {
	secret := &corev1.Secret{}
	err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, invalid("Secret %s/%s does not exist (an AddonSource's Secrets live in the operator's namespace)", namespace, name)
	case err != nil:
		return nil, &sources.Error{Reason: sources.ReasonFetchFailed, Message: fmt.Sprintf("reading Secret %s/%s", namespace, name),
			Err: err, Transient: true}
	}
	return secret.Data, nil
}

// publicKeys returns the values of the keys ending in .pub, in key order.
func publicKeys(data map[string][]byte) [][]byte {
	names := make([]string, 0, len(data))
	for k := range data {
		if strings.HasSuffix(k, KeyPublicKeySuffix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	keys := make([][]byte, 0, len(names))
	for _, k := range names {
		keys = append(keys, data[k])
	}
	return keys
}

func invalid(format string, args ...any) error {
	return &sources.Error{Reason: sources.ReasonInvalidSource, Message: fmt.Sprintf(format, args...)}
}

// Observation is the result of one fetch of an AddonSource.
type Observation struct {
	// Artifact is what was fetched; nil when the fetch failed.
	Artifact *sources.Artifact
	// FetchErr is why the fetch failed.
	FetchErr error
	// PreflightErr is why the fetched bundle's metadata refuses this operator or cluster.
	PreflightErr error
	// Now is when the fetch ended.
	Now time.Time
}

// SetStatus records obs in status. A failed fetch keeps revision, digest and metadata
// of the artifact fetched before (the add-ons keep using it) and sets Ready=False with
// the failure's reason; a successful one records the artifact and sets Ready from the
// pre-flight check.
func SetStatus(status *addonsv1alpha1.AddonSourceStatus, generation int64, obs Observation) {
	status.ObservedGeneration = generation
	cond := metav1.Condition{Type: addonsv1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case obs.FetchErr != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, conditionReason(sources.ReasonOf(obs.FetchErr))
		cond.Message = obs.FetchErr.Error()
		if status.Digest != "" {
			cond.Message += fmt.Sprintf("; add-ons keep using revision %s", status.Revision)
		}
	default:
		a := obs.Artifact
		if status.Digest != a.Digest || status.Revision != a.Revision || status.LastFetchTime == nil {
			t := metav1.NewTime(obs.Now.Truncate(time.Second))
			status.LastFetchTime = &t
		}
		status.Revision, status.Digest = a.Revision, a.Digest
		status.Metadata = nil
		if a.Metadata != (sources.Metadata{}) {
			status.Metadata = &addonsv1alpha1.BundleMetadata{MediaType: a.Metadata.MediaType, OperatorID: a.Metadata.OperatorID,
				MinOperatorVersion: a.Metadata.MinOperatorVersion, KubernetesVersions: a.Metadata.KubernetesVersions}
		}
		if obs.PreflightErr != nil {
			cond.Status, cond.Reason = metav1.ConditionFalse, conditionReason(sources.ReasonOf(obs.PreflightErr))
			cond.Message = obs.PreflightErr.Error()
		} else {
			cond.Status, cond.Reason = metav1.ConditionTrue, addonsv1alpha1.ReasonFetched
			cond.Message = "Fetched revision " + a.Revision
		}
	}
	if len(cond.Message) > 1024 {
		cond.Message = cond.Message[:1021] + "..."
	}
	meta.SetStatusCondition(&status.Conditions, cond)
}

// conditionReason maps a sources reason to the condition reason of the same name; they
// share their values, and an unknown one becomes FetchFailed.
func conditionReason(reason string) string {
	switch reason {
	case addonsv1alpha1.ReasonOperatorMismatch, addonsv1alpha1.ReasonOperatorTooOld,
		addonsv1alpha1.ReasonKubernetesVersionUnsupported, addonsv1alpha1.ReasonFetchFailed,
		addonsv1alpha1.ReasonVerificationFailed, addonsv1alpha1.ReasonDigestMismatch,
		addonsv1alpha1.ReasonArchiveRefused, addonsv1alpha1.ReasonInvalidBundle, addonsv1alpha1.ReasonInvalidSource:
		return reason
	default:
		return addonsv1alpha1.ReasonFetchFailed
	}
}
