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
	for _, s := range []string{`{"b":1,"a":[1.0,"x",null]}`, `[1e3,-0,0.5]`, `"\u00e9"`, `{"a":{"b":{"c":true}}}`, `12345678901234567890`} {
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
