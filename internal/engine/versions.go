package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/sources"
)

// versionChoice is the version an add-on moves to under its upgrade policy, and what it
// does not move to by itself.
type versionChoice struct {
	// resolved is the package to apply.
	resolved channels.Resolved
	// available is a newer version the channel offers that the policy holds back
	// (status.availableVersion); empty when none.
	available string
	// held explains, on a Ready add-on, why it does not run the version its channel
	// points at: a refused downgrade, an upgrade awaiting approval or outside the policy.
	held *conditionNote
}

// chooseVersion applies spec.upgrade to the candidates an add-on resolved to (newest
// first, each supporting the cluster), given running, the version it runs (the last
// healthy one, else the last applied one; empty for a new add-on):
//   - a pinned version is applied as it is, unless it is older than running without
//     allowDowngrade: then it is refused with DowngradeRefused (an error);
//   - a channel-following add-on moves to the newest candidate its policy allows
//     (Latest: any; SameMinor: the running minor's), never to an older version than
//     running without allowDowngrade, and under approval: Manual only to the version
//     approvedVersion names; otherwise it stays on running, and the choice says why.
//
// Going back to the last healthy version is never a downgrade: running is that version.
func chooseVersion(candidates []channels.Resolved, running string, up *addonsv1alpha1.UpgradeSpec) (versionChoice, error) {
	if up == nil {
		up = &addonsv1alpha1.UpgradeSpec{}
	}
	target := candidates[0]
	switch {
	case running == "":
		return versionChoice{resolved: target}, nil
	case target.Channel != "":
		return chooseChannelVersion(candidates, running, up), nil
	case downgrade(target.Version, running) && !up.AllowDowngrade:
		return versionChoice{}, fmt.Errorf("spec.version %s is older than the running %s %s: kaddons does not downgrade "+
			"unless spec.upgrade.allowDowngrade is true (a downgrade can lose data or configuration)",
			target.Version, target.Addon, running)
	}
	return versionChoice{resolved: target}, nil
}

// chooseChannelVersion is chooseVersion for an add-on that follows a channel.
func chooseChannelVersion(candidates []channels.Resolved, running string, up *addonsv1alpha1.UpgradeSpec) versionChoice {
	target := candidates[0]
	stay := channels.Resolved{Addon: target.Addon, Version: running, Channel: target.Channel}
	if downgrade(target.Version, running) {
		if up.AllowDowngrade {
			return versionChoice{resolved: target}
		}
		return versionChoice{resolved: stay, held: &conditionNote{reason: addonsv1alpha1.ReasonDowngradeRefused,
			message: fmt.Sprintf("channel %s lists %s %s, older than the running %s: kaddons does not downgrade "+
				"unless spec.upgrade.allowDowngrade is true", target.Channel, target.Addon, target.Version, running)}}
	}
	newest := target
	if up.Policy == addonsv1alpha1.UpgradePolicySameMinor {
		target = stay
		for _, c := range candidates {
			if sameMinor(c.Version, running) && channels.CompareVersions(c.Version, running) >= 0 {
				target = c
				break
			}
		}
	}
	choice := versionChoice{resolved: target}
	if up.Approval == addonsv1alpha1.UpgradeApprovalManual && channels.CompareVersions(target.Version, running) > 0 {
		choice = approved(candidates, running, target, stay, up.ApprovedVersion)
	}
	if choice.held == nil && channels.CompareVersions(newest.Version, choice.resolved.Version) > 0 {
		choice.available = newest.Version
		choice.held = &conditionNote{reason: addonsv1alpha1.ReasonUpgradeOutsidePolicy,
			message: fmt.Sprintf("%s %s is available on channel %s, outside spec.upgrade.policy %s: name it in spec.version, "+
				"or set spec.upgrade.policy: %s", newest.Addon, newest.Version, newest.Channel, up.Policy, addonsv1alpha1.UpgradePolicyLatest)}
	}
	return choice
}

