package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// quoteCases are strings with every kind of byte json.Marshal escapes
// differently: short escapes, \u00XX, HTML characters, U+2028 and U+2029,
// multibyte runes and a valid U+FFFD.
var quoteCases = []string{
	"", "plain", `"quoted" \back\slash`, "\b\f\n\r\t", "\x00\x01\x1f\x7f",
	"<a href='x'>&amp;</a>", "line\u2028para\u2029end", "é日本語🙂", "\ufffd kept",
	strings.Repeat("ab\n", 1000),
}

// TestQuoteStringAsMarshal: quotedLen and appendQuoted write what
// json.Marshal writes, and quotedLen refuses what it would replace.
func TestQuoteStringAsMarshal(t *testing.T) {
	for _, s := range quoteCases {
		checkQuote(t, s)
	}
	for _, s := range []string{"\xff", "ok\xc3", "\xed\xa0\x80 (a surrogate)", "a\x80b"} {
		if _, ok := quotedLen(s); ok {
			t.Errorf("quotedLen(%q) accepted invalid UTF-8", s)
		}
	}
}

func checkQuote(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := quotedLen(s)
	if !ok {
		t.Fatalf("quotedLen(%q) refused a valid string", s)
	}
	got := appendQuoted(make([]byte, 0, n), s)
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("appendQuoted(%q) (-json.Marshal +got):\n%s", s, diff)
	}
	if n != len(want) {
		t.Errorf("quotedLen(%q) = %d, json.Marshal wrote %d bytes", s, n, len(want))
	}
}

// FuzzQuoteString: for any string, the encoding is json.Marshal's, or it
// is refused exactly when the string is not valid UTF-8.
func FuzzQuoteString(f *testing.F) {
	for _, s := range quoteCases {
		f.Add(s)
	}
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			if _, ok := quotedLen(s); ok {
				t.Fatalf("quotedLen(%q) accepted invalid UTF-8", s)
			}
			return
		}
		checkQuote(t, s)
	})
}

type quoteName string

type quoteText string

func (q quoteText) MarshalText() ([]byte, error) { return []byte("t:" + q), nil }

type quoteJSON string

func (q *quoteJSON) MarshalJSON() ([]byte, error) { return []byte(`"j"`), nil }

// TestPlainString: only the string types encoding/json quotes by its own
// rules take the direct encoding.
func TestPlainString(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		want bool
	}{
		{reflect.TypeFor[string](), true},
		{reflect.TypeFor[quoteName](), true},
		{reflect.TypeFor[quoteText](), false},
		{reflect.TypeFor[quoteJSON](), false},
		{reflect.TypeFor[json.Number](), false},
		{reflect.TypeFor[[]byte](), false},
		{reflect.TypeFor[any](), false},
	} {
		if got := plainString(c.typ); got != c.want {
			t.Errorf("plainString(%v) = %v, want %v", c.typ, got, c.want)
		}
	}
}

// TestEncodeStringOnce (R22): a big string value is encoded into one
// array of its encoded size: no growth, no final copy, and nothing at
// all allocated for one over the cap.
func TestEncodeStringOnce(t *testing.T) {
	type st struct{ Blob quoteName }
	sc, errs := newSchema(reflect.TypeFor[st]())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	fl := &sc.fields[0]
	big := quoteName(strings.Repeat("0123456789\"bcd\n", 8<<20/16))
	v := reflect.ValueOf(big)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b, err := encodeValue(context.Background(), nil, v, fl, where{prefix: "field", field: "Blob"}, 0)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(big)
	if !bytes.Equal(b, want) {
		t.Fatalf("encodeValue wrote %d bytes unlike json.Marshal's %d", len(b), len(want))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(want))+16<<10 {
		t.Errorf("encoding a %d-byte string allocated %d bytes, more than its encoding and 16 KiB (a page of rounding)", len(want), alloc)
	}
	runtime.ReadMemStats(&before)
	_, err = encodeValue(context.Background(), nil, v, fl, where{prefix: "field", field: "Blob"}, len(want)-1)
	runtime.ReadMemStats(&after)
	if se := (*SizeError)(nil); !errors.As(err, &se) || se.Size != len(want) {
		t.Errorf("over the cap: %v, want a SizeError of size %d", err, len(want))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4096 {
		t.Errorf("refusing a string over the cap allocated %d bytes", alloc)
	}
}
