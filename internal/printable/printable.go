// Package printable makes text that a pull request's code can write (a
// container's last log line, a readiness probe's message, a chart's error)
// safe to show: in an object's status, in a pull-request comment, on a
// terminal. The text may carry terminal escapes (an OSC 52 clipboard write,
// a screen clear) and bidirectional overrides that make a reader see other
// words than the ones written; those never leave Petri.
package printable

import (
	"strings"
	"unicode"
)

// String returns s with every control character (C0, DEL, C1), every
// bidirectional formatting character and every other invisible format
// character (zero-width joiners and spaces, the byte-order mark) removed;
// tabs, newlines and carriage returns become spaces. The escape sequence a
// removed ESC started stays as harmless printable text.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case hidden(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func clean(s string) bool {
	for _, r := range s {
		if r == '\t' || r == '\n' || r == '\r' || hidden(r) {
			return false
		}
	}
	return true
}

// hidden is a rune that changes how the text around it is shown instead of
// being shown itself: controls (Cc, which covers C0, DEL and C1), format
// characters (Cf: the bidirectional embeddings, overrides and isolates, the
// zero-width characters, the soft hyphen), invalid UTF-8 and the line and
// paragraph separators.
func hidden(r rune) bool {
	return r == unicode.ReplacementChar || unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) ||
		r == '\u2028' || r == '\u2029'
}
