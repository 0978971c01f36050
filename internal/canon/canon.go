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
	if err := canonValue(dec, &buf, "$", 0); err != nil {
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

func canonValue(dec *json.Decoder, buf *bytes.Buffer, path string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return &Error{Path: path, Reason: syntaxReason(err)}
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return &Error{Path: path, Reason: fmt.Sprintf("nesting deeper than %d", MaxDepth)}
		}
		if t == '[' {
			return canonArray(dec, buf, path, depth+1)
		}
		if t == '{' {
			return canonObject(dec, buf, path, depth+1)
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

func canonArray(dec *json.Decoder, buf *bytes.Buffer, path string, depth int) error {
	buf.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := canonValue(dec, buf, fmt.Sprintf("%s[%d]", path, i), depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return &Error{Path: path, Reason: syntaxReason(err)}
	}
	buf.WriteByte(']')
	return nil
}

func canonObject(dec *json.Decoder, buf *bytes.Buffer, path string, depth int) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	folded := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return &Error{Path: path, Reason: syntaxReason(err)}
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
		if err := canonValue(dec, &vb, path+"."+key, depth); err != nil {
			return err
		}
		members = append(members, member{key, vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
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
