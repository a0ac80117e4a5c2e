// Package helm renders a Helm chart into Kubernetes objects, template only, for the
// channels catalog: a package folder with a Chart.yaml is a Helm chart, which the
// catalog renders with Render (internal/channels/chart.go).
//
// Render runs the Helm v4 SDK's template engine (helm.sh/helm/v4/pkg/engine) directly,
// as `helm template` does, without pkg/action: no release, no release Secret, no
// history, no cluster connection. kaddons' inventory and status are the record. The
// Kubernetes version and the API versions that .Capabilities reports come from the
// request (the catalog reads them from the live cluster).
//
// The render is hardened as the kustomize path of the channels is:
//
//   - The chart is read from an fs.FS only, and only the chart's folder: a symbolic
//     link, a device, a file over the package caps (MaxChartBytes, MaxChartFiles) or a
//     vendored subchart archive with an absolute path, a path through "..", a link or
//     more than the caps once expanded is refused (PackageRefused, PackageTooLarge).
//     .Files.Get and .Files.Glob look up the chart's own files in memory, so they can see
//     nothing else; a template that names a path outside the chart as a literal is
//     refused before rendering (PackageRefused).
//   - Every dependency of Chart.yaml must be vendored under charts/; kaddons never
//     downloads one (ChartRefused, naming the dependency and its repository).
//   - No network, no cluster: lookup returns an empty map and getHostByName an empty
//     string; values.schema.json may only refer to itself. env and expandenv are not
//     there (the SDK removes them).
//   - Caps: MaxRenderedBytes of rendered templates and MaxObjects objects
//     (PackageTooLarge, checked on the rendered text before any object is decoded);
//     template execution is bounded by RenderTimeout and by guards on the template
//     functions (see guard.go).
//   - Values are validated against the chart's values.schema.json, and its
//     subcharts', before rendering (ValuesInvalid, naming the field).
//   - Helm hooks become apply waves (see hooks.go); the others are refused
//     (HookNotSupported, naming the object and the hook).
//   - A template error is RenderFailed with Helm's message (template file and line).
//
// The output is stable: CRDs from crds/ first, in Helm's order, then the objects in the
// order `helm template --include-crds` prints them (kind install order, then the
// hooks), with Helm's own annotations (helm.sh/..., meta.helm.sh/...) removed.
package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels/packageerr"
)

// Caps on one chart and its render. A chart that exceeds one is refused with
// ReasonPackageTooLarge before anything is applied.
const (
	// MaxChartBytes caps the total size of a chart's files, its vendored subchart
	// archives counted expanded. It is the cap on any package (channels.MaxPackageBytes).
	MaxChartBytes = 8 << 20
	// MaxChartFiles caps the number of files of a chart, its vendored subchart archives
	// counted expanded. It is the cap on any package (channels.MaxPackageFiles).
	MaxChartFiles = 512
	// MaxRenderedBytes caps what the templates render, NOTES.txt aside. The largest
	// charts in use (a monitoring stack with its dashboards) render a few MiB.
	MaxRenderedBytes = 32 << 20
	// MaxObjects caps the objects a chart renders, its CRDs included: the most objects
	// an add-on's inventory holds.
	MaxObjects = addonsv1alpha1.MaxInventoryObjects
	// RenderTimeout bounds the execution of a chart's templates when the context allows
	// longer. Real charts render in well under a second.
	RenderTimeout = 30 * time.Second
	// maxChartDepth caps how deeply a chart's folders nest, and vendored subcharts within
	// subcharts.
	maxChartDepth = 16
)

// Request is one render of a chart.
type Request struct {
	// Chart holds the package folder: Chart.yaml, values.yaml, values.schema.json,
	// templates/, charts/ (vendored subcharts, as folders or .tgz archives), crds/.
	Chart fs.FS
	// Dir is the chart's folder within Chart ("." for its root).
	Dir string
	// Key is "<addon>/<version>", for messages.
	Key string
	// ReleaseName and Namespace are .Release.Name and .Release.Namespace.
	ReleaseName, Namespace string
	// Values are merged over the chart's values.yaml, as `helm template -f` merges a
	// values file: the add-on's typed fields. They must be what JSON decodes to (maps,
	// slices, strings, numbers, booleans); they are not modified.
	Values map[string]any
	// UserValues are the user's free-form values (spec.values), merged under Values: a
	// typed field wins over the same key here. A chart takes them only when it declares
	// what it accepts in a values.schema.json; otherwise they are ValuesInvalid.
	UserValues map[string]any
	// KubeVersion is the cluster's Kubernetes version (v1.37.2), for
	// .Capabilities.KubeVersion and Chart.yaml's kubeVersion; empty means Helm's
	// default, as for `helm template`.
	KubeVersion string
	// APIVersions are the live cluster's group/versions and group/version/Kinds, for
	// .Capabilities.APIVersions.Has. When nil, Helm's defaults (every API version the
	// SDK knows) are used, as for `helm template`; when set, only these, as for
	// `helm install`.
	APIVersions []string
}

