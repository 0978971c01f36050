package nodes

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The redactor's rule. A secret is recognised whole in every spelling
// below, and so is any run of at least minWindow consecutive bytes of it
// (a window): a value a tool writes in two parts, on two log lines, in two
// fields or wrapped across lines, loses every part of minWindow bytes or
// more. The spellings, each recognised for the whole value and for any
// window of it:
//
//   - the bytes as they are, in any mix of ASCII letter case (so also the
//     value's strings.ToUpper and strings.ToLower forms), with a space and
//     '+' interchangeable (URL query text writes a space as '+');
//   - any of those bytes escaped as JSON escapes them (\u0041 in either
//     hex case, a surrogate pair beyond the BMP, \/ \" \\ \n and the other
//     two-character escapes) or as a URL does (%2F or %2f), mixed freely:
//     a second view of the text, with one layer of escapes decoded, is
//     matched too, and what matches there is redacted in the text (JSON
//     redaction decodes each value first, so JSON inside a JSON string is
//     covered; a value that itself holds text that reads as an escape, a
//     literal %41, is found as is or escaped, not half and half);
//   - hex of either case: a window is 2*minWindow hex digits;
//   - base64, standard or URL alphabet, padded or not, with or without \/
//     or %2F escapes, wherever the value sits in a longer encoded text
//     ("Basic " + base64("user:" + secret)): a window is minB64Window
//     characters that the value's bits alone determine, which every run of
//     minWindow bytes yields at any alignment (8 bytes are 64 bits, and
//     however they fall on the 6-bit characters, 10 characters lie wholly
//     inside them). The characters a value shares with its neighbours
//     (partly its bits, partly theirs) stay, a few bits at each end.
//
// What stays readable is therefore, in each text the redactor is given,
// runs of fewer than minWindow bytes of a secret (fewer than 2*minWindow
// hex digits; fewer than minB64Window base64 characters, at most 54 bits,
// and the few bits at the ends of a redacted base64 run). A secret written across two texts (two log records, two
// error messages) loses each part of minWindow bytes or more: of a value
// of 2*minWindow bytes or more split once, at most minWindow-1 bytes stay
// readable, on one side of the split. A value shorter than minWindow bytes
// (the executor refuses values under minRedact) is recognised only whole,
// in every spelling: split, its parts stay.
//
// The cost: one pass over the text (two when it holds '\\' or '%'), a
// table look-up per byte, and work proportional to each match.
const (
	minWindow    = 8
	minB64Window = 10
)

// fold maps a byte to the byte it is matched as: ASCII letters to lower
// case, a space to '+'.
var fold = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = byte(c + 'a' - 'A')
	}
	t[' '] = '+'
	return t
}()

// form is one spelling of a secret, folded, and the shortest run of it
// that is redacted on its own: len(text) for a spelling that is
// recognised only whole.
type form struct {
	text string
	min  int
}

// gram is a run of q bytes read as an integer (the first byte highest).
type gram = uint64

// entry says that the gram at offset off of form f starts there.
type entry struct{ f, off int32 }

// gramTable indexes the q-byte grams at which a match of a form can start.
// A bit set in front of the map answers most look-ups of a text's grams
// (nearly all of which start no match) without touching the map.
type gramTable struct {
	q      int
	filter []uint64
	at     map[gram][]entry
}

const filterBits = 17

func filterIndex(g gram) uint64 { return (g * 0x9E3779B97F4A7C15) >> (64 - filterBits) }

func (t *gramTable) add(g gram, e entry) {
	if t.at == nil {
		t.filter = make([]uint64, 1<<filterBits/64)
		t.at = map[gram][]entry{}
	}
	i := filterIndex(g)
	t.filter[i/64] |= 1 << (i % 64)
	t.at[g] = append(t.at[g], e)
}

// matcher finds the spans of a text that spell a secret (see minWindow).
// It is immutable once built.
type matcher struct {
	forms []form
	// long indexes forms whose shortest match is minWindow bytes or more,
	// by 8-byte grams; short the others (whole spellings of values under
	// minWindow bytes), by 4-byte grams.
	long, short gramTable
}