// approved is the choice under approval: Manual between running and target, a newer
// version the policy allows: the approved version when the channel lists it between the
// two, else running, with target waiting for approval.
func approved(candidates []channels.Resolved, running string, target, stay channels.Resolved, approvedVersion string) versionChoice {
	awaiting := &conditionNote{reason: addonsv1alpha1.ReasonUpgradeAwaitingApproval,
		message: fmt.Sprintf("%s %s is available on channel %s and waits for approval: set spec.upgrade.approvedVersion: %s",
			target.Addon, target.Version, target.Channel, target.Version)}
	for _, c := range candidates {
		if c.Version == approvedVersion && channels.CompareVersions(c.Version, running) > 0 &&
			channels.CompareVersions(c.Version, target.Version) <= 0 {
			if c.Version == target.Version {
				return versionChoice{resolved: c}
			}
			return versionChoice{resolved: c, available: target.Version, held: awaiting}
		}
	}
	return versionChoice{resolved: stay, available: target.Version, held: awaiting}
}

// downgrade reports whether moving from running to target goes back a release: as
// semantic versions, target's major.minor.patch is below running's. Builds of one release
// (1.12.1, 1.12.1-kops.2, 1.12.1+fix) are package revisions, not downgrades, in either
// direction: a pre-release part is how packagers number them, and semver would order
// 1.12.1-kops.2 before 1.12.1. Versions that are not semantic compare as strings.
func downgrade(target, running string) bool {
	t, errT := semver.NewVersion(target)
	r, errR := semver.NewVersion(running)
	if errT != nil || errR != nil {
		return channels.CompareVersions(target, running) < 0
	}
	core := func(v *semver.Version) *semver.Version { return semver.New(v.Major(), v.Minor(), v.Patch(), "", "") }
	return core(t).LessThan(core(r))
}

// sameMinor reports whether a and b are semantic versions of one major and minor.
func sameMinor(a, b string) bool {
	va, errA := semver.NewVersion(a)
	vb, errB := semver.NewVersion(b)
	return errA == nil && errB == nil && va.Major() == vb.Major() && va.Minor() == vb.Minor()
}

// runningVersion is the version an add-on's upgrade policy compares with: the last
// version that was Ready, else the last one applied; empty for a new add-on.
func runningVersion(status *addonsv1alpha1.AddonStatus) string {
	if status.LastHealthyVersion != "" {
		return status.LastHealthyVersion
	}
	return status.AppliedVersion
}

// supportedCandidates keeps the candidates whose package supports kubernetes (every one
// when kubernetes is empty, that is unknown). None left is a KubernetesVersionUnsupported
// error that lists each candidate's range.
func supportedCandidates(catalog *channels.Catalog, candidates []channels.Resolved, kubernetes string) ([]channels.Resolved, error) {
	if kubernetes == "" {
		return candidates, nil
	}
	var kept []channels.Resolved
	var ranges []string
	for _, c := range candidates {
		m, err := sources.ReadPackageMetadata(catalog.FS(), c.Addon, c.Version)
		if err != nil {
			return nil, err
		}
		ok, err := m.SupportsKubernetes(kubernetes)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, c)
		}
		ranges = append(ranges, fmt.Sprintf("%s supports %s", c.Version, m.KubernetesVersions))
	}
	if len(kept) == 0 {
		return nil, &channels.Error{Reason: addonsv1alpha1.ReasonKubernetesVersionUnsupported, Message: fmt.Sprintf(
			"channel %s lists no %s version that supports Kubernetes %s (%s)",
			candidates[0].Channel, candidates[0].Addon, kubernetes, strings.Join(ranges, "; "))}
	}
	return kept, nil
}

// clusterVersion returns the cluster's Kubernetes version through Options.Operator, or
// "" when this reconciler has no way to read it (a tool that only renders): then no
// package's Kubernetes range is checked.
func (r *Reconciler) clusterVersion(ctx context.Context) (string, error) {
	if r.opts.Operator.KubernetesVersion == nil {
		return "", nil
	}
	return r.opts.Operator.KubernetesVersion(ctx)
}

// upgradeableNote is the Upgradeable condition of an add-on.
type upgradeableNote struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// NextMinor returns the Kubernetes minor after kubernetes (v1.37.2 gives v1.38.0), the
// version a cluster upgrade goes to next.
func NextMinor(kubernetes string) (string, error) {
	v, err := semver.NewVersion(kubernetes)
	if err != nil {
		return "", fmt.Errorf("the Kubernetes version %q cannot be read: %w", kubernetes, err)
	}
	return fmt.Sprintf("v%d.%d.0", v.Major(), v.Minor()+1), nil
}

