package channels

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"strings"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels/helm"
)

// ChartFile is the file that makes a package folder a Helm chart: a package holds either
// a kustomization.yaml (built with kustomize) or a Chart.yaml (rendered with the Helm
// SDK, see internal/channels/helm), never both.
const ChartFile = "Chart.yaml"

// maxChartRenders caps the chart renders the catalog keeps: one per package, values and
// capabilities in use. When full, an entry is dropped, and rendered again when needed.
const maxChartRenders = 1024

// Capabilities is what a chart's .Capabilities reports: the live cluster's Kubernetes
// version and the group/versions and group/version/Kinds it serves.
type Capabilities struct {
	// KubeVersion is the cluster's version, e.g. v1.37.2; empty means Helm's default.
	KubeVersion string
	// APIVersions are "group/version" and "group/version/Kind" strings; nil means Helm's
	// defaults (every API version the SDK knows), as for `helm template`.
	APIVersions []string
}

// Request is one render of a package. A kustomize package reads only Package; a Helm
// chart reads the rest as well.
type Request struct {
	// Package is the resolved package.
	Package Resolved
	// ReleaseName and Namespace are a chart's .Release.Name and .Release.Namespace.
	ReleaseName, Namespace string
	// Values are the chart values the add-on's typed fields map to.
	Values map[string]any
	// UserValues are the user's free-form values (spec.values), merged under Values. A
	// chart takes them only when it has a values.schema.json, which validates them; a
	// kustomize package never does.
	UserValues map[string]any
	// Capabilities are the live cluster's.
	Capabilities Capabilities
}

// IsChart reports whether the package of r is a Helm chart.
func (s *Catalog) IsChart(r Resolved) bool {
	if !validAddon.MatchString(r.Addon) || !validVersion(r.Version) {
		return false
	}
	return isFile(s.fsys, path.Join(packageDir(r.Addon, r.Version), ChartFile))
}

// isFile reports whether name exists in fsys and is not a folder.
func isFile(fsys fs.FS, name string) bool {
	info, err := fs.Stat(fsys, name)
	return err == nil && !info.IsDir()
}

// renderChart renders the chart package of req at dir, whose files have the fingerprint
// fp: from the cache when the package, the values, the release and the capabilities are
// what they were. A chart whose templates call a function with a different result on
// every render (randAlphaNum, genCA, now, ...) is refused: kaddons applies what it
// renders, so such a chart would rotate its generated secrets on every render.
func (s *Catalog) renderChart(ctx context.Context, req Request, dir, key, fp string) (string, error) {
	if isFile(s.fsys, path.Join(dir, "kustomization.yaml")) {
		return "", refusedf(key, "holds both a kustomization.yaml and a %s; a package is one or the other", ChartFile)
	}
	inputs, err := json.Marshal(struct {
		Release, Namespace string
		Values, UserValues map[string]any
		Capabilities       Capabilities
	}{req.ReleaseName, req.Namespace, req.Values, req.UserValues, req.Capabilities})
	if err != nil {
		return "", errorf(addonsv1alpha1.ReasonValuesInvalid, err, "package %s: the values are not JSON", key)
	}
	sum := sha256.Sum256(inputs)
	cacheKey := key + "\x00" + hex.EncodeToString(sum[:])

	s.mu.Lock()
	cached, ok := s.renders[cacheKey]
	s.mu.Unlock()
	if ok && cached.fingerprint == fp {
		return cached.manifest, nil
	}

	res, err := helm.Render(ctx, helm.Request{
		Chart: s.fsys, Dir: dir, Key: key,
		ReleaseName: req.ReleaseName, Namespace: req.Namespace,
		Values: req.Values, UserValues: req.UserValues,
		KubeVersion: req.Capabilities.KubeVersion, APIVersions: req.Capabilities.APIVersions,
	})
	if err != nil {
		if _, ok := errors.AsType[*Error](err); ok {
			return "", err
		}
		return "", errorf(addonsv1alpha1.ReasonRenderFailed, err, "rendering chart %s", key)
	}
	if len(res.Nondeterministic) > 0 {
		return "", errorf(addonsv1alpha1.ReasonChartRefused, nil,
			"chart %s: its templates call %s, which render differently every time; kaddons applies what it renders, "+
				"so the objects they fill would change on every render: set the values that fill them in "+
				"(an existing Secret, a certificate from cert-manager)", key, strings.Join(res.Nondeterministic, ", "))
	}
	s.mu.Lock()
	if len(s.renders) >= maxChartRenders {
		for k := range s.renders {
			if strings.Contains(k, "\x00") {
				delete(s.renders, k)
				break
			}
		}
	}
	s.renders[cacheKey] = cachedRender{fingerprint: fp, manifest: res.Manifest}
	s.mu.Unlock()
	return res.Manifest, nil
}