// newMatcher builds the matcher of values (each at least minRedact bytes).
func newMatcher(values []string) *matcher {
	m := &matcher{long: gramTable{q: 8}, short: gramTable{q: 4}}
	seen := map[form]bool{}
	// addForm indexes text; min 0 means whole only.
	addForm := func(text string, min int) {
		text = foldString(text)
		if min == 0 {
			min = len(text)
		}
		if len(text) < min || min < minRedact {
			return
		}
		f := form{text, min}
		if seen[f] {
			return
		}
		seen[f] = true
		fi := int32(len(m.forms))
		m.forms = append(m.forms, f)
		t := &m.long
		if min < t.q {
			t = &m.short
		}
		// A match of min bytes or more starts at an offset up to
		// len-min; every such offset is indexed, so that a match is
		// always found at its first byte (see scan).
		for off := 0; off+min <= len(text); off++ {
			t.add(gramOf(text[off:off+t.q]), entry{fi, int32(off)})
		}
	}
	for _, v := range values {
		b := []byte(v)
		whole := 0 // recognised only whole
		if len(v) >= minWindow {
			addForm(v, minWindow)
			addForm(strings.ToUpper(v), minWindow)
			addForm(strings.ToLower(v), minWindow)
			// Decoding JSON turns invalid UTF-8 into U+FFFD, and so does
			// encoding it.
			addForm(strings.ToValidUTF8(v, "\uFFFD"), minWindow)
			addForm(hex.EncodeToString(b), 2*minWindow)
			for _, d := range base64Determined(b) {
				addForm(d, minB64Window)
			}
		} else {
			addForm(v, whole)
			addForm(strings.ToUpper(v), whole)
			addForm(strings.ToLower(v), whole)
			addForm(hex.EncodeToString(b), whole)
			for _, d := range base64Determined(b) {
				if len(d) >= minInner {
					addForm(d, whole)
				}
			}
		}
		// Whole spellings: what the decoded view cannot rebuild (invalid
		// UTF-8 that JSON writes as \ufffd) and the ends of whole base64
		// texts (padding, and the last character, which only the value
		// determines when it ends the text).
		js, _ := json.Marshal(v)
		addForm(string(js[1:len(js)-1]), whole)
		addForm(url.QueryEscape(v), whole)
		addForm(url.PathEscape(v), whole)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			addForm(enc.EncodeToString(b), whole)
		}
	}
	return m
}

func foldString(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = fold[c]
	}
	return string(b)
}

// gramOf reads s (at most 8 bytes, folded already) as a gram.
func gramOf(s string) gram {
	var g gram
	for i := range len(s) {
		g = g<<8 | gram(s[i])
	}
	return g
}

// base64Determined returns, for each of the three alignments of v against
// base64's 3-byte groups and in both alphabets, the characters that v's
// bits alone determine wherever v sits in a longer encoded text (each
// character encodes 6 bits: those wholly inside v's bits).
func base64Determined(v []byte) []string {
	var out []string
	for k := range 3 {
		buf := make([]byte, k+len(v))
		copy(buf[k:], v)
		first, end := (8*k+5)/6, (8*k+8*len(v))/6 // characters [first, end) lie inside v
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			out = append(out, enc.EncodeToString(buf)[first:end])
		}
	}
	return out
}

// minInner is the fewest base64 characters of a value under minWindow
// bytes that are recognised inside a longer encoded text: six bytes'
// worth; fewer would match ordinary text.
const minInner = 8

// span is a part [from, to) of a text to redact.
type span struct{ from, to int }

