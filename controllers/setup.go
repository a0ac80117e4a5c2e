// Package controllers holds one thin controller per add-on kind. Each declares its kind,
// its typed-field transforms, its child kinds and its RBAC; the shared engine does the rest.
package controllers

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kaddons/kaddons/internal/engine"
)

// Definitions lists every add-on kaddons manages.
func Definitions() []engine.Definition {
	return []engine.Definition{
		CoreDNSDefinition(),
		MetricsServerDefinition(),
		DashboardDefinition(),
		NodeLocalDNSDefinition(),
		KubeProxyDefinition(),
		KubeRouterDefinition(),
		PackageDefinition(),
	}
}

// SetupWithManager registers one controller per add-on with mgr.
func SetupWithManager(mgr ctrl.Manager, opts engine.Options) error {
	defs := Definitions()
	if opts.AddonKinds == nil {
		for _, def := range defs {
			opts.AddonKinds = append(opts.AddonKinds, def.Prototype)
		}
	}
	for _, def := range defs {
		r, err := engine.New(mgr, def, opts)
		if err != nil {
			return err
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %T controller: %w", def.Prototype, err)
		}
	}
	return nil
}
