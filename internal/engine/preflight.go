package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/discovery"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

// OperatorIdentity is what the pre-flight checks compare a bundle's metadata with.
type OperatorIdentity struct {
	// ID is the operator's id (the configuration's operatorID); empty means
	// sources.DefaultOperatorID.
	ID string
	// Version is the running operator's version (internal/version).
	Version string
	// KubernetesVersion returns the cluster's version, such as v1.34.1. New defaults it to
	// ClusterVersion on the manager's configuration; nil (a tool that only renders) checks
	// no Kubernetes range.
	KubernetesVersion func(ctx context.Context) (string, error)
}

// preflight checks, before anything is rendered or applied, that the running operator
// may apply the package: the source bundle's metadata (operator id, minimum operator
// version, Kubernetes range), then the package version's own metadata.yaml, if it has
// one. A refusal stops the add-on as Stalled with its own reason (OperatorMismatch,
// OperatorTooOld, KubernetesVersionUnsupported); nothing is applied or pruned, so what
// runs keeps running. The add-on is checked again when the source or the spec changes,
// and after a while, since the cluster may be upgraded.
func (r *Reconciler) preflight(ctx context.Context, st *reconcileState) outcome {
	pkg, err := sources.ReadPackageMetadata(st.catalog.FS(), st.resolved.Addon, st.resolved.Version)
	if err != nil {
		return stalled(addonsv1alpha1.ReasonRenderFailed, err)
	}
	kubernetes, err := r.clusterVersion(ctx)
	if err != nil {
		return failed(addonsv1alpha1.ReasonPreflightFailed, fmt.Errorf("reading the cluster's Kubernetes version: %w", err))
	}
	st.upgradeable = upgradeable(st.catalog, st.resolved, pkg, kubernetes)
	if up := st.addon.GetAddonSpec().Upgrade; up != nil && up.IgnoreKubernetesVersion && st.resolved.Channel == "" {
		// The user applies a pinned version whatever its package says it supports.
		pkg.KubernetesVersions = ""
	}
	checks := []struct {
		what     string
		metadata sources.Metadata
		// override says how the user applies the package anyway.
		override string
	}{
		{what: "AddonSource " + st.artifact.Name, metadata: st.artifact.Metadata},
		{what: fmt.Sprintf("package %s/%s", st.resolved.Addon, st.resolved.Version), metadata: pkg,
			override: "; set spec.upgrade.ignoreKubernetesVersion: true to apply it anyway"},
	}
	for _, c := range checks {
		if kubernetes == "" {
			// A tool that only renders cannot read the cluster: no range is checked.
			c.metadata.KubernetesVersions = ""
		}
		if c.metadata == (sources.Metadata{}) {
			continue
		}
		if err := c.metadata.Check(r.opts.Operator.ID, r.opts.Operator.Version, kubernetes); err != nil {
			reason := sources.ReasonOf(err)
			message := c.what + ": " + err.Error()
			switch reason {
			case addonsv1alpha1.ReasonKubernetesVersionUnsupported:
				message += c.override
			case addonsv1alpha1.ReasonOperatorMismatch, addonsv1alpha1.ReasonOperatorTooOld:
			default:
				reason = addonsv1alpha1.ReasonInvalidBundle
			}
			return refused(reason, message).after(preflightRecheck)
		}
	}
	return proceed()
}

// preflightRecheck is how often an add-on refused by a pre-flight check is checked
// again: an upgrade of the cluster or the operator can lift the refusal without an event
// on the add-on.
const preflightRecheck = 10 * time.Minute

// ClusterVersion returns a KubernetesVersion function for OperatorIdentity that asks the
// API server's discovery for its version at most once per ttl, shared by every add-on.
// A failed request is not cached.
func ClusterVersion(client discovery.ServerVersionInterface, ttl time.Duration) func(ctx context.Context) (string, error) {
	var (
		mu      sync.Mutex
		version string
		read    time.Time
	)
	return func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if version != "" && time.Since(read) < ttl {
			return version, nil
		}
		info, err := client.ServerVersion()
		if err != nil {
			return "", err
		}
		version, read = info.GitVersion, time.Now()
		return version, nil
	}
}
