package helm

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// schemaURL is where a chart's values.schema.json is placed for the validator, as Helm
// places it.
const schemaURL = "file:///values.schema.json"

// chartOnlyLoader is the validator's loader: it loads nothing. Helm's SDK would read a
// $ref to file:// from the operator's disk and one to http(s):// from the network; a
// chart's schema may only refer to itself (#/definitions/..., its own $id). A urn:
// reference validates everything, as Helm's loader does when no resolver knows it.
// It records the first reference it refused.
type chartOnlyLoader struct {
	refused string
}

// Load implements jsonschema.URLLoader.
func (l *chartOnlyLoader) Load(u string) (any, error) {
	if parsed, err := url.Parse(u); err == nil && parsed.Scheme == "urn" {
		return jsonschema.UnmarshalJSON(strings.NewReader("true"))
	}
	if l.refused == "" {
		l.refused = u
	}
	return nil, fmt.Errorf("a chart's values.schema.json may only refer to itself, not to %s", u)
}

// validateValues validates the merged values of c against its values.schema.json, and
// those of each enabled subchart against the subchart's, as Helm does before rendering,
// without loading anything from outside the chart. A violation is ReasonValuesInvalid,
// with the validator's message, which names the field (at '/replicas': got string, want
// integer); a schema that does not compile or refers outside the chart is
// ReasonChartRefused.
func validateValues(c *chart.Chart, values map[string]any, key string) error {
	if c.Schema != nil {
		schema, refusedRef, err := compileSchema(c.Schema)
		if err != nil {
			if refusedRef != "" {
				return fail(addonsv1alpha1.ReasonChartRefused, nil, key,
					"%s: values.schema.json refers to %s; a chart's schema may only refer to itself (kaddons loads no schema from disk or network)",
					c.ChartFullPath(), refusedRef)
			}
			return fail(addonsv1alpha1.ReasonRenderFailed, err, key, "%s: values.schema.json", c.ChartFullPath())
		}
		if err := schema.Validate(values); err != nil {
			msg := err.Error()
			if ve, ok := errors.AsType[*jsonschema.ValidationError](err); ok {
				msg = ve.Error()
			}
			msg = strings.TrimPrefix(msg, "jsonschema validation failed with '"+schemaURL+"#'\n")
			return fail(addonsv1alpha1.ReasonValuesInvalid, nil, key, "the values do not meet the schema of chart %s: %s",
				c.ChartFullPath(), oneLine(msg, "; "))
		}
	}
	for _, sub := range c.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subValues, ok := raw.(map[string]any)
		if !ok {
			return fail(addonsv1alpha1.ReasonValuesInvalid, nil, key, "the values of subchart %s are a %T, not an object",
				sub.ChartFullPath(), raw)
		}
		if err := validateValues(sub, subValues, key); err != nil {
			return err
		}
	}
	return nil
}

// compileSchema compiles a chart's values.schema.json with chartOnlyLoader, and returns
// the first reference outside the chart it refused, if any.
func compileSchema(data []byte) (*jsonschema.Schema, string, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, "", err
	}
	loader := &chartOnlyLoader{}
	compiler := jsonschema.NewCompiler()
	compiler.UseLoader(loader)
	if err := compiler.AddResource(schemaURL, doc); err != nil {
		return nil, "", err
	}
	schema, err := compiler.Compile(schemaURL)
	return schema, loader.refused, err
}
