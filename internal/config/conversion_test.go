package config

import (
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	configv1beta1 "github.com/kaddons/kaddons/api/config/v1beta1"
)

// filler fills every field, pointers, maps and slices included, some of them nil or empty.
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.2).NumElements(0, 3)
}

const roundTrips = 200

func TestRoundTripV1alpha1(t *testing.T) {
	for seed := range int64(roundTrips) {
		in := &configv1alpha1.OperatorConfiguration{}
		filler(seed).Fill(in)
		in.TypeMeta = metav1.TypeMeta{APIVersion: configv1alpha1.GroupVersion.String(), Kind: Kind}
		if diff := cmp.Diff(in, ToV1alpha1(FromV1alpha1(in))); diff != "" {
			t.Fatalf("seed %d: v1alpha1 -> hub -> v1alpha1 mismatch (-in +out):\n%s", seed, diff)
		}
	}
}

func TestRoundTripV1beta1(t *testing.T) {
	for seed := range int64(roundTrips) {
		in := &configv1beta1.OperatorConfiguration{}
		filler(seed).Fill(in)
		in.TypeMeta = metav1.TypeMeta{APIVersion: configv1beta1.GroupVersion.String(), Kind: Kind}
		if diff := cmp.Diff(in, ToV1beta1(FromV1beta1(in))); diff != "" {
			t.Fatalf("seed %d: v1beta1 -> hub -> v1beta1 mismatch (-in +out):\n%s", seed, diff)
		}
	}
}

func TestRoundTripHubThroughBothVersions(t *testing.T) {
	for seed := range int64(roundTrips) {
		hub := &Configuration{}
		filler(seed).Fill(hub)
		if diff := cmp.Diff(hub, FromV1alpha1(ToV1alpha1(hub))); diff != "" {
			t.Fatalf("seed %d: hub -> v1alpha1 -> hub mismatch (-in +out):\n%s", seed, diff)
		}
		if diff := cmp.Diff(hub, FromV1beta1(ToV1beta1(hub))); diff != "" {
			t.Fatalf("seed %d: hub -> v1beta1 -> hub mismatch (-in +out):\n%s", seed, diff)
		}
	}
}

func TestRoundTripAcrossVersions(t *testing.T) {
	for seed := range int64(roundTrips) {
		alpha := &configv1alpha1.OperatorConfiguration{}
		filler(seed).Fill(alpha)
		alpha.TypeMeta = metav1.TypeMeta{APIVersion: configv1alpha1.GroupVersion.String(), Kind: Kind}
		hub := FromV1alpha1(alpha)
		beta := ToV1beta1(hub)
		if diff := cmp.Diff(hub, FromV1beta1(beta)); diff != "" {
			t.Fatalf("seed %d: v1alpha1 -> hub -> v1beta1 -> hub mismatch (-first +second):\n%s", seed, diff)
		}
		if diff := cmp.Diff(alpha, ToV1alpha1(FromV1beta1(beta))); diff != "" {
			t.Fatalf("seed %d: v1alpha1 -> v1beta1 -> v1alpha1 mismatch (-in +out):\n%s", seed, diff)
		}
	}
}

// TestV1alpha1Paths checks that the renames from the hub's (v1beta1's) field paths to
// v1alpha1's pair every v1beta1 field with a distinct v1alpha1 field, so that every
// validation error of a v1alpha1 file names a field the file can have.
func TestV1alpha1Paths(t *testing.T) {
	alphaLeaves := leafPaths(reflect.TypeFor[configv1alpha1.OperatorConfiguration](), "")
	betaLeaves := leafPaths(reflect.TypeFor[configv1beta1.OperatorConfiguration](), "")
	mapped := make([]string, 0, len(betaLeaves))
	for _, p := range betaLeaves {
		a := v1alpha1Paths.apply(p)
		if !slices.Contains(alphaLeaves, a) {
			t.Errorf("v1beta1 field %s maps to %s, which v1alpha1 does not have", p, a)
		}
		mapped = append(mapped, a)
	}
	slices.Sort(mapped)
	slices.Sort(alphaLeaves)
	if diff := cmp.Diff(alphaLeaves, mapped); diff != "" {
		t.Errorf("v1alpha1 fields not paired one to one with v1beta1's (-v1alpha1 +mapped):\n%s", diff)
	}
}

// leafPaths lists the JSON paths of the fields of struct type t that hold values.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for f := range fieldsOf(t) {
		p := jsonName(f)
		if prefix != "" {
			p = prefix + "." + p
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[metav1.Duration]() {
			out = append(out, leafPaths(ft, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestPathRenames(t *testing.T) {
	for _, tc := range []struct{ hub, want string }{
		{hub: "manager.leaderElection.leaseDuration", want: "leaderElection.leaseDuration"},
		{hub: "manager.leaderElection.id", want: "leaderElection.resourceName"},
		{hub: "manager.concurrency.perKind[CoreDNS]", want: "concurrency.perKind[CoreDNS]"},
		{hub: "runtime.pausedKinds[2]", want: "pausedAddonKinds[2]"},
		{hub: "runtime.imageRegistry.mirror", want: "registryMirror"},
		{hub: "channels.directory", want: "manifests.directory"},
		{hub: "channelsX", want: "channelsX"},
	} {
		if got := v1alpha1Paths.apply(tc.hub); got != tc.want {
			t.Errorf("v1alpha1Paths.apply(%q) = %q, want %q", tc.hub, got, tc.want)
		}
	}
}
