package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Preview widths, in runes, of truncated table cells.
const (
	previewArgs      = 40
	previewRationale = 40
	previewValue     = 60
	previewError     = 100
	previewNext      = 30
	shortTaskID      = 8
)

// table writes aligned columns. Cells are cleaned of control characters,
// so that stored text (which a model may have written) cannot drive the
// terminal.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, clean(c))
	}
	io.WriteString(t.tw, "\n")
}

func (t *table) flush() error { return t.tw.Flush() }

// unsafeRune reports whether r must not reach a terminal as is: control
// characters (C0, DEL, C1) and the invisible marks that reorder text.
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == 0x200e || r == 0x200f || r == 0x061c, // direction marks
		r >= 0x202a && r <= 0x202e, // embeddings and overrides
		r >= 0x2066 && r <= 0x2069, // isolates
		r == 0x2028 || r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// clean escapes what a terminal would interpret in s: control characters
// become \n, \t or \uXXXX, invalid UTF-8 becomes \xXX.
func clean(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// cleanLines cleans each line of a multi-line text.
func cleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	return strings.Join(lines, "\n")
}

// truncate cuts s to at most n runes, ending with "…" when it cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// preview is the compact JSON of v, cleaned and truncated to n runes.
// Strings read as written: "<b>", not "\u003cb\u003e".
func preview(v json.RawMessage, n int) string {
	if len(v) == 0 {
		return "-"
	}
	return truncate(clean(unescapeHTML(checkpoint.CompactJSON(v))), n)
}

// unescapeHTML writes the escapes that Go's JSON encoder adds for HTML
// (\u003c, \u003e, \u0026) as the characters they stand for, keeping
// every other escape (an escaped backslash included) as it is.
func unescapeHTML(js string) string {
	if !strings.Contains(js, `\u00`) {
		return js
	}
	var b strings.Builder
	for i := 0; i < len(js); i++ {
		if js[i] != '\\' || i+1 == len(js) {
			b.WriteByte(js[i])
			continue
		}
		if js[i+1] == 'u' && i+6 <= len(js) {
			if r, ok := map[string]byte{"003c": '<', "003e": '>', "0026": '&'}[strings.ToLower(js[i+2:i+6])]; ok {
				b.WriteByte(r)
				i += 5
				continue
			}
		}
		b.WriteString(js[i : i+2]) // any other escape, whole
		i++
	}
	return b.String()
}

// list joins names for a table cell; "-" when there are none.
func list(names []string, n int) string {
	if len(names) == 0 {
		return "-"
	}
	return truncate(strings.Join(names, ","), n)
}

// formatAge writes a duration for people, to the second: "45s", "3m12s",
// "2h05m", "3d04h". Negative durations (clock skew) count as zero.
func formatAge(d time.Duration) string {
	d = max(d, 0).Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// formatTime writes a time in UTC to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// quote quotes a name given on the command line or read from the database
// for a message, cut to 80 bytes.
func quote(s string) string {
	if len(s) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// shellArg quotes s for a command line that the user may copy, when it
// holds anything but letters, digits and -_.:/@+=,.
func shellArg(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeJSON prints v as one indented JSON document. Characters that a
// terminal would interpret (which JSON allows raw in strings) are escaped.
func (e *env) writeJSON(v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err := e.stdout.Write(escapeJSON(b.Bytes()))
	return err
}

// escapeJSON escapes unsafe runes in encoded JSON as \uXXXX. They can only
// occur inside strings (the syntax is ASCII), where the escape means the
// same character, so the document's data does not change.
func escapeJSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, unsafeRune) {
		return b
	}
	var out bytes.Buffer
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if unsafeRune(r) && r >= 0x7f { // C0 controls are escaped by the encoder
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.Write(b[i : i+n])
		}
		i += n
	}
	return out.Bytes()
}

// indentJSON indents a JSON value for the state's values block.
func indentJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// compactJSON encodes v on one line, without escaping HTML characters.
func compactJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// nonNil returns s, or an empty slice for nil, so JSON shows [] not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
