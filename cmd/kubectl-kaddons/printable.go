package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sets of control characters that printable keeps.
const (
	// keepNone keeps no control character: for a table cell or one line, where a tab
	// would shift the columns and a newline would forge a row.
	keepNone = ""
	// keepLines keeps newlines and tabs: for multi-line text the plugin lays out itself
	// (a diff, an error message), where neither can move the cursor back or send a
	// sequence to the terminal.
	keepLines = "\n\t"
)

// printable returns s, a string the cluster or a registry provided (a name, a condition
// message, an image, an annotation, an error), safe to write to a terminal: every
// control character (C0, DEL and C1, so ESC and the sequences it starts: ESC[2J clearing
// the screen, OSC 52 setting the clipboard; \r going back over a line; the 8-bit CSI)
// other than those in keep, every bidirectional formatting character (which reorders
// what a line shows) and every byte that is not UTF-8 is written escaped, as Go would
// quote it: \x1b, \x9b, \u202e. The escapes keep distinct strings distinct, so a diff
// still shows a change that is only in such characters.
func printable(s, keep string) string {
	escape := func(r rune) bool {
		return (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)) && !strings.ContainsRune(keep, r)
	}
	if utf8.ValidString(s) && !strings.ContainsFunc(s, escape) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case escape(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case escape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// printableValues escapes, as printable does, every string of an object's content (map
// keys included) except newlines and tabs, in place, and returns it. YAML cannot carry
// most control characters at all (go-yaml refuses to read the C1 ones back), so a live
// object that holds them is shown with its escapes rather than not at all.
func printableValues(v any) any {
	switch v := v.(type) {
	case map[string]any:
		var renamed []string
		for k, child := range v {
			v[k] = printableValues(child)
			if printable(k, keepLines) != k {
				renamed = append(renamed, k)
			}
		}
		for _, k := range renamed {
			v[printable(k, keepLines)] = v[k]
			delete(v, k)
		}
		return v
	case []any:
		for i, child := range v {
			v[i] = printableValues(child)
		}
		return v
	case string:
		return printable(v, keepLines)
	default:
		return v
	}
}

// printableJSON returns data, JSON as encoding/json writes it (every string valid UTF-8,
// C0 characters already \u escaped), with every other character printable would escape
// (DEL, C1, bidirectional formatting) written as a \u escape. Such characters occur only
// inside strings, where the escape reads back as the same character: the JSON stays
// exact, and the terminal never sees them.
func printableJSON(data []byte) []byte {
	s := string(data)
	escape := func(r rune) bool { return unicode.IsControl(r) && r >= 0x7f || unicode.Is(unicode.Bidi_Control, r) }
	if !strings.ContainsFunc(s, escape) {
		return data
	}
	var b strings.Builder
	for _, r := range s {
		if escape(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return []byte(b.String())
}
