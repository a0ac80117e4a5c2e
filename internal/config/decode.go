package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

// decodeStrict decodes the JSON in data into the struct that into points to, the way the
// API server decodes strictly: field names are case-sensitive, and unknown fields are
// errors. Every error names the field it is about.
func decodeStrict(data []byte, into any) error {
	strictErrs, err := kjson.UnmarshalStrict(data, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return describeDecodeError(data, reflect.TypeOf(into).Elem(), err)
	}
	if len(strictErrs) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(strictErrs))
	for _, e := range strictErrs {
		msg := e.Error()
		var fe kjson.FieldError
		if errors.As(e, &fe) && strings.HasPrefix(msg, "unknown field") {
			if s := suggest(reflect.TypeOf(into).Elem(), fe.FieldPath()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, ", "))
}

// decodeLoose decodes data like decodeStrict but ignores unknown fields.
func decodeLoose(data []byte, into any) error {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, into); err != nil {
		return describeDecodeError(data, reflect.TypeOf(into).Elem(), err)
	}
	return nil
}

// describeDecodeError turns err, which decoding data into a t failed with, into an error
// that names the field with the wrong value and says what it must be. The JSON decoder
// names the field only for some errors, and never for errors of a field's own decoder,
// such as a duration's.
func describeDecodeError(data []byte, t reflect.Type, err error) error {
	var raw any
	if kjson.UnmarshalCaseSensitivePreserveInts(data, &raw) != nil {
		return err
	}
	if _, ok := raw.(map[string]any); !ok {
		return errors.New("the file must be a YAML mapping of apiVersion, kind and the settings")
	}
	path, leafType, value := locate(raw, t, nil)
	if path == nil {
		return err
	}
	return field.TypeInvalid(path, value, expectation(leafType))
}

// locate returns the path, the Go type and the value of the first JSON value in raw that
// does not decode into its field of t, or a nil path if raw decodes.
func locate(raw any, t reflect.Type, path *field.Path) (*field.Path, reflect.Type, any) {
	if decodes(raw, t) {
		return nil, nil, nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return path, t, raw
	}
	switch t.Kind() {
	case reflect.Struct:
		if obj, ok := raw.(map[string]any); ok {
			for _, key := range slices.Sorted(maps.Keys(obj)) {
				f, ok := fieldByJSONName(t, key)
				if !ok {
					continue
				}
				if p, lt, v := locate(obj[key], f.Type, path.Child(key)); p != nil {
					return p, lt, v
				}
			}
		}
	case reflect.Map:
		if obj, ok := raw.(map[string]any); ok {
			for _, key := range slices.Sorted(maps.Keys(obj)) {
				if p, lt, v := locate(obj[key], t.Elem(), path.Key(key)); p != nil {
					return p, lt, v
				}
			}
		}
	case reflect.Slice:
		if list, ok := raw.([]any); ok {
			for i, item := range list {
				if p, lt, v := locate(item, t.Elem(), path.Index(i)); p != nil {
					return p, lt, v
				}
			}
		}
	}
	return path, t, raw
}

// decodes reports whether raw, a decoded JSON value, decodes into a t.
func decodes(raw any, t reflect.Type) bool {
	data, err := json.Marshal(raw)
	if err != nil {
		return false
	}
	return kjson.UnmarshalCaseSensitivePreserveInts(data, reflect.New(t).Interface()) == nil
}

// expectation says, for a user, what a value of type t must look like.
func expectation(t reflect.Type) string {
	if t == reflect.TypeFor[metav1.Duration]() {
		return `must be a duration, such as "15s", "10m" or "1h30m"`
	}
	switch t.Kind() {
	case reflect.Bool:
		return "must be true or false"
	case reflect.Int32:
		return "must be a whole number that fits in 32 bits"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "must be a whole number"
	case reflect.String:
		return "must be a string"
	case reflect.Struct, reflect.Map:
		return "must be a mapping"
	case reflect.Slice:
		return "must be a list"
	default:
		return "has the wrong type"
	}
}

// fieldByJSONName finds the field of struct type t that JSON name decodes into, looking
// into inlined embedded structs.
func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for f := range fieldsOf(t) {
		if jsonName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// fieldsOf yields the JSON-visible fields of struct type t, inlined ones flattened.
func fieldsOf(t reflect.Type) func(yield func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous && jsonName(f) == "" && f.Type.Kind() == reflect.Struct {
				for inner := range fieldsOf(f.Type) {
					if !yield(inner) {
						return
					}
				}
				continue
			}
			if f.IsExported() && jsonName(f) != "-" && !yield(f) {
				return
			}
		}
	}
}

// jsonName returns the name a struct field has in JSON.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" && !f.Anonymous {
		return f.Name
	}
	return name
}

// suggest returns the known field that the unknown field at path, in a t, was most
// likely meant to be, or "" if none is close.
func suggest(t reflect.Type, path string) string {
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		f, ok := fieldByJSONName(t, part)
		if !ok {
			return ""
		}
		t = f.Type
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
	}
	unknown := parts[len(parts)-1]
	best, bestDistance := "", 3 // at most two edits away
	for f := range fieldsOf(t) {
		name := jsonName(f)
		d := editDistance(strings.ToLower(unknown), strings.ToLower(name))
		if d < bestDistance {
			best, bestDistance = name, d
		}
	}
	if best == "" {
		return ""
	}
	parts[len(parts)-1] = best
	return strings.Join(parts, ".")
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
