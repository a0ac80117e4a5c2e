package sources

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// DevVersion is the version of an operator built without a release version
// (internal/version's default). A development build satisfies every minimum operator
// version: it is built from the newest sources.
const DevVersion = "dev"

// Check is the pre-flight of a bundle (or of one package's metadata) against the running
// operator: its id (empty means DefaultOperatorID), its version (DevVersion or empty
// satisfies every minimum) and the cluster's Kubernetes version (a git version such as
// v1.33.2 or v1.33.2+k3s1; its pre-release and build parts are ignored, so that
// v1.34.0-rc.1 and v1.33.0-gke.100 count as 1.34.0 and 1.33.0). It returns an *Error with
// ReasonOperatorMismatch, ReasonOperatorTooOld or ReasonKubernetesVersionUnsupported,
// checked in that order, or nil. A metadata field that is empty checks nothing.
func (m Metadata) Check(operatorID, operatorVersion, kubernetesVersion string) error {
	if operatorID == "" {
		operatorID = DefaultOperatorID
	}
	if m.OperatorID != "" && m.OperatorID != operatorID {
		return errorf(ReasonOperatorMismatch, nil, "the bundle is meant for operator %q, this operator is %q",
			m.OperatorID, operatorID)
	}
	if m.MinOperatorVersion != "" && operatorVersion != "" && operatorVersion != DevVersion {
		minimum, err := semver.StrictNewVersion(strings.TrimPrefix(m.MinOperatorVersion, "v"))
		if err != nil {
			return errorf(ReasonInvalidBundle, err, "the bundle's minimum operator version %q is not a semantic version",
				m.MinOperatorVersion)
		}
		running, err := semver.NewVersion(operatorVersion)
		if err != nil {
			return errorf(ReasonOperatorTooOld, err, "the bundle needs operator %s or newer; this operator's version %q is not a semantic version",
				m.MinOperatorVersion, operatorVersion)
		}
		if running.LessThan(minimum) {
			return errorf(ReasonOperatorTooOld, nil, "the bundle needs operator %s or newer, this operator is %s",
				m.MinOperatorVersion, operatorVersion)
		}
	}
	if m.KubernetesVersions != "" {
		ok, err := m.SupportsKubernetes(kubernetesVersion)
		if err != nil {
			return err
		}
		if !ok {
			return errorf(ReasonKubernetesVersionUnsupported, nil, "the bundle supports Kubernetes %s, the cluster runs %s",
				m.KubernetesVersions, kubernetesVersion)
		}
	}
	return nil
}

// SupportsKubernetes reports whether the metadata's Kubernetes range admits
// kubernetesVersion, a git version whose pre-release and build parts are ignored (see
// Check). An empty range admits every version. A range or version that cannot be read is
// an *Error: ReasonInvalidBundle for the range, ReasonKubernetesVersionUnsupported for
// the version.
func (m Metadata) SupportsKubernetes(kubernetesVersion string) (bool, error) {
	if m.KubernetesVersions == "" {
		return true, nil
	}
	constraint, err := semver.NewConstraint(m.KubernetesVersions)
	if err != nil {
		return false, errorf(ReasonInvalidBundle, err, "the Kubernetes range %q is not a version range", m.KubernetesVersions)
	}
	v, err := semver.NewVersion(kubernetesVersion)
	if err != nil {
		return false, errorf(ReasonKubernetesVersionUnsupported, err, "the range is Kubernetes %s; the cluster's version %q cannot be read",
			m.KubernetesVersions, kubernetesVersion)
	}
	core, err := semver.NewVersion(fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Patch()))
	if err != nil {
		return false, errorf(ReasonKubernetesVersionUnsupported, err, "reading Kubernetes version %q", kubernetesVersion)
	}
	return constraint.Check(core), nil
}
