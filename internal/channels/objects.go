package channels

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/resource"
)

// checkObjects refuses a build whose objects cannot be applied. kustomize requires a kind
// and a name but no apiVersion, so a package with an object that lacks it would build,
// then fail at every reconcile when the engine parses it, instead of stopping the add-on
// with a render error that names the object.
func checkObjects(objects []*resource.Resource) error {
	for i, r := range objects {
		for _, f := range []struct{ name, value string }{
			{"apiVersion", r.GetApiVersion()},
			{"kind", r.GetKind()},
			{"metadata.name", r.GetName()},
		} {
			if f.value == "" {
				return fmt.Errorf("object %d (%s %q) has no %s", i+1, r.GetKind(), r.GetName(), f.name)
			}
		}
	}
	return nil
}
