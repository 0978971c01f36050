package reviewweb

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on what a page shows of a string that came from a model, a tool
// or the database. The JSON API returns values whole; pages cut them and
// say how much they left out.
const (
	maxNameBytes      = 200       // a tool, node, thread, owner or reviewer
	maxSummaryBytes   = 160       // an argument summary in the list
	maxRationaleBytes = 8 << 10   // a rationale or a note
	maxJSONBytes      = 128 << 10 // formatted arguments or context
)

// segment is a piece of text as a page shows it: plain text, or a mark
// that stands visibly for a character the page must not obey (a direction
// override, a control character, an invalid byte).
type segment struct {
	Text  string
	Mark  bool
	Title string // what the mark stands for
}

// shown is a string prepared for a page: its segments, and how many bytes
// of the original were left out.
type shown struct {
	Segs    []segment
	Omitted int // bytes not shown
	Total   int // bytes in the original
}

// Cut reports whether part of the original is not shown.
func (s shown) Cut() bool { return s.Omitted > 0 }

// String is the text as shown, with marks in place of the characters they
// stand for (for titles and tests).
func (s shown) String() string {
	var b strings.Builder
	for _, sg := range s.Segs {
		b.WriteString(sg.Text)
	}
	return b.String()
}

// bidiNames names the characters that change the direction of text:
// shown, never obeyed, so that "invoice_cod.exe" reads as it is stored.
var bidiNames = map[rune]string{
	0x061C: "ARABIC LETTER MARK",
	0x200E: "LEFT-TO-RIGHT MARK",
	0x200F: "RIGHT-TO-LEFT MARK",
	0x202A: "LEFT-TO-RIGHT EMBEDDING",
	0x202B: "RIGHT-TO-LEFT EMBEDDING",
	0x202C: "POP DIRECTIONAL FORMATTING",
	0x202D: "LEFT-TO-RIGHT OVERRIDE",
	0x202E: "RIGHT-TO-LEFT OVERRIDE",
	0x2066: "LEFT-TO-RIGHT ISOLATE",
	0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE",
	0x2069: "POP DIRECTIONAL ISOLATE",
}

// display prepares s for a page: at most max bytes of it (cut on a rune
// boundary), with every character a reader could not see or that would
// change how the rest reads replaced by a visible mark: direction
// controls, other format characters (zero-width spaces and joiners),
// control characters (but newline and tab when multiline is set, which
// the page lays out), line and paragraph separators, and each byte that
// is not UTF-8.
func display(s string, max int, multiline bool) shown {
	out := shown{Total: len(s)}
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out.Omitted = len(s) - cut
		s = s[:cut]
	}
	var plain strings.Builder
	flush := func() {
		if plain.Len() > 0 {
			out.Segs = append(out.Segs, segment{Text: plain.String()})
			plain.Reset()
		}
	}
	mark := func(text, title string) {
		flush()
		out.Segs = append(out.Segs, segment{Text: text, Mark: true, Title: title})
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			mark(fmt.Sprintf("\\x%02X", s[i]), "a byte that is not UTF-8")
		case r == utf8.RuneError:
			mark("\uFFFD", "U+FFFD, the replacement character: the text held bytes that are not UTF-8 when it was stored")
		case multiline && (r == '\n' || r == '\t'):
			plain.WriteRune(r)
		case bidiNames[r] != "":
			mark(fmt.Sprintf("U+%04X", r), bidiNames[r]+" (shown, not applied)")
		case r == '\n':
			mark("⏎", "a line break")
		case unicode.IsControl(r):
			mark(fmt.Sprintf("U+%04X", r), "a control character")
		case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			mark(fmt.Sprintf("U+%04X", r), "an invisible formatting character")
		default:
			plain.WriteString(s[i : i+n])
		}
		i += n
	}
	flush()
	return out
}

// name prepares a short identifier (tool, node, thread, owner, reviewer)
// for a page.
func name(s string) shown { return display(s, maxNameBytes, false) }
