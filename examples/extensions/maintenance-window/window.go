package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// maxRetryAfter caps how long a hold asks kaddons to wait: kaddons caps it there too, and
// an hour keeps a changed settings file from waiting longer than that to be seen.
const maxRetryAfter = time.Hour

// minutesPerDay is the length of a day in minutes; an end of 24:00 is this.
const minutesPerDay = 24 * 60

// Settings is the settings file of the maintenance-window extension.
type Settings struct {
	// TimeZone is the IANA time zone the windows are in, such as Europe/Berlin; empty is
	// UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// Windows are the times upgrades may happen; at least one.
	Windows []Window `json:"windows"`
}

// Window is a time of day, on some days of the week, when upgrades may happen.
type Window struct {
	// Days are the days the window opens, such as [Sat, Sun] (or Saturday, ...); empty is
	// every day.
	Days []string `json:"days,omitempty"`
	// Start and End are HH:MM on a 24-hour clock; End may be 24:00. An End not after
	// Start closes the window on the next day (22:00-02:00 opens at 22:00 on each of Days).
	Start string `json:"start"`
	End   string `json:"end"`
}

// schedule is a parsed settings file.
type schedule struct {
	loc     *time.Location
	windows []window
}

// window is a parsed Window.
type window struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes after midnight; end in (0, 24h], at or before start: the next day
	text       string
}

// parseSettings reads the settings file, YAML or JSON.
func parseSettings(data []byte) (*schedule, error) {
	var s Settings
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, err
	}
	sched := &schedule{loc: time.UTC}
	switch s.TimeZone {
	case "", "UTC":
	case "Local":
		return nil, errors.New(`timeZone: name a zone such as UTC or Europe/Berlin; "Local" is the machine's`)
	default:
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("timeZone: %w", err)
		}
		sched.loc = loc
	}
	if len(s.Windows) == 0 {
		return nil, errors.New("windows: at least one window is needed, or every upgrade waits forever")
	}
	var problems []string
	for i, w := range s.Windows {
		parsed, err := parseWindow(w)
		if err != nil {
			problems = append(problems, fmt.Sprintf("windows[%d]: %v", i, err))
			continue
		}
		sched.windows = append(sched.windows, parsed)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return sched, nil
}

// dayNames are the days of the week by time.Weekday, as a window's text names them.
var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// weekOrder is the order a window's text lists its days in: Monday first.
var weekOrder = []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}

func parseWindow(w Window) (window, error) {
	var parsed window
	var names []string
	for _, d := range w.Days {
		day, ok := parseDay(d)
		if !ok {
			return window{}, fmt.Errorf("days: %q is not a day of the week (Mon, Tue, ... or Monday, ...)", d)
		}
		parsed.days[day] = true
	}
	every := true
	for _, day := range weekOrder {
		if parsed.days[day] {
			names = append(names, dayNames[day])
		} else {
			every = false
		}
	}
	if len(w.Days) == 0 || every {
		parsed.days = [7]bool{true, true, true, true, true, true, true}
		names = []string{"daily"}
	}
	var err error
	if parsed.start, err = parseClock(w.Start, false); err != nil {
		return window{}, fmt.Errorf("start: %w", err)
	}
	if parsed.end, err = parseClock(w.End, true); err != nil {
		return window{}, fmt.Errorf("end: %w", err)
	}
	if parsed.start == parsed.end {
		return window{}, fmt.Errorf("start and end are both %s: for a whole day, write 00:00 to 24:00", w.Start)
	}
	parsed.text = fmt.Sprintf("%s %s-%s", strings.Join(names, ","), clock(parsed.start), clock(parsed.end))
	return parsed, nil
}

// parseDay reads a day of the week: Mon or Monday, in any case.
func parseDay(s string) (time.Weekday, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for day := time.Sunday; day <= time.Saturday; day++ {
		full := strings.ToLower(day.String())
		if s == full || s == full[:3] {
			return day, true
		}
	}
	return 0, false
}

// parseClock reads HH:MM as minutes after midnight; 24:00 only when end is true.
func parseClock(s string, end bool) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	h, errH := strconv.Atoi(hh)
	m, errM := strconv.Atoi(mm)
	if !ok || errH != nil || errM != nil || len(hh) < 1 || len(hh) > 2 || len(mm) != 2 || h < 0 || m < 0 || m > 59 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	minutes := h*60 + m
	if minutes > minutesPerDay || (minutes == minutesPerDay && !end) {
		return 0, fmt.Errorf("%q is not a time of day between 00:00 and 23:59 (24:00 for an end)", s)
	}
	return minutes, nil
}

// clock formats minutes after midnight as HH:MM.
func clock(minutes int) string {
	return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60)
}

// String describes the windows: Sat,Sun 02:00-04:00, daily 22:00-23:00 Europe/Berlin.
func (s *schedule) String() string {
	texts := make([]string, 0, len(s.windows))
	for _, w := range s.windows {
		texts = append(texts, w.text)
	}
	return strings.Join(texts, ", ") + " " + s.loc.String()
}

// at tells whether now is inside a window. Inside, until is when the windows now is in
// close (the latest); outside, it is when the next one opens.
func (s *schedule) at(now time.Time) (inside bool, until time.Time) {
	local := now.In(s.loc)
	y, m, d := local.Date()
	var next time.Time
	// A window may have opened yesterday and cross midnight; the next opening is at most
	// a week away.
	for offset := -1; offset <= 7; offset++ {
		day := time.Date(y, m, d+offset, 12, 0, 0, 0, s.loc).Weekday()
		for _, w := range s.windows {
			if !w.days[day] {
				continue
			}
			open := time.Date(y, m, d+offset, w.start/60, w.start%60, 0, 0, s.loc)
			endDay := d + offset
			if w.end <= w.start {
				endDay++
			}
			// 24:00 is normalized to 00:00 of the next day.
			closes := time.Date(y, m, endDay, w.end/60, w.end%60, 0, 0, s.loc)
			switch {
			case !now.Before(open) && now.Before(closes):
				if !inside || closes.After(until) {
					inside, until = true, closes
				}
			case open.After(now) && (next.IsZero() || open.Before(next)):
				next = open
			}
		}
	}
	if inside {
		return true, until
	}
	return false, next
}

// answer is the extension's answer to a BeforeUpgrade call at now: no hold inside a
// window; outside, a hold until the next window opens (at most an hour, then kaddons
// asks again) and a message that says when.
func (s *schedule) answer(now time.Time) (retryAfterSeconds int32, message string) {
	inside, until := s.at(now)
	noun := "window"
	if len(s.windows) > 1 {
		noun = "windows"
	}
	if inside {
		return 0, fmt.Sprintf("inside the maintenance %s %s, until %s", noun, s, until.In(s.loc).Format(time.RFC3339))
	}
	if until.IsZero() {
		// Only a window that never opens (a day skipped by a change of time zone rules)
		// leads here.
		return int32(maxRetryAfter / time.Second), fmt.Sprintf("outside the maintenance %s %s; none opens within a week", noun, s)
	}
	wait := math.Ceil(until.Sub(now).Seconds())
	seconds := int32(max(1, min(wait, maxRetryAfter.Seconds())))
	return seconds, fmt.Sprintf("outside the maintenance %s %s; the next opens at %s", noun, s, until.In(s.loc).Format(time.RFC3339))
}
