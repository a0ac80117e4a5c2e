// Package ssa is kaddons' apply library: server-side apply of a set of rendered objects
// in stages (CRDs, Namespaces, configuration, bindings, workloads, API endpoints), with
// ownership checks that never take over an object kaddons did not create (create-only
// applies, seals, adoption on request), write access checks for impersonated
// identities, drift exclusions released to another field manager, inventory-based
// prune, deletion in reverse stage order, and waits on the operator's cache.
//
// It is shaped after fluxcd/pkg/ssa: the engine builds a Request and calls
// Manager.Apply, which returns a Result and a typed error (ConflictError, ModeError,
// AdoptionError, ImmutableError, ObjectTooLargeError, ForbiddenError, PruneError,
// WriteError). The engine maps those errors to conditions; this package never imports
// the engine.
package ssa
