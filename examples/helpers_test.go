// Package examples tests the files under examples/ that users copy: the Argo CD health
// check, the kops channel and the GitOps layout.
package examples

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// addonKinds returns every add-on kind of the API, sorted, as its scheme registers them.
func addonKinds(t *testing.T) []string {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := addonsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for kind := range scheme.KnownTypes(addonsv1alpha1.GroupVersion) {
		obj, err := scheme.New(addonsv1alpha1.GroupVersion.WithKind(kind))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := obj.(addonsv1alpha1.Addon); ok {
			kinds = append(kinds, kind)
		}
	}
	if len(kinds) == 0 {
		t.Fatal("the API registers no add-on kinds")
	}
	sort.Strings(kinds)
	return kinds
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopAPIServer(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
	}
	os.Exit(code)
}
