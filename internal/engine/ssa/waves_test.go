package ssa

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// waveObject is a ConfigMap named name in wave (none when empty) after the waves listed.
func waveObject(name, wave, after string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetName(name)
	annotations := map[string]string{}
	if wave != "" {
		annotations[addonsv1alpha1.AnnotationWave] = wave
	}
	if after != "" {
		annotations[addonsv1alpha1.AnnotationWaveAfter] = after
	}
	u.SetAnnotations(annotations)
	return u
}

func TestPlanWaves(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects []*unstructured.Unstructured
		// want is each wave as "name[after,...]:object,object".
		want    []string
		wantErr string
	}{{
		name:    "no annotations: one default wave, in order",
		objects: []*unstructured.Unstructured{waveObject("a", "", ""), waveObject("b", "", "")},
		want:    []string{"default[]:a,b"},
	}, {
		name: "a webhook configuration after its server",
		objects: []*unstructured.Unstructured{waveObject("webhook", "webhook", "default"), waveObject("server", "", ""),
			waveObject("service", "", "")},
		want: []string{"default[]:server,service", "webhook[default]:webhook"},
	}, {
		name: "a diamond, ties by name, the union of the objects' waits",
		objects: []*unstructured.Unstructured{waveObject("d", "d", "b"), waveObject("d2", "d", "c"),
			waveObject("c", "c", "a"), waveObject("b", "b", " a "), waveObject("a", "a", "")},
		want: []string{"a[]:a", "b[a]:b", "c[a]:c", "d[b,c]:d,d2"},
	}, {
		// "after-z" sorts before "z" but waits for it.
		name:    "the first wave not waiting, by name, default first",
		objects: []*unstructured.Unstructured{waveObject("z", "z", ""), waveObject("x", "", ""), waveObject("y", "after-z", "z")},
		want:    []string{"default[]:x", "z[]:z", "after-z[z]:y"},
	}, {
		name:    "a cycle",
		objects: []*unstructured.Unstructured{waveObject("a", "a", "b"), waveObject("b", "b", "c"), waveObject("c", "c", "a"), waveObject("x", "", "")},
		wantErr: `the package's apply wave "a" is in a cycle: a -> b -> c -> a`,
	}, {
		name:    "a wave waiting for itself",
		objects: []*unstructured.Unstructured{waveObject("a", "a", "a")},
		wantErr: `the package's apply wave "a" waits for itself`,
	}, {
		name:    "a wave that does not exist",
		objects: []*unstructured.Unstructured{waveObject("a", "a", "missing")},
		wantErr: `the package's apply wave "a" waits for wave "missing", which no object of the package is in`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			waves, err := PlanWaves(tc.objects)
			if tc.wantErr != "" {
				var we *WaveError
				if !errors.As(err, &we) || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("PlanWaves = %v, want a *WaveError starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, 0, len(waves))
			for _, w := range waves {
				names := make([]string, 0, len(w.Objects))
				for _, u := range w.Objects {
					names = append(names, u.GetName())
				}
				got = append(got, w.Name+"["+strings.Join(w.After, ",")+"]:"+strings.Join(names, ","))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("PlanWaves = %v, want %v", got, tc.want)
			}
		})
	}
}
