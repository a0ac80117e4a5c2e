package patches

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		patches []string
		// field is a path into the object named by target, and want its value after Apply.
		target, field string
		want          any
		wantReason    string
		wantMessage   string
	}{{
		name:    "strategic merge on a typed kind",
		patches: []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":3}}`},
		target:  "Deployment", field: "spec.replicas", want: int64(3),
	}, {
		name: "a strategic merge keeps the other containers' fields",
		patches: []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},` +
			`"spec":{"template":{"spec":{"containers":[{"name":"coredns","image":"example.com/coredns:v2"}]}}}}`},
		target: "Deployment", field: "spec.template.spec.containers.0.args.0", want: "-conf",
	}, {
		name:    "JSON merge patch on a kind without a Go schema, null deletes",
		patches: []string{`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":null,"color":"blue"}}`},
		target:  "Widget", field: "spec.color", want: "blue",
	}, {
		name:    "patches apply in order",
		patches: []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":3}}`, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":5}}`},
		target:  "Deployment", field: "spec.replicas", want: int64(5),
	}, {
		name:    "a patch that deletes metadata cannot move its target",
		patches: []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","$patch":"delete"}}`},
		target:  "Deployment", field: "metadata.namespace", want: "kube-system",
	}, {
		name:       "a wrong type for a typed field",
		patches:    []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":"three"}}`},
		wantReason: addonsv1alpha1.ReasonInvalidPatch, wantMessage: "patches[0] (Deployment coredns) cannot be applied",
	}, {
		name:       "no target",
		patches:    []string{`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nope"}}`},
		wantReason: addonsv1alpha1.ReasonPatchTargetNotFound, wantMessage: "patches[0] targets ConfigMap nope (v1), which the package does not contain",
	}, {
		name:       "another namespace is another object",
		patches:    []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"other"},"spec":{"replicas":3}}`},
		wantReason: addonsv1alpha1.ReasonPatchTargetNotFound,
	}, {
		name:       "no apiVersion",
		patches:    []string{`{"kind":"Deployment","metadata":{"name":"coredns"}}`},
		wantReason: addonsv1alpha1.ReasonInvalidPatch, wantMessage: "patches[0] has no apiVersion",
	}, {
		name:       "the second patch is refused",
		patches:    []string{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"replicas":3}}`, `[]`},
		wantReason: addonsv1alpha1.ReasonInvalidPatch, wantMessage: "patches[1] is not an object",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objects, err := manifest.ParseObjects(context.Background(), fuzzManifest)
			if err != nil {
				t.Fatal(err)
			}
			raws := make([]*runtime.RawExtension, 0, len(tc.patches))
			for _, p := range tc.patches {
				raws = append(raws, &runtime.RawExtension{Raw: []byte(p)})
			}
			err = Apply(raws, objects)
			if tc.wantReason != "" {
				var ce *channels.Error
				if !errors.As(err, &ce) || ce.Reason != tc.wantReason {
					t.Fatalf("Apply = %v, want a refusal with reason %s", err, tc.wantReason)
				}
				if !strings.Contains(err.Error(), tc.wantMessage) {
					t.Errorf("Apply = %q, want it to say %q", err, tc.wantMessage)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			var obj *unstructured.Unstructured
			for _, o := range objects.Items {
				if o.Kind == tc.target {
					obj = o.UnstructuredObject()
				}
			}
			if got := fieldAt(t, obj.Object, tc.field); got != tc.want {
				t.Errorf("%s %s = %#v, want %#v", tc.target, tc.field, got, tc.want)
			}
		})
	}
}

// fieldAt reads a dotted path of map keys and slice indexes.
func fieldAt(t *testing.T, obj map[string]any, path string) any {
	t.Helper()
	var cur any = obj
	for _, part := range strings.Split(path, ".") {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[part]
		case []any:
			i := int(part[0] - '0')
			if len(part) != 1 || i >= len(v) {
				t.Fatalf("%s: index %s out of range", path, part)
			}
			cur = v[i]
		default:
			t.Fatalf("%s: %s is not a map or a list", path, part)
		}
	}
	return cur
}
