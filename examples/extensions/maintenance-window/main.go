// Maintenance-window is an example extension of kaddons that serves the BeforeUpgrade
// hook: it lets the add-ons its AddonExtension selects change version only inside the
// maintenance windows of its settings file, and holds every upgrade outside them.
//
// Its settings file, YAML or JSON, names the windows and their time zone:
//
//	timeZone: Europe/Berlin   # an IANA zone; the default is UTC
//	windows:
//	- days: [Sat, Sun]        # empty: every day
//	  start: "02:00"
//	  end: "04:00"            # 24:00 ends at midnight; an end before the start, the next day
//
// Inside a window it lets the upgrade go on. Outside every window it holds it, with
// retryAfterSeconds the time until the next window opens (at most an hour, after which
// kaddons asks again) and a message such as "outside the maintenance window Sat,Sun
// 02:00-04:00 Europe/Berlin; the next opens at 2025-06-07T02:00:00+02:00", which the
// add-on shows with reason UpgradeBlocked. kaddons never asks before the rollback of a
// failed upgrade, so a window never keeps a broken version running. The file is read
// again when it changes.
//
// See examples/extensions/README.md for the flags and how to register it, and
// docs/extensions.md for the contract.
package main

import (
	"context"
	"log/slog"
	"time"

	// The time zones, for a container image without /usr/share/zoneinfo.
	_ "time/tzdata"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	"github.com/kaddons/kaddons/examples/extensions/internal/server"
)

func main() {
	server.Main("maintenance-window", "lets the add-ons change version only inside maintenance windows (BeforeUpgrade)",
		parseSettings, func(settings *server.Settings[*schedule], log *slog.Logger) server.Handlers {
			return (&maintenanceWindow{settings: settings, log: log, now: time.Now}).handlers()
		})
}

// maintenanceWindow answers BeforeUpgrade from its settings and its clock.
type maintenanceWindow struct {
	settings *server.Settings[*schedule]
	log      *slog.Logger
	// now is the clock; tests set it.
	now func() time.Time
}

// handlers are the hooks maintenanceWindow serves: BeforeUpgrade.
func (m *maintenanceWindow) handlers() server.Handlers {
	return server.Handlers{BeforeUpgrade: m.beforeUpgrade}
}

// beforeUpgrade holds an upgrade outside the windows.
func (m *maintenanceWindow) beforeUpgrade(_ context.Context, req *hooksv1alpha1.BeforeUpgradeRequest) (*hooksv1alpha1.BeforeUpgradeResponse, error) {
	sched, revision, err := m.settings.Get()
	if err != nil {
		return nil, err
	}
	seconds, message := sched.answer(m.now())
	m.log.Info("answered an upgrade", "addon", req.Addon.Kind+" "+req.Addon.Namespace+"/"+req.Addon.Name,
		"from", req.FromVersion, "to", req.ToVersion, "retryAfterSeconds", seconds, "message", message, "revision", revision)
	resp := &hooksv1alpha1.BeforeUpgradeResponse{}
	resp.RetryAfterSeconds, resp.Message = seconds, message
	return resp, nil
}
