package engine

import (
	"context"
	"errors"
	"fmt"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/sources"
)

// resolve picks the package version: spec.version, else the newest version spec.channel
// (or the default channel) lists whose package supports the cluster's Kubernetes version,
// as spec.upgrade's policy allows (chooseVersion), else, while a failed upgrade is rolled
// back, the last healthy version (pinVersion). A bad version or channel, a refused
// downgrade and a channel with no version for the cluster are terminal: they are reported
// and not retried until the spec, the channels or the cluster change.
func (r *Reconciler) resolve(ctx context.Context, st *reconcileState) outcome {
	if out := r.resolveSource(st); out.stop {
		return out
	}
	spec := st.addon.CommonSpec()
	if spec.Version == "" && spec.Channel == "" {
		spec.Channel = st.settings.DefaultChannel
		if spec.Channel == "" {
			spec.Channel = st.catalog.DefaultChannel()
		}
	}
	if spec.Version == "" {
		st.channel = spec.Channel
	}
	candidates, err := st.catalog.Candidates(st.addon.ComponentName(), spec)
	if err != nil {
		return stalled(channels.ReasonOf(err), err)
	}
	if spec.Version == "" {
		kubernetes, err := r.clusterVersion(ctx)
		if err != nil {
			return failed(addonsv1alpha1.ReasonPreflightFailed, fmt.Errorf("reading the cluster's Kubernetes version: %w", err))
		}
		if candidates, err = supportedCandidates(st.catalog, candidates, kubernetes); err != nil {
			return stalled(versionReason(err), err)
		}
	}
	status := st.addon.GetAddonStatus()
	choice, err := chooseVersion(candidates, runningVersion(status), st.addon.GetAddonSpec().Upgrade)
	if err != nil {
		return stalled(addonsv1alpha1.ReasonDowngradeRefused, err)
	}
	st.resolved, st.versionHeld = choice.resolved, choice.held
	status.AvailableVersion = choice.available
	st.wanted = pinVersion(st.addon, &st.resolved)
	return proceed()
}

// versionReason is the condition reason of an error of a package's metadata or of the
// channel's Kubernetes ranges.
func versionReason(err error) string {
	if _, ok := errors.AsType[*channels.Error](err); ok {
		return channels.ReasonOf(err)
	}
	return sources.ReasonOf(err)
}

// resolveSource picks the channels the add-on's packages come from: the current artifact
// of the AddonSource spec.sourceRef names, else the built-in packages. A source that does
// not exist or has no artifact yet stops the add-on with SourceNotReady: nothing is
// applied or pruned, and the add-on is reconciled again as soon as the source has one.
func (r *Reconciler) resolveSource(st *reconcileState) outcome {
	name := st.addon.GetAddonSpec().SourceRef
	if name == "" {
		st.catalog = r.catalog
		return proceed()
	}
	if r.opts.Artifacts == nil {
		return progressing(addonsv1alpha1.ReasonSourceNotReady,
			fmt.Sprintf("AddonSource %s cannot be used: this manager serves no AddonSources", name))
	}
	artifact, err := r.opts.Artifacts.Lookup(name)
	if err != nil {
		return progressing(addonsv1alpha1.ReasonSourceNotReady, err.Error())
	}
	st.artifact, st.catalog = artifact, artifact.Catalog
	return proceed()
}

// pinVersion keeps a failed upgrade rolled back: while the spec still asks for the
// version that failed, resolved becomes the last healthy version, and pinVersion returns
// the version the spec wants ("" when nothing is pinned). Once the spec asks for
// something else, the failure is forgotten.
func pinVersion(addon addonsv1alpha1.Addon, resolved *channels.Resolved) (wanted string) {
	status := addon.GetAddonStatus()
	up := status.Upgrade
	if up == nil || up.FailedVersion == "" {
		return ""
	}
	if up.FailedVersion != resolved.Version || up.FailedGeneration != addon.GetGeneration() {
		// The spec changed since the failure: try what it asks for now.
		up.FailedVersion, up.FailedGeneration = "", 0
		if up.Version == "" {
			status.Upgrade = nil
		}
		return ""
	}
	if rollbackEnabled(addon) && status.LastHealthyVersion != "" && status.LastHealthyVersion != resolved.Version {
		wanted = resolved.Version
		resolved.Version = status.LastHealthyVersion
	}
	return wanted
}

// rollbackEnabled returns spec.upgrade.rollback, true by default.
func rollbackEnabled(obj addonsv1alpha1.Addon) bool {
	if u := obj.GetAddonSpec().Upgrade; u != nil && u.Rollback != nil {
		return *u.Rollback
	}
	return true
}