// find returns the spans of s to redact, sorted and disjoint (overlapping
// matches merged; adjacent ones stay apart, each redacted on its own).
func find[T ~string | ~[]byte](m *matcher, s T) []span {
	spans, escaped := scan(m, s, nil)
	if escaped {
		dec, starts := decodeView(s)
		from := len(spans)
		spans, _ = scan(m, dec, spans)
		for i := from; i < len(spans); i++ {
			sp := spans[i]
			spans[i] = span{int(starts[sp.from]), tokenEnd(starts, sp.to-1, len(s))}
		}
	}
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.from != b.from {
			return a.from - b.from
		}
		return b.to - a.to
	})
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.from < last.to {
			last.to = max(last.to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// scan appends the spans of v that match a form to out, and reports
// whether v holds a '\\' or '%' (so that its decoded view may differ).
// A match is found at its first byte only: where the byte before it
// continues the form too, the match was found (and redacted, longer) one
// byte earlier; so each match costs its length once.
func scan[T ~string | ~[]byte](m *matcher, v T, out []span) ([]span, bool) {
	var g gram
	escaped := false
	long, short := m.long.at != nil, m.short.at != nil
	for i := 0; i < len(v); i++ {
		c := v[i]
		escaped = escaped || c == '\\' || c == '%'
		g = g<<8 | gram(fold[c])
		if long && i >= 7 {
			out = match(m, &m.long, v, i-7, g, out)
		}
		if short && i >= 3 {
			out = match(m, &m.short, v, i-3, g&0xffffffff, out)
		}
	}
	return out, escaped
}

// match appends the matches of the forms that t says may start at v[s:]
// (whose gram is g).
func match[T ~string | ~[]byte](m *matcher, t *gramTable, v T, s int, g gram, out []span) []span {
	if i := filterIndex(g); t.filter[i/64]&(1<<(i%64)) == 0 {
		return out
	}
	for _, e := range t.at[g] {
		f, j := m.forms[e.f].text, int(e.off)
		if j > 0 && s > 0 && fold[v[s-1]] == f[j-1] {
			continue // not its first byte
		}
		n := t.q
		for s+n < len(v) && j+n < len(f) && fold[v[s+n]] == f[j+n] {
			n++
		}
		if n >= m.forms[e.f].min {
			out = append(out, span{s, s + n})
		}
	}
	return out
}

// decodeView returns s with its JSON escapes (\u0041, a surrogate pair,
// \/ and the other two-character escapes) and URL escapes (%2F) decoded,
// one layer, and for each decoded byte the offset in s of the text it
// was decoded from. What is not a valid escape stays as it is.
func decodeView[T ~string | ~[]byte](s T) ([]byte, []int32) {
	out := make([]byte, 0, len(s))
	starts := make([]int32, 0, len(s))
	var rb [utf8.UTFMax]byte
	for i := 0; i < len(s); {
		c, n := s[i], 1
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			c, n = unhex(s[i+1])<<4|unhex(s[i+2]), 3
		case c == '\\' && i+1 < len(s):
			if e := jsonUnescape[s[i+1]]; e != 0 {
				c, n = e, 2
			} else if r, k := unescapeU(s[i:]); k > 0 {
				for _, b := range rb[:utf8.EncodeRune(rb[:], r)] {
					out = append(out, b)
					starts = append(starts, int32(i))
				}
				i += k
				continue
			}
		}
		out = append(out, c)
		starts = append(starts, int32(i))
		i += n
	}
	return out, starts
}

// tokenEnd returns the end in s (of length n) of the text that decoded
// byte k was decoded from.
func tokenEnd(starts []int32, k, n int) int {
	for i := k + 1; i < len(starts); i++ {
		if starts[i] != starts[k] {
			return int(starts[i])
		}
	}
	return n
}

// jsonUnescape are JSON's two-character escapes, by their second byte (0:
// none).
var jsonUnescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unescapeU decodes a \uXXXX escape at the start of s, or a surrogate
// pair of two; n is 0 when there is none (a lone surrogate is none).
func unescapeU[T ~string | ~[]byte](s T) (r rune, n int) {
	u := func(at int) rune {
		if at+6 > len(s) || s[at] != '\\' || s[at+1] != 'u' {
			return -1
		}
		var x rune
		for _, c := range []byte{s[at+2], s[at+3], s[at+4], s[at+5]} {
			if !isHex(c) {
				return -1
			}
			x = x<<4 | rune(unhex(c))
		}
		return x
	}
	hi := u(0)
	switch {
	case hi < 0:
		return 0, 0
	case !utf16.IsSurrogate(hi):
		return hi, 6
	}
	if r := utf16.DecodeRune(hi, u(6)); r != utf8.RuneError {
		return r, 12
	}
	return 0, 0
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
