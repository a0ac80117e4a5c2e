package ssa

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// DefaultWave is the wave of the objects without addonsv1alpha1.AnnotationWave.
const DefaultWave = "default"

// Wave is a named group of a package's objects: the objects whose AnnotationWave names
// it (DefaultWave for those without), and the waves that must be healthy before it is
// applied (the union of its objects' AnnotationWaveAfter).
type Wave struct {
	Name    string
	After   []string
	Objects []*unstructured.Unstructured
}

// PlanWaves groups objects into waves and orders them so that every wave comes after the
// waves it names, as a topological order of the DAG the annotations draw; ties go by
// name, DefaultWave first. Within a wave the objects keep their order, and Apply still
// writes them stage by stage. A wave named after itself, a wave that does not exist, or
// a cycle is a *WaveError: the package must change.
func PlanWaves(objects []*unstructured.Unstructured) ([]Wave, error) {
	byName, err := groupWaves(objects)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == DefaultWave:
			return -1
		case b == DefaultWave:
			return 1
		}
		return strings.Compare(a, b)
	})

	// Kahn's algorithm, taking the first ready wave in name order each time.
	out := make([]Wave, 0, len(names))
	done := map[string]bool{}
	for len(out) < len(names) {
		i := slices.IndexFunc(names, func(name string) bool {
			return !done[name] && !slices.ContainsFunc(byName[name].After, func(after string) bool { return !done[after] })
		})
		if i < 0 {
			path := cyclePath(byName, done)
			return nil, &WaveError{Wave: path[0], Detail: "is in a cycle: " + strings.Join(path, " -> ")}
		}
		done[names[i]] = true
		out = append(out, *byName[names[i]])
	}
	return out, nil
}

// groupWaves groups objects by their wave, with the union of their waits, and refuses a
// wave that waits for itself or for a wave no object is in.
func groupWaves(objects []*unstructured.Unstructured) (map[string]*Wave, error) {
	byName := map[string]*Wave{}
	for _, u := range objects {
		name := cmp.Or(strings.TrimSpace(u.GetAnnotations()[addonsv1alpha1.AnnotationWave]), DefaultWave)
		w := byName[name]
		if w == nil {
			w = &Wave{Name: name}
			byName[name] = w
		}
		w.Objects = append(w.Objects, u)
		for after := range strings.SplitSeq(u.GetAnnotations()[addonsv1alpha1.AnnotationWaveAfter], ",") {
			if after = strings.TrimSpace(after); after != "" && !slices.Contains(w.After, after) {
				w.After = append(w.After, after)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		w := byName[name]
		slices.Sort(w.After)
		for _, after := range w.After {
			if after == name {
				return nil, &WaveError{Wave: name, Detail: "waits for itself"}
			}
			if byName[after] == nil {
				return nil, &WaveError{Wave: name, Detail: fmt.Sprintf("waits for wave %q, which no object of the package is in", after)}
			}
		}
	}
	return byName, nil
}

// cyclePath walks from the first wave not done along its first dependency not done
// until it comes back to a wave it passed, and returns that loop, first wave repeated
// at the end.
func cyclePath(byName map[string]*Wave, done map[string]bool) []string {
	names := make([]string, 0, len(byName))
	for name := range byName {
		if !done[name] {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	seen := map[string]int{}
	var path []string
	for at := names[0]; ; {
		if i, ok := seen[at]; ok {
			return append(path[i:], at)
		}
		seen[at] = len(path)
		path = append(path, at)
		next := ""
		for _, after := range byName[at].After {
			if !done[after] {
				next = after
				break
			}
		}
		if next == "" {
			return path
		}
		at = next
	}
}

// WaveError is a package whose waves do not form a DAG.
type WaveError struct {
	// Wave is the wave at fault.
	Wave string
	// Detail says what is wrong with it.
	Detail string
}

// Error names the wave and what is wrong with it.
func (e *WaveError) Error() string {
	return fmt.Sprintf("the package's apply wave %q %s; waves (annotations %s and %s) must form a DAG",
		e.Wave, e.Detail, addonsv1alpha1.AnnotationWave, addonsv1alpha1.AnnotationWaveAfter)
}

// WaveNotReadyError is an Apply that stopped before a wave, because a wave it waits for
// is not healthy yet. Everything before was applied; nothing was pruned.
type WaveNotReadyError struct {
	// Wave is the wave not applied yet, and Waits the one it waits for.
	Wave, Waits string
	// Message says which objects of Waits are not ready.
	Message string
}

// Error names both waves and what is not ready.
func (e *WaveNotReadyError) Error() string {
	return fmt.Sprintf("wave %q waits for wave %q: %s", e.Wave, e.Waits, e.Message)
}

// WaveReadyFunc reports whether the objects of a wave, all applied, are healthy (kstatus
// Current), and if not, why. applied holds what this Apply's writes left.
type WaveReadyFunc func(ctx context.Context, refs []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]Written) (bool, string, error)