// Result is what a chart renders.
type Result struct {
	// CRDs are the objects of the crds/ folders of the chart and its enabled subcharts,
	// in Helm's order. The catalog applies them in the CRD stage and upgrades them.
	CRDs []*unstructured.Unstructured
	// Objects are what the templates render, in the order `helm template` prints them,
	// the hooks last, mapped to apply waves (see hooks.go).
	Objects []*unstructured.Unstructured
	// Manifest is the CRDs and the objects as one YAML stream, CRDs first.
	Manifest string
	// Nondeterministic lists, sorted, the template functions the render called whose
	// result is not a function of the inputs (randAlphaNum, genCA, now, ...): such a
	// chart renders differently each time unless its values fill in what they make.
	Nondeterministic []string
}

// Error is a render failure caused by the chart or the values, not by the cluster: the
// channels catalog's own error type (packageerr.Error), so that the catalog returns it as
// it is. Retrying cannot help until the chart or the values change.
type Error = packageerr.Error

// ReasonOf returns the condition reason carried by err, or ReasonRenderFailed when err
// is not an Error.
func ReasonOf(err error) string { return packageerr.ReasonOf(err) }

// fail builds an Error of the chart key with a formatted message.
func fail(reason string, cause error, key, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf("chart %s: %s", key, fmt.Sprintf(format, args...)), Err: cause}
}

// Render renders the chart of req. It reads nothing but req.Chart, contacts nothing,
// and fails with an *Error that carries the condition reason; on error there is no
// Result.
func Render(ctx context.Context, req Request) (*Result, error) {
	key := req.Key
	files, err := readChart(req.Chart, req.Dir, key)
	if err != nil {
		return nil, err
	}
	chrt, err := loadChart(files, key)
	if err != nil {
		return nil, err
	}
	if err := checkDependencies(chrt, key); err != nil {
		return nil, err
	}
	if err := checkTemplates(chrt, key); err != nil {
		return nil, err
	}
	caps, err := capabilities(req)
	if err != nil {
		return nil, err
	}
	if chrt.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fail(addonsv1alpha1.ReasonKubernetesVersionUnsupported, nil, key,
			"requires Kubernetes %s (Chart.yaml kubeVersion); the cluster runs %s", chrt.Metadata.KubeVersion, caps.KubeVersion.Version)
	}
	vals, err := mergeValues(chrt, req, key)
	if err != nil {
		return nil, err
	}
	// Conditions and tags disable subcharts; import-values copy theirs up. Dependencies
	// were checked above, so this drops none silently.
	if err := chartutil.ProcessDependencies(chrt, vals); err != nil {
		return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, key, "processing the dependencies")
	}
	coalesced, err := util.CoalesceValues(chrt, vals)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonValuesInvalid, err, key, "merging the values")
	}
	if err := validateValues(chrt, coalesced, key); err != nil {
		return nil, err
	}
	// As `helm template` renders: a first install, revision 1. A template-only render
	// knows no previous release.
	options := common.ReleaseOptions{Name: req.ReleaseName, Namespace: req.Namespace, Revision: 1, IsInstall: true}
	renderVals, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, options, caps, true)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonValuesInvalid, err, key, "merging the values")
	}
	rendered, nondeterministic, err := execute(ctx, chrt, renderVals, key)
	if err != nil {
		return nil, err
	}
	res, err := assemble(chrt, rendered, key)
	if err != nil {
		return nil, err
	}
	res.Nondeterministic = nondeterministic
	return res, nil
}

// capabilities returns what .Capabilities reports: Helm's defaults, with the request's
// Kubernetes version and, when it names any, only its API versions.
func capabilities(req Request) (*common.Capabilities, error) {
	caps := common.DefaultCapabilities.Copy()
	if req.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(req.KubeVersion)
		if err != nil {
			return nil, fail(addonsv1alpha1.ReasonRenderFailed, err, req.Key, "the cluster's Kubernetes version %q", req.KubeVersion)
		}
		caps.KubeVersion = *kv
	}
	if req.APIVersions != nil {
		caps.APIVersions = slices.Clone(common.VersionSet(req.APIVersions))
	}
	return caps, nil
}

