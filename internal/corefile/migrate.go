// Package corefile migrates a CoreDNS Corefile that kaddons did not write (one it adopts
// from kubeadm, kops or a Helm release) between CoreDNS versions, with the migration
// library kubeadm uses (github.com/coredns/corefile-migration). Nothing of the Corefile
// is silently lost: a plugin the target version removed without a replacement, or one
// the library cannot migrate, stops the migration with a message naming it.
package corefile

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/coredns/corefile-migration/migration"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// Migrate returns corefile, written for CoreDNS version from, converted for version to.
// An empty from (the running version is unknown) or equal versions return it unchanged.
// A Corefile that cannot be migrated gives an *engine.BlockedError with reason
// CorefileMigrationFailed, so the add-on stops with nothing applied.
func Migrate(corefile, from, to string) (string, error) {
	from, to = strings.TrimPrefix(from, "v"), strings.TrimPrefix(to, "v")
	if from == "" || from == to {
		return corefile, nil
	}
	blocked := func(format string, args ...any) error {
		return &engine.BlockedError{Reason: addonsv1alpha1.ReasonCorefileMigrationFailed,
			Message: fmt.Sprintf("the existing Corefile cannot be migrated from CoreDNS %s to %s: ", from, to) +
				fmt.Sprintf(format, args...) + "; nothing was changed. Set spec.corefile, pin spec.version, or edit the Corefile"}
	}
	fromV, errFrom := semver.Parse(from)
	toV, errTo := semver.Parse(to)
	if errFrom != nil || errTo != nil {
		return "", blocked("unknown version")
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
