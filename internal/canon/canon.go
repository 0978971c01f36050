package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects.
const MaxDepth = 128

// ErrInvalid matches every *Error.
var ErrInvalid = errors.New("canon: invalid JSON")

// Error reports why a document has no canonical form. Path locates the
// problem in JSONPath-like form ("$.items[2].id").
type Error struct {
	Path   string
	Reason string
}

// Error states the reason and the JSON path it applies to.
func (e *Error) Error() string { return fmt.Sprintf("canon: %s at %s", e.Reason, e.Path) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// JSON returns the canonical form of the JSON document data. It returns an
// *Error (matching ErrInvalid) naming the path for invalid UTF-8, a syntax
// error, a duplicate key or two keys that differ only in letter case, a
// number it cannot canonicalise, nesting deeper than MaxDepth, or trailing
// data.
func JSON(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, &Error{Path: "$", Reason: "invalid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	w := &walker{dec: dec, data: data}
	if err := w.value(&buf, "$", 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Path: "$", Reason: "trailing data after the document"}
	}
	return buf.Bytes(), nil
}

// Value encodes v with encoding/json and returns its canonical form. It
// returns an *Error (matching ErrInvalid) when v does not encode or its
// encoding is refused by JSON.
func Value(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{Path: "$", Reason: "not encodable: " + err.Error()}
	}
	return JSON(b)
}

// walker reads the tokens of one document. encoding/json decodes the
// escape of a lone surrogate ("\ud800") to U+FFFD, as it does raw bytes
// that are not UTF-8 (which JSON refuses before decoding); token checks
// the raw text of every string so that the escape is refused too, rather
// than canonicalised (and hashed) as "\ufffd".
type walker struct {
	dec  *json.Decoder
	data []byte
}

// token returns the next token, refusing a string (a value or a key)
// whose raw text escapes a lone surrogate.
func (w *walker) token(path string) (json.Token, error) {
	from := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, &Error{Path: path, Reason: syntaxReason(err)}
	}
	if _, ok := tok.(string); ok {
		raw := w.data[from:w.dec.InputOffset()]
		if i := bytes.IndexByte(raw, '"'); i >= 0 {
			raw = raw[i:]
		}
		if r, ok := loneSurrogate(raw); ok {
			return nil, &Error{Path: path, Reason: fmt.Sprintf("a string escapes the lone surrogate \\u%04x, which JSON cannot decode as itself (it would become U+FFFD)", r)}
		}
	}
	return tok, nil
}

// loneSurrogate returns the first surrogate of raw, the text of one JSON
// string, that is escaped without its other half.
func loneSurrogate(raw []byte) (rune, bool) {
	if !bytes.Contains(raw, []byte(`\u`)) {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a two-byte escape, \\ included
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return 0, false // a syntax error, reported by the decoder
		}
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if r2, ok := hex4(raw, i+8); ok && 0xDC00 <= r2 && r2 < 0xE000 {
					i += 11
					continue
				}
			}
			return r, true
		case 0xDC00 <= r && r < 0xE000:
			return r, true
		}
		i += 5
	}
	return 0, false
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func (w *walker) value(buf *bytes.Buffer, path string, depth int) error {
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return &Error{Path: path, Reason: fmt.Sprintf("nesting deeper than %d", MaxDepth)}
		}
		if t == '[' {
			return w.array(buf, path, depth+1)
		}
		if t == '{' {
			return w.object(buf, path, depth+1)
		}
		return &Error{Path: path, Reason: "unexpected " + string(t)}
	case json.Number:
		n, err := Number(string(t))
		if err != nil {
			return &Error{Path: path, Reason: err.Error()}
		}
		buf.WriteString(n)
	case string:
		writeString(buf, t)
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func (w *walker) array(buf *bytes.Buffer, path string, depth int) error {
	buf.WriteByte('[')
	for i := 0; w.dec.More(); i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := w.value(buf, fmt.Sprintf("%s[%d]", path, i), depth); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil {
		return &Error{Path: path, Reason: syntaxReason(err)}
	}
	buf.WriteByte(']')
	return nil
}

func (w *walker) object(buf *bytes.Buffer, path string, depth int) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	folded := map[string]string{}
	for w.dec.More() {
		tok, err := w.token(path)
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return &Error{Path: path, Reason: "object key is not a string"}
		}
		fk := strings.ToLower(key)
		if prev, dup := folded[fk]; dup {
			if prev == key {
				return &Error{Path: path, Reason: fmt.Sprintf("duplicate key %q", key)}
			}
			return &Error{Path: path, Reason: fmt.Sprintf("keys %q and %q differ only in letter case", prev, key)}
		}
		folded[fk] = key
		var vb bytes.Buffer
		if err := w.value(&vb, path+"."+key, depth); err != nil {
			return err
		}
		members = append(members, member{key, vb.Bytes()})
	}
	if _, err := w.dec.Token(); err != nil {
		return &Error{Path: path, Reason: syntaxReason(err)}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.val)
	}
	buf.WriteByte('}')
	return nil
}

func syntaxReason(err error) string {
	if err == io.EOF {
		return "unexpected end of input"
	}
	return "syntax error: " + err.Error()
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a Go string always encodes
	buf.Truncate(buf.Len() - 1)
}

// Number returns the canonical spelling of a JSON number literal (see the
// package doc). It returns an error for text that is not a JSON number.
func Number(s string) (string, error) {
	neg := false
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[start:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return "", fmt.Errorf("bad number %q", s)
	}
	frac := ""
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[fs:i]
		if frac == "" {
			return "", fmt.Errorf("bad number %q", s)
		}
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		es := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if exp > 1_000_000 {
				return "", fmt.Errorf("exponent out of range in %q", s)
			}
			exp = exp*10 + int(s[i]-'0')
			i++
		}
		if i == es {
			return "", fmt.Errorf("bad number %q", s)
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		return "", fmt.Errorf("bad number %q", s)
	}
	// value = 0.digits × 10^point
	digits := strings.TrimLeft(intPart+frac, "0")
	point := len(intPart) + exp - (len(intPart+frac) - len(digits))
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return "0", nil
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case point > 21 || point < -5:
		b.WriteByte(digits[0])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		e := point - 1
		b.WriteByte('e')
		if e > 0 {
			b.WriteByte('+')
		}
		fmt.Fprintf(&b, "%d", e)
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
	default:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	}
	return b.String(), nil
}

// Hash returns the hex SHA-256 of parts, each prefixed with its length as a
// big-endian uint64, so that ("ab","c") and ("a","bc") never collide.
func Hash(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// HashStrings is Hash over strings.
func HashStrings(parts ...string) string {
	bs := make([][]byte, len(parts))
	for i, p := range parts {
		bs[i] = []byte(p)
	}
	return Hash(bs...)
}
