package graph

import (
	"encoding"
	"encoding/json"
	"reflect"
	"unicode/utf8"
)

// This file encodes a string state value as json.Marshal does, byte for
// byte, into an array of exactly its size. json.Marshal builds its output
// in a buffer that grows by doubling and then returns a copy of it: for
// a big value (a document a node read) that is about three times the
// value's encoded size allocated, where quotedLen and appendQuoted
// allocate it once.

// plainString reports whether json.Marshal encodes values of t as a
// quoted string by encoding/json's own rules (appendString): t is a
// string kind with no JSON or text method of its own, and not
// json.Number (written as a number).
func plainString(t reflect.Type) bool {
	if t.Kind() != reflect.String || t == reflect.TypeFor[json.Number]() {
		return false
	}
	for _, t := range []reflect.Type{t, reflect.PointerTo(t)} {
		if t.Implements(reflect.TypeFor[json.Marshaler]()) || t.Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
			return false
		}
	}
	return true
}

// escLen is, for an ASCII byte, how many bytes json.Marshal writes for it
// inside a string (HTML escaping on, as Marshal has it): 1, 2 for the
// short escapes (\" \\ \b \f \n \r \t), 6 for \u00XX.
var escLen = func() (t [utf8.RuneSelf]uint8) {
	for b := range t {
		switch {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			t[b] = 2
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			t[b] = 6
		default:
			t[b] = 1
		}
	}
	return t
}()

// quotedLen returns the length of s encoded as a JSON string by
// json.Marshal, and false when s is not valid UTF-8 (Marshal would
// replace the bytes with U+FFFD, which the runtime refuses to store).
func quotedLen(s string) (int, bool) {
	n := 2
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			n += int(escLen[b])
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			return 0, false
		}
		if c == '\u2028' || c == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n, true
}

const hexDigits = "0123456789abcdef"

// appendQuoted appends s encoded as json.Marshal encodes a string. s is
// valid UTF-8 (quotedLen said so); dst has room for quotedLen(s) bytes
// when the caller wants no growth.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if escLen[b] == 1 {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
