package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples holds a scrape, filtered to the metric names asked for.
type samples []sample

// parseSamples reads the Prometheus text format, keeping only the metrics named in keep.
func parseSamples(r io.Reader, keep ...string) (samples, error) {
	wanted := map[string]bool{}
	for _, k := range keep {
		wanted[k] = true
	}
	var out samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !wanted[name] {
			continue
		}
		s, err := parseSample(line, name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

// parseSample parses one sample line whose metric name is name.
func parseSample(line, name string) (sample, error) {
	s := sample{name: name, labels: map[string]string{}}
	rest := line[len(name):]
	if strings.HasPrefix(rest, "{") {
		end, err := parseLabels(rest, s.labels)
		if err != nil {
			return s, fmt.Errorf("metric line %q: %w", line, err)
		}
		rest = rest[end:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metric line %q has no value", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metric line %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

// parseLabels parses `{a="x",b="y"}` at the start of s into labels and returns the
// index just past the closing brace.
func parseLabels(s string, labels map[string]string) (int, error) {
	i := 1
	for i < len(s) {
		if s[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return 0, fmt.Errorf("malformed labels")
		}
		key := strings.TrimLeft(s[i:i+eq], ",")
		i += eq + 2
		var val strings.Builder
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
			} else {
				val.WriteByte(s[i])
			}
			i++
		}
		labels[key] = val.String()
		i++ // closing quote
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
	return 0, fmt.Errorf("unterminated labels")
}

// sum adds up the samples of name whose labels pass match (nil matches all).
func (ss samples) sum(name string, match func(labels map[string]string) bool) float64 {
	total := 0.0
	for _, s := range ss {
		if s.name == name && (match == nil || match(s.labels)) {
			total += s.value
		}
	}
	return total
}

// addons counts the distinct namespace/name pairs among the samples of name whose kind
// label is kind.
func (ss samples) addons(name, kind string) int {
	if name == "" {
		return 0
	}
	seen := map[string]bool{}
	for _, s := range ss {
		if s.name == name && s.labels["kind"] == kind {
			seen[s.labels["namespace"]+"/"+s.labels["name"]] = true
		}
	}
	return len(seen)
}
