package canon

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"key order", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"whitespace", " { \"a\" : [ 1 , 2 ] } ", `{"a":[1,2]}`},
		{"integer spellings", `[1, 1.0, 1e0, 10e-1, 0.1e1]`, `[1,1,1,1,1]`},
		{"negative zero", `[-0, -0.0, 0e5]`, `[0,0,0]`},
		{"fractions", `[1.50, 0.001, -2.250e1]`, `[1.5,0.001,-22.5]`},
		{"large ints stay distinct", `[9007199254740993, 9007199254740992]`, `[9007199254740993,9007199254740992]`},
		{"exponent form", `[1e22, 1e21, 1e20, 1e-7, 1e-6, 123e30]`, `[1e+22,1e+21,100000000000000000000,1e-7,0.000001,1.23e+32]`},
		{"strings keep code points", `["caf\u00e9", "cafe\u0301", "<&>"]`, "[\"caf\u00e9\",\"cafe\u0301\",\"<&>\"]"},
		{"nested", `{"z":{"y":[{"b":true,"a":null}]}}`, `{"z":{"y":[{"a":null,"b":true}]}}`},
		{"escapes", `"a\"b\\c\n"`, `"a\"b\\c\n"`},
		{"surrogate pair", `"\ud83d\ude00"`, "\"\U0001F600\""},
		{"escaped backslash before u", `"\\ud800"`, `"\\ud800"`},
		{"replacement character", `"\ufffd"`, "\"\uFFFD\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := JSON([]byte(tc.in))
			if err != nil {
				t.Fatalf("JSON(%s): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("JSON(%s) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestJSONRejects(t *testing.T) {
	deep := ""
	for i := 0; i <= MaxDepth; i++ {
		deep += "["
	}
	tests := []struct{ name, in string }{
		{"duplicate key", `{"a":1,"a":2}`},
		{"case-variant keys", `{"ticket_id":"A","Ticket_ID":"B"}`},
		{"nested duplicate", `{"x":[{"k":1,"k":1}]}`},
		{"trailing data", `{"a":1} {"b":2}`},
		{"truncated", `{"a":`},
		{"invalid utf8", "\"\xff\""},
		{"too deep", deep},
		{"leading zero", `01`},
		{"empty", ``},
		// encoding/json decodes these to U+FFFD; raw bytes that are not
		// UTF-8 are refused, and so are they (issue 16).
		{"lone high surrogate", `"\ud800"`},
		{"lone low surrogate", `{"a":"x\uDC00y"}`},
		{"high surrogate at the end", `["\ud83d"]`},
		{"high then not a low", `"\ud83d\u0041"`},
		{"surrogate in a key", `{"\ud800":1}`},
		{"surrogate after an escaped backslash pair", `"\\\ud800"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := JSON([]byte(tc.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("JSON(%q) error = %v, want ErrInvalid", tc.in, err)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Path == "" {
				t.Errorf("JSON(%q) error %v is not an *Error with a path", tc.in, err)
			}
		})
	}
}

func TestHashIsLengthPrefixed(t *testing.T) {
	if HashStrings("ab", "c") == HashStrings("a", "bc") {
		t.Error(`HashStrings("ab","c") == HashStrings("a","bc")`)
	}
	if HashStrings("x") == HashStrings("x", "") {
		t.Error(`an empty trailing part does not change the hash`)
	}
	// Golden vector: changing it breaks every stored idempotency key.
	const want = "d35df7ab883168b2a61c6e071f533162706920274d3bfcfa6ec903d0bc12427a"
	if got := HashStrings("thread-1", "close_ticket", `{"ticket_id":"TKT-3"}`); got != want {
		t.Errorf("golden hash = %s, want %s", got, want)
	}
}

// FuzzJSON checks that canonicalisation is idempotent and that key order
// and whitespace never change the result.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,"x",null]}`, `[1e3,-0,0.5]`, `"\u00e9"`, `{"a":{"b":{"c":true}}}`, `12345678901234567890`, `"\ud800"`, `{"\udc00":"\ud83d\ude00"}`, `["\\ud800","\ufffd"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c1, err := JSON([]byte(in))
		if err != nil {
			return
		}
		c2, err := JSON(c1)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", c1, err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("not idempotent: %s -> %s", c1, c2)
		}
	})
}

// TestLoneSurrogate (issue 16): the escape of a lone surrogate is refused
// where it is, never canonicalised as "\ufffd" (so its arguments never
// hash as the replacement character's do), and the path names it.
func TestLoneSurrogate(t *testing.T) {
	for _, tc := range []struct{ in, path string }{
		{`{"note":"\ud800"}`, "$.note"},
		{`{"items":[{"id":"ok"},{"id":"\udfff"}]}`, "$.items[1].id"},
		{`{"a":{"\ud800":1}}`, "$.a"},
	} {
		_, err := JSON([]byte(tc.in))
		var ce *Error
		if !errors.As(err, &ce) || ce.Path != tc.path {
			t.Errorf("JSON(%s) = %v, want an *Error at %s", tc.in, err, tc.path)
		}
	}
	if _, err := JSON([]byte(`{"note":"\ufffd"}`)); err != nil {
		t.Errorf("the replacement character itself: %v", err)
	}
}