// mergeValues returns the values of req for chrt: a copy of UserValues with Values
// merged over it (a typed field wins; maps merge key by key, anything else is replaced).
// UserValues are refused unless the chart has a values.schema.json: a chart without one
// declares no free-form values, and nothing would check them.
func mergeValues(chrt *chart.Chart, req Request, key string) (map[string]any, error) {
	typed, err := copyValues(req.Values)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonValuesInvalid, err, key, "the values are not a JSON object")
	}
	if len(req.UserValues) == 0 {
		return typed, nil
	}
	if chrt.Schema == nil {
		return nil, fail(addonsv1alpha1.ReasonValuesInvalid, nil, key,
			"spec.values is set, but chart %s declares no values (it has no values.schema.json); use the add-on's typed fields or spec.patches",
			chrt.Name())
	}
	user, err := copyValues(req.UserValues)
	if err != nil {
		return nil, fail(addonsv1alpha1.ReasonValuesInvalid, err, key, "spec.values is not a JSON object")
	}
	return overlay(user, typed), nil
}

// overlay merges over into base (which it modifies and returns): maps merge key by key,
// anything else in over replaces what base holds.
func overlay(base, over map[string]any) map[string]any {
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := base[k].(map[string]any); ok {
				base[k] = overlay(bm, vm)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// copyValues returns a deep copy of values as Helm reads a values file: through JSON, so
// that numbers, maps and lists are the types the templates and the schema expect.
func copyValues(values map[string]any) (map[string]any, error) {
	if len(values) == 0 {
		return map[string]any{}, nil
	}
	data, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	out, err := common.ReadValues(data)
	if err != nil {
		return nil, err
	}
	return out.AsMap(), nil
}

// execute runs the template engine on chrt in a goroutine of its own, bounded by
// RenderTimeout (or ctx, when sooner) and by the guards of guard.go, and returns the
// rendered files by template path, NOTES.txt left out, with the names of the
// nondeterministic functions the templates called.
//
// The SDK's engine takes no writer and checks no context between template actions, so
// the bound is the guards: every template function of sprig, and lookup,
// getHostByName and printf, first checks whether the render was stopped (the deadline
// passed, or the bytes the functions returned passed their cap) and fails the template
// if so; the functions that allocate in proportion to an argument (until, repeat,
// indent, printf's width, ...) check it first. When the deadline passes, Render returns
// at once and the engine's goroutine ends at its next function call. What no guard
// sees is a loop whose body calls no function: a range over a literal number is
// checked before the render (checkTemplates), but a range over a number a function
// computed runs to its end, its output then refused by MaxRenderedBytes.
func execute(ctx context.Context, chrt *chart.Chart, vals common.Values, key string) (map[string]string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, RenderTimeout)
	defer cancel()
	g := newGuard(key)
	deadline := func() {
		g.stop(fail(addonsv1alpha1.ReasonRenderFailed, context.Cause(ctx), key,
			"the templates did not finish rendering (the cap on a render is %s)", RenderTimeout))
	}
	stop := context.AfterFunc(ctx, deadline)
	defer stop()

	e := engine.Engine{EnableDNS: false, CustomTemplateFuncs: g.funcs()}
	type output struct {
		files map[string]string
		err   error
	}
	done := make(chan output, 1)
	go func() {
		files, err := e.RenderWithContext(ctx, chrt, vals)
		done <- output{files, err}
	}()
	var out output
	select {
	case out = <-done:
	case <-ctx.Done():
		// The engine stops at its next template function; its result is not waited for.
		// AfterFunc's goroutine may not have run yet: stop here too (the first stop wins).
		deadline()
		return nil, nil, g.stopped()
	}
	if err := g.stopped(); err != nil {
		return nil, nil, err
	}
	if out.err != nil {
		return nil, nil, fail(addonsv1alpha1.ReasonRenderFailed, nil, key, "%s", oneLine(out.err.Error(), " "))
	}
	total := 0
	for name, content := range out.files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(out.files, name)
			continue
		}
		total += len(content)
	}
	if total > MaxRenderedBytes {
		return nil, nil, fail(addonsv1alpha1.ReasonPackageTooLarge, nil, key,
			"the templates render %d bytes, more than %d (the cap on a chart's rendered templates)", total, MaxRenderedBytes)
	}
	return out.files, g.nondeterministic(), nil
}

// oneLine joins the lines of a multi-line message of the SDK (a template error's
// location, function and cause; a schema's violations, "- " each) with sep, for a
// condition message.
func oneLine(msg, sep string) string {
	var parts []string
	for line := range strings.SplitSeq(msg, "\n") {
		if line = strings.TrimPrefix(strings.TrimSpace(line), "- "); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, sep)
}

// encode writes objects as one YAML stream.
func encode(objects []*unstructured.Unstructured) (string, error) {
	var b bytes.Buffer
	for _, u := range objects {
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String(), nil
}
