package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	configv1beta1 "github.com/kaddons/kaddons/api/config/v1beta1"
)

// Kind is the kind of the configuration file in every version.
const Kind = "OperatorConfiguration"

// fileVersion is one supported apiVersion of the configuration file.
type fileVersion struct {
	apiVersion string
	// decode decodes the file's JSON strictly and converts it to the hub.
	decode func(data []byte) (*Configuration, error)
	// paths maps the hub's field paths to the version's.
	paths pathRenames
}

// fileVersions lists the supported versions, oldest first.
var fileVersions = []fileVersion{
	{
		apiVersion: configv1alpha1.GroupVersion.String(),
		decode: func(data []byte) (*Configuration, error) {
			var file configv1alpha1.OperatorConfiguration
			if err := decodeStrict(data, &file); err != nil {
				return nil, err
			}
			return FromV1alpha1(&file), nil
		},
		paths: v1alpha1Paths,
	},
	{
		apiVersion: configv1beta1.GroupVersion.String(),
		decode: func(data []byte) (*Configuration, error) {
			var file configv1beta1.OperatorConfiguration
			if err := decodeStrict(data, &file); err != nil {
				return nil, err
			}
			return FromV1beta1(&file), nil
		},
	},
}

// APIVersions lists the apiVersions of the configuration file that Load accepts.
func APIVersions() []string {
	out := make([]string, 0, len(fileVersions))
	for _, v := range fileVersions {
		out = append(out, v.apiVersion)
	}
	return out
}

// LoadOption adjusts what Load checks.
type LoadOption func(*loadOptions)

type loadOptions struct {
	kinds []string
}

// WithKinds makes Load reject add-on kinds, in concurrency overrides and paused kinds,
// that are not among kinds, the kinds this manager runs.
func WithKinds(kinds ...string) LoadOption {
	return func(o *loadOptions) { o.kinds = kinds }
}

// Load reads the configuration file at path: it decodes it strictly in the version its
// apiVersion names, converts it to the hub, fills in the defaults and validates it. Every
// error names the file and, where there is one, the field as that version spells it.
func Load(path string, opts ...LoadOption) (*Configuration, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration file: %w", err)
	}
	c, version, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("configuration file %s: %w", path, err)
	}
	Default(c)
	errs := Validate(c)
	if o.kinds != nil {
		errs = append(errs, ValidateKinds(c, o.kinds)...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("configuration file %s is invalid: %w", path, version.paths.rewrite(errs).ToAggregate())
	}
	return c, nil
}

// decode converts the one YAML document in data to the hub, through the version its
// apiVersion names. It neither defaults nor validates.
func decode(data []byte) (*Configuration, *fileVersion, error) {
	doc, err := singleDocument(data)
	if err != nil {
		return nil, nil, err
	}
	var typeMeta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := decodeLoose(doc, &typeMeta); err != nil {
		return nil, nil, err
	}
	supported := fmt.Sprintf("kind %s with apiVersion %s", Kind, strings.Join(APIVersions(), " or "))
	if typeMeta.APIVersion == "" || typeMeta.Kind == "" {
		return nil, nil, fmt.Errorf("apiVersion and kind must be set; supported: %s", supported)
	}
	var version *fileVersion
	for i := range fileVersions {
		if fileVersions[i].apiVersion == typeMeta.APIVersion {
			version = &fileVersions[i]
		}
	}
	if version == nil {
		return nil, nil, fmt.Errorf("apiVersion %q is not supported; supported: %s", typeMeta.APIVersion, supported)
	}
	if typeMeta.Kind != Kind {
		return nil, nil, fmt.Errorf("kind %q is not supported; supported: %s", typeMeta.Kind, supported)
	}
	c, err := version.decode(doc)
	if err != nil {
		return nil, nil, err
	}
	return c, version, nil
}

// singleDocument returns the JSON of the only YAML document in data. Duplicate keys are
// an error, and so is a second document, which would otherwise be ignored silently.
func singleDocument(data []byte) ([]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading YAML: %w", err)
		}
		doc, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			return nil, fmt.Errorf("not valid YAML: %s", oneLine(err))
		}
		if string(bytes.TrimSpace(doc)) != "null" {
			docs = append(docs, doc)
		}
	}
	switch len(docs) {
	case 0:
		return nil, errors.New("the file is empty")
	case 1:
		return docs[0], nil
	default:
		return nil, fmt.Errorf("the file holds %d YAML documents; it must hold one", len(docs))
	}
}

// oneLine joins the lines of a multi-line error message, as the YAML parser writes them.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// pathRename renames the field path from, and everything under it, to to.
type pathRename struct{ from, to string }

// pathRenames maps the hub's field paths to a file version's; the first match wins.
type pathRenames []pathRename

// apply returns path as the file version spells it.
func (r pathRenames) apply(path string) string {
	for _, rn := range r {
		if rest, ok := strings.CutPrefix(path, rn.from); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return rn.to + rest
		}
	}
	return path
}

// rewrite returns copies of errs with their field paths as the file version spells them.
func (r pathRenames) rewrite(errs field.ErrorList) field.ErrorList {
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		renamed := *e
		renamed.Field = r.apply(e.Field)
		out = append(out, &renamed)
	}
	return out
}
