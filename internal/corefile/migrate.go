// Package corefile migrates a CoreDNS Corefile that kaddons did not write (one it adopts
// from kubeadm, kops or a Helm release) between CoreDNS versions, with the migration
// library kubeadm uses (github.com/coredns/corefile-migration). Nothing of the Corefile
// is silently lost: a plugin the target version removed without a replacement, or one
// the library cannot migrate, stops the migration with a message naming it.
package corefile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/coredns/corefile-migration/migration"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// Migrate returns corefile, written for CoreDNS version from, converted for version to.
// An empty from (the running version is unknown) or equal versions return it unchanged.
// A move to an older version is a migration down, allowed only with downgrade (a
// rollback of what kaddons applied; adopting never downgrades what runs). A Corefile
// that cannot be migrated gives an *engine.BlockedError with reason
// CorefileMigrationFailed, so the add-on stops with nothing applied.
func Migrate(corefile, from, to string, downgrade bool) (string, error) {
	from, to = strings.TrimPrefix(from, "v"), strings.TrimPrefix(to, "v")
	blocked := func(format string, args ...any) error {
		return &engine.BlockedError{Reason: addonsv1alpha1.ReasonCorefileMigrationFailed,
			Message: fmt.Sprintf("the existing Corefile cannot be migrated from CoreDNS %s to %s: ", cmp.Or(from, "(unknown)"), to) +
				fmt.Sprintf(format, args...) + "; nothing was changed. Set spec.corefile, pin spec.version, or edit the Corefile"}
	}
	if from == "" || from == to {
		// Nothing to migrate, but every plugin must still exist in the version applied.
		if notices := unsupportedIn(corefile, to); len(notices) > 0 {
			return "", blocked("%s", strings.Join(notices, " "))
		}
		return corefile, nil
	}
	fromV, errFrom := semver.Parse(from)
	toV, errTo := semver.Parse(to)
	if errFrom != nil || errTo != nil {
		return "", blocked("unknown version")
	}
	if toV.LT(fromV) && !downgrade {
		return "", blocked("the running CoreDNS %s is newer; adoption never downgrades it, so set spec.version to %s or newer", from, from)
	}
	if toV.LT(fromV) {
		out, err := migration.MigrateDown(from, to, corefile)
		if err != nil {
			return "", blocked("%v", err)
		}
		return out, nil
	}
	if err := migration.ValidUpMigration(from, to); err != nil {
		return "", blocked("%v", err)
	}
	unsupported, err := migration.Unsupported(from, to, corefile)
	if err != nil {
		return "", blocked("%v", err)
	}
	deprecated, err := migration.Deprecated(from, to, corefile)
	if err != nil {
		return "", blocked("%v", err)
	}
	var lost []string
	for _, n := range append(unsupported, deprecated...) {
		switch {
		case n.Severity == migration.SevUnsupported,
			n.Severity == migration.SevRemoved && n.ReplacedBy == "",
			n.Severity == migration.SevIgnored:
			lost = append(lost, n.ToString())
		}
	}
	if len(lost) > 0 {
		return "", blocked("%s", strings.Join(lost, " "))
	}
	out, err := migration.Migrate(from, to, corefile, false)
	if err != nil {
		return "", blocked("%v", err)
	}
	return out, nil
}

// unsupportedIn lists what of corefile CoreDNS version (or the migration library) does not
// know: the library checks the plugins of each version after the one it starts from, so
// it starts from the version just before.
func unsupportedIn(corefile, version string) []string {
	versions := migration.ValidVersions()
	i := slices.Index(versions, version)
	if i < 0 {
		return []string{fmt.Sprintf("CoreDNS %s is unknown to the migration library, which cannot check the Corefile for it.", version)}
	}
	if i == 0 {
		return nil
	}
	notices, err := migration.Unsupported(versions[i-1], version, corefile)
	if err != nil {
		return []string{err.Error()}
	}
	out := make([]string, 0, len(notices))
	for _, n := range notices {
		out = append(out, n.ToString())
	}
	return out
}
