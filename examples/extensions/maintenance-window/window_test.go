package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	"github.com/kaddons/kaddons/examples/extensions/internal/server"
)

// at is a time in UTC; 2025-06-07 is a Saturday.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestAnswer(t *testing.T) {
	const weekend = `windows: [{days: [Sat, Sun], start: "02:00", end: "04:00"}]`
	for _, tc := range []struct {
		name     string
		settings string
		now      string
		// retry is the retryAfterSeconds; 0 lets the upgrade go on.
		retry   int32
		message string
	}{
		{name: "inside", settings: weekend, now: "2025-06-07T03:00:00Z", retry: 0,
			message: "inside the maintenance window Sat,Sun 02:00-04:00 UTC, until 2025-06-07T04:00:00Z"},
		{name: "at the opening minute", settings: weekend, now: "2025-06-07T02:00:00Z", retry: 0},
		{name: "at the close: outside", settings: weekend, now: "2025-06-07T04:00:00Z", retry: 3600,
			message: "outside the maintenance window Sat,Sun 02:00-04:00 UTC; the next opens at 2025-06-08T02:00:00Z"},
		{name: "an hour before", settings: weekend, now: "2025-06-07T01:00:00Z", retry: 3600,
			message: "the next opens at 2025-06-07T02:00:00Z"},
		{name: "seconds before, rounded up", settings: weekend, now: "2025-06-07T01:59:58.5Z", retry: 2},
		{name: "days before: an hour at most", settings: weekend, now: "2025-06-04T12:00:00Z", retry: 3600,
			message: "the next opens at 2025-06-07T02:00:00Z"},
		{name: "the week wraps: Sunday after the window, Saturday next", settings: weekend, now: "2025-06-08T05:00:00Z",
			retry: 3600, message: "the next opens at 2025-06-14T02:00:00Z"},
		{name: "the week wraps: Saturday night to Monday", settings: `windows: [{days: [Monday], start: "00:30", end: "01:00"}]`,
			now: "2025-06-08T23:40:00Z", retry: 3000, message: "Mon 00:30-01:00 UTC; the next opens at 2025-06-09T00:30:00Z"},
		{name: "across midnight: before midnight", settings: `windows: [{days: [Fri], start: "22:00", end: "02:00"}]`,
			now: "2025-06-06T23:59:00Z", retry: 0, message: "until 2025-06-07T02:00:00Z"},
		{name: "across midnight: after midnight, on the next day", settings: `windows: [{days: [Fri], start: "22:00", end: "02:00"}]`,
			now: "2025-06-07T01:59:59Z", retry: 0},
		{name: "across midnight: after it closes", settings: `windows: [{days: [Fri], start: "22:00", end: "02:00"}]`,
			now: "2025-06-07T02:00:00Z", retry: 3600, message: "Fri 22:00-02:00 UTC; the next opens at 2025-06-13T22:00:00Z"},
		{name: "across midnight and the week: Saturday night to Sunday",
			settings: `windows: [{days: [Sat], start: "23:00", end: "01:00"}]`, now: "2025-06-08T00:30:00Z", retry: 0},
		{name: "all day, every day", settings: `windows: [{start: "00:00", end: "24:00"}]`, now: "2025-06-07T23:59:59Z", retry: 0,
			message: "inside the maintenance window daily 00:00-24:00 UTC, until 2025-06-08T00:00:00Z"},
		{name: "every day named", settings: `windows: [{days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "10:00", end: "11:00"}]`,
			now: "2025-06-07T11:30:00Z", retry: 3600, message: "daily 10:00-11:00 UTC; the next opens at 2025-06-08T10:00:00Z"},
		{name: "the nearest of several windows",
			settings: "windows:\n- {days: [Sat], start: \"22:00\", end: \"23:00\"}\n- {days: [Sat], start: \"12:00\", end: \"12:30\"}",
			now:      "2025-06-07T11:45:00Z", retry: 900,
			message: "outside the maintenance windows Sat 22:00-23:00, Sat 12:00-12:30 UTC; the next opens at 2025-06-07T12:00:00Z"},
		{name: "in a time zone", settings: "timeZone: Europe/Berlin\n" + weekend, now: "2025-06-07T01:30:00Z", retry: 0,
			message: "Sat,Sun 02:00-04:00 Europe/Berlin, until 2025-06-07T04:00:00+02:00"},
		{name: "in a time zone, outside", settings: "timeZone: America/New_York\n" + weekend, now: "2025-06-07T05:30:00Z", retry: 1800,
			message: "the next opens at 2025-06-07T02:00:00-04:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := parseSettings([]byte(tc.settings))
			if err != nil {
				t.Fatal(err)
			}
			retry, message := sched.answer(at(t, tc.now))
			if retry != tc.retry {
				t.Errorf("retryAfterSeconds %d, want %d (%s)", retry, tc.retry, message)
			}
			if !strings.Contains(message, tc.message) {
				t.Errorf("message %q, want it to contain %q", message, tc.message)
			}
		})
	}
}

func TestParseSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, settings, problem string
	}{
		{name: "no windows", settings: "timeZone: UTC", problem: "at least one window"},
		{name: "an unknown field", settings: `windows: [{start: "01:00", end: "02:00", until: "03:00"}]`, problem: "unknown field"},
		{name: "an unknown zone", settings: "timeZone: Mars/Olympus\nwindows: [{start: \"01:00\", end: \"02:00\"}]", problem: "timeZone"},
		{name: "the machine's zone", settings: "timeZone: Local\nwindows: [{start: \"01:00\", end: \"02:00\"}]", problem: "Local"},
		{name: "a bad day", settings: `windows: [{days: [Caturday], start: "01:00", end: "02:00"}]`, problem: `windows[0]: days: "Caturday"`},
		{name: "a bad start", settings: `windows: [{start: "1am", end: "02:00"}]`, problem: `windows[0]: start: "1am"`},
		{name: "minutes of one digit", settings: `windows: [{start: "01:5", end: "02:00"}]`, problem: `start: "01:5"`},
		{name: "an hour out of range", settings: `windows: [{start: "01:00", end: "25:00"}]`, problem: `end: "25:00"`},
		{name: "24:00 as a start", settings: `windows: [{start: "24:00", end: "02:00"}]`, problem: `start: "24:00"`},
		{name: "a missing end", settings: `windows: [{start: "01:00"}]`, problem: `end: ""`},
		{name: "an empty window", settings: `windows: [{start: "01:00", end: "01:00"}]`, problem: "00:00 to 24:00"},
		{name: "00:00 to 24:00 is not empty", settings: `windows: [{start: "00:00", end: "24:00"}]`},
		{name: "the second window", settings: "windows:\n- {start: \"01:00\", end: \"02:00\"}\n- {start: \"x\", end: \"02:00\"}",
			problem: "windows[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSettings([]byte(tc.settings))
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("unexpected: %v", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Errorf("got %v, want %q", err, tc.problem)
			}
		})
	}
}

// TestBeforeUpgrade answers through the handler with the clock set, and follows a change
// of the settings file.
func TestBeforeUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`windows: [{days: [Sun], start: "02:00", end: "04:00"}]`)
	settings := &server.Settings[*schedule]{Path: path, Parse: parseSettings}
	now := at(t, "2025-06-07T03:00:00Z")
	m := &maintenanceWindow{settings: settings, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return now }}
	hook := m.handlers().BeforeUpgrade
	req := &hooksv1alpha1.BeforeUpgradeRequest{Addon: hooksv1alpha1.Addon{Kind: "CoreDNS", Namespace: "kube-system", Name: "coredns"},
		FromVersion: "1.11.3", ToVersion: "1.12.1"}

	resp, err := hook(context.Background(), req)
	if err != nil || resp.RetryAfterSeconds != 3600 || !strings.Contains(resp.Message, "the next opens at 2025-06-08T02:00:00Z") {
		t.Fatalf("Saturday: %+v %v", resp, err)
	}
	_, before, _ := settings.Get()

	write(`windows: [{days: [Sat, Sun], start: "02:00", end: "04:00"}]`)
	resp, err = hook(context.Background(), req)
	if err != nil || resp.RetryAfterSeconds != 0 {
		t.Fatalf("with Saturday added: %+v %v", resp, err)
	}
	if _, after, _ := settings.Get(); after == before {
		t.Error("the revision did not change with the settings")
	}

	write(`windows: []`)
	if _, err := hook(context.Background(), req); err == nil || !strings.Contains(err.Error(), "at least one window") {
		t.Errorf("broken settings: %v", err)
	}
}
