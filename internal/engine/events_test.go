package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEventNote(t *testing.T) {
	long := strings.Repeat("Secret ns/kubernetes-dashboard-csrf (from another-tool); ", 40)
	for _, tc := range []struct {
		name    string
		message string
		want    string
	}{
		{name: "short is kept", message: "Applied CoreDNS 1.12.1", want: "Applied CoreDNS 1.12.1"},
		{name: "exactly at the limit is kept", message: strings.Repeat("x", maxEventNote), want: strings.Repeat("x", maxEventNote)},
		{name: "over the limit is cut and says so", message: long,
			want: long[:maxEventNote-len(truncatedSuffix)] + truncatedSuffix},
		{name: "a multi-byte character is not split", message: strings.Repeat("x", maxEventNote-len(truncatedSuffix)-1) + strings.Repeat("é", 100),
			want: strings.Repeat("x", maxEventNote-len(truncatedSuffix)-1) + truncatedSuffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := eventNote(tc.message)
			if got != tc.want {
				t.Errorf("eventNote = %q, want %q", got, tc.want)
			}
			if len(got) > maxEventNote || !utf8.ValidString(got) {
				t.Errorf("note of %d bytes (valid UTF-8: %v), the API server takes at most %d", len(got), utf8.ValidString(got), maxEventNote)
			}
		})
	}
}
