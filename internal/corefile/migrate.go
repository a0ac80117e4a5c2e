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
)

// MigrationError is why a Corefile cannot be migrated. It names the versions and what
// blocks, and leaves to the caller how to report it: the CoreDNS controller turns it into
// a block of the add-on, with the advice that fits its spec.
type MigrationError struct {
	// From is the version the Corefile was written for, without a "v"; empty when unknown.
	From string
	// To is the version it was to be migrated to, without a "v".
	To string
	// Detail says what blocks: the plugins or options that would be lost, or the
	// migration library's complaint.
	Detail string
	// Err is the migration library's error, when it gave one.
	Err error
}

// Error names the versions and what blocks the migration.
func (e *MigrationError) Error() string {
	return fmt.Sprintf("the existing Corefile cannot be migrated from CoreDNS %s to %s: %s", cmp.Or(e.From, "(unknown)"), e.To, e.Detail)
}

// Unwrap returns the migration library's error, if any.
func (e *MigrationError) Unwrap() error { return e.Err }

// Migrate returns corefile, written for CoreDNS version from, converted for version to.
// An empty from (the running version is unknown) or equal versions return it unchanged.
// A move to an older version is a migration down, allowed only with downgrade (a
// rollback of what kaddons applied; adopting never downgrades what runs). A Corefile
// that cannot be migrated gives a *MigrationError and no Corefile, so that nothing of it
// is applied half-migrated.
func Migrate(corefile, from, to string, downgrade bool) (string, error) {
	from, to = strings.TrimPrefix(from, "v"), strings.TrimPrefix(to, "v")
	blocked := func(format string, args ...any) error {
		return &MigrationError{From: from, To: to, Detail: fmt.Sprintf(format, args...)}
	}
	// libraryFailed keeps the library's error for errors.Is and errors.As.
	libraryFailed := func(err error) error {
		return &MigrationError{From: from, To: to, Detail: err.Error(), Err: err}
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
			return "", libraryFailed(err)
		}
		return out, nil
	}
	if err := migration.ValidUpMigration(from, to); err != nil {
		return "", libraryFailed(err)
	}
	unsupported, err := migration.Unsupported(from, to, corefile)
	if err != nil {
		return "", libraryFailed(err)
	}
	deprecated, err := migration.Deprecated(from, to, corefile)
	if err != nil {
		return "", libraryFailed(err)
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
		return "", libraryFailed(err)
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