// upgradeable tells whether resolved, whose package metadata is pkg, supports the
// Kubernetes minor after kubernetes: Unknown when the cluster's version is unknown.
func upgradeable(catalog *channels.Catalog, resolved channels.Resolved, pkg sources.Metadata, kubernetes string) *upgradeableNote {
	if kubernetes == "" {
		return nil
	}
	next, err := NextMinor(kubernetes)
	if err != nil {
		return &upgradeableNote{status: metav1.ConditionUnknown, reason: addonsv1alpha1.ReasonKubernetesVersionUnknown, message: err.Error()}
	}
	check, err := CheckKubernetesVersion(catalog, resolved.Addon, resolved.Version, pkg, next)
	if err != nil {
		return &upgradeableNote{status: metav1.ConditionUnknown, reason: addonsv1alpha1.ReasonKubernetesVersionUnknown, message: err.Error()}
	}
	if check.Supported {
		message := fmt.Sprintf("%s %s supports Kubernetes %s (%s)", resolved.Addon, resolved.Version, minorOf(next), check.Range)
		if check.Range == "" {
			message = fmt.Sprintf("%s %s declares no Kubernetes range", resolved.Addon, resolved.Version)
		}
		return &upgradeableNote{status: metav1.ConditionTrue, reason: addonsv1alpha1.ReasonKubernetesVersionSupported, message: message}
	}
	return &upgradeableNote{status: metav1.ConditionFalse, reason: addonsv1alpha1.ReasonNextKubernetesVersionUnsupported,
		message: check.Message}
}

// minorOf shortens v1.38.0 to 1.38.
func minorOf(version string) string {
	v, err := semver.NewVersion(version)
	if err != nil {
		return version
	}
	return fmt.Sprintf("%d.%d", v.Major(), v.Minor())
}

// KubernetesCheck is whether one add-on version supports a Kubernetes version, and what
// to change when it does not.
type KubernetesCheck struct {
	// Supported is true when the version's package admits the Kubernetes version (or
	// declares no range).
	Supported bool
	// Range is the package's Kubernetes range; empty when it declares none.
	Range string
	// Suggested is the newest version of the add-on in the catalog whose package supports
	// the Kubernetes version; empty when none does or Supported is true.
	Suggested string
	// Message says it in a sentence, naming Suggested.
	Message string
}

// CheckKubernetesVersion tells whether version of addon, whose package metadata is pkg,
// supports the Kubernetes version kubernetes, and, when it does not, which version of the
// catalog does: the newest release (a semantic version without a pre-release part), as
// `kubectl kaddons check` and the Upgradeable condition report it.
func CheckKubernetesVersion(catalog *channels.Catalog, addon, version string, pkg sources.Metadata, kubernetes string) (KubernetesCheck, error) {
	ok, err := pkg.SupportsKubernetes(kubernetes)
	if err != nil {
		return KubernetesCheck{}, err
	}
	check := KubernetesCheck{Supported: ok, Range: pkg.KubernetesVersions}
	if ok {
		return check, nil
	}
	versions := catalog.Versions(addon)
	for i := len(versions) - 1; i >= 0; i-- {
		if v, err := semver.NewVersion(versions[i]); err != nil || v.Prerelease() != "" {
			// Only releases are suggested: not 1.12.1-rc.1, nor a test build.
			continue
		}
		m, err := sources.ReadPackageMetadata(catalog.FS(), addon, versions[i])
		if err != nil {
			continue
		}
		if supported, err := m.SupportsKubernetes(kubernetes); err == nil && supported &&
			(check.Suggested == "" || channels.CompareVersions(versions[i], check.Suggested) > 0) {
			check.Suggested = versions[i]
		}
	}
	check.Message = fmt.Sprintf("%s %s supports Kubernetes %s, not %s", addon, version, pkg.KubernetesVersions, minorOf(kubernetes))
	if check.Suggested != "" {
		check.Message += fmt.Sprintf(": %s %s does; move to it (spec.version, or a channel that lists it) before the cluster upgrade",
			addon, check.Suggested)
	} else {
		check.Message += "; no version of the catalog supports it yet"
	}
	return check, nil
}
