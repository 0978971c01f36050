package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// ---------------------------------------------------------------------------
// Types under test.

type Inner struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"`
}

// Tagged has the odd tags on purpose; staticcheck is told so.
type Tagged struct {
	Renamed int `json:"renamed"`
	Skipped int `json:"-"`
	//lint:ignore SA5008 the name "-" is what is under test
	Dash int `json:"-,"`
	//lint:ignore SA5008 an invalid tag name is what is under test: the Go name is used
	BadTag int `json:"a\\b"`
	Opts   int `json:",omitempty"`
	Punct  int `json:"x-y.z"`
	//lint:ignore U1000 an unexported field is never a key
	lower int
}

type EmbA struct {
	X int
	Y int
	Z int
}

type EmbB struct {
	X int
	Y int `json:"Y"`
	W int
}

type EmbDeep struct{ EmbA }

type MyInt int

//lint:ignore U1000 embedded unexported non-struct types are skipped
type myInt int

type embS struct{ S1 int }

// Dom exercises encoding/json's dominance rules. Its JSON names are Y (the
// tagged EmbB.Y beats the untagged EmbA.Y), W, Z (depth 0 beats EmbA.Z),
// named (an embedded struct with a tag name is a normal field), MyInt (an
// embedded non-struct) and S1 (promoted through an unexported embedded
// pointer). X is dropped: EmbA.X and EmbB.X are equally deep and untagged.
type Dom struct {
	EmbA
	*EmbB
	Z     string
	Named EmbDeep `json:"named"`
	MyInt
	//lint:ignore U1000 embedded unexported non-struct types are skipped
	myInt
	*embS
}

// Shallow: EmbB's X and Y (depth 1) beat EmbDeep's (depth 2); Z only at depth 2.
type Shallow struct {
	EmbDeep
	EmbB
}

type Quoted struct {
	Q  int     `json:"q,string"`
	QP *int    `json:"qp,string"`
	QS string  `json:"qs,string"`
	QB bool    `json:"qb,string"`
	QF float64 `json:"qf,string"`
	QU *uint16 `json:"qu,string,omitempty"`
	QN Number  `json:"qn,string"`
	//lint:ignore SA5008 a type with its own marshaler ignores the option
	QT Stamp `json:"qt,string"`
	//lint:ignore SA5008 the option is ignored for kinds it cannot quote
	QA []string `json:"qa,string"`
}

// Number is json.Number under a name the tests can refer to.
type Number = json.Number

// Stamp marshals itself as text.
type Stamp struct{ v string }

func (s Stamp) MarshalText() ([]byte, error) { return []byte("stamp:" + s.v), nil }
func (s *Stamp) UnmarshalText(b []byte) error {
	s.v = strings.TrimPrefix(string(b), "stamp:")
	return nil
}
func (s *textOnly) UnmarshalText(b []byte) error { s.S = string(b); return nil }

// textOnly only unmarshals itself; Marshal writes it as a plain struct.
type textOnly struct{ S string }

type Kinds struct {
	B     bool
	I     int
	U     uint8
	F     float64
	S     string
	St    Inner
	Arr   [2]int
	P     *int
	If    any
	Sl    []int
	M     map[string]int
	T     time.Time
	Raw   json.RawMessage
	Big   big.Int
	BigP  *big.Int
	Txt   textOnly
	Bytes []byte
	Num   json.Number
	Stamp Stamp
}

type Unsup struct {
	C  chan int
	PC *chan int
	F  func()
	Cx complex128
}

type Node struct {
	Val  int
	Next *Node
	Kids []Node
	Map  map[string]*Node
}

// P is a pointer type that points to itself.
type P *P

type Wide struct {
	F00, F01, F02, F03, F04, F05, F06, F07, F08, F09 int
	F10, F11, F12, F13, F14, F15, F16, F17, F18, F19 int
	F20, F21, F22, F23, F24, F25, F26, F27, F28, F29 int
	F30, F31, F32, F33, F34, F35, F36, F37, F38, F39 int
	F40, F41, F42, F43, F44, F45, F46, F47, F48, F49 int
	F50, F51, F52, F53, F54, F55, F56, F57, F58, F59 int
	F60, F61, F62, F63, F64, F65, F66, F67, F68, F69 int
}

// Doc is a mixed document like a graph state.
type Doc struct {
	Item   Inner
	Log    []Inner
	Tags   map[string]string
	Counts map[int]int64
	Hosts  map[netip.Addr]string
	Arr    [3]uint8
	Opt    *float32
	Any    any
	Blob   []byte
	When   time.Time
	Raw    json.RawMessage
	Kids   []*Doc `json:",omitempty"`
	Quoted
	*Inner2
	Dom Dom
}

type Inner2 struct {
	Extra string `json:"extra"`
	Level int8
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// ---------------------------------------------------------------------------
// The rules, case by case.

type want struct {
	Path   string
	Reason string // a substring of the reason
}

type checkCase struct {
	name string
	typ  reflect.Type // nil: For(nil), any document
	in   string
	want *want // nil: accepted
}

func ok(name string, typ reflect.Type, in string) checkCase {
	return checkCase{name: name, typ: typ, in: in}
}

func bad(name string, typ reflect.Type, in, path, reason string) checkCase {
	return checkCase{name: name, typ: typ, in: in, want: &want{Path: path, Reason: reason}}
}

func runCases(t *testing.T, cases []checkCase) {
	t.Helper()
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			err := strictjson.For(tc.typ).Check([]byte(tc.in))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			var e *strictjson.Error
			if !errors.As(err, &e) {
				t.Fatalf("Check(%q) = %v, want *Error", tc.in, err)
			}
			if !errors.Is(err, strictjson.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			got := want{Path: e.Path, Reason: tc.want.Reason}
			if !strings.Contains(e.Reason, tc.want.Reason) {
				got.Reason = e.Reason
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("Check(%q) error mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestSyntax(t *testing.T) {
	runCases(t, []checkCase{
		bad("empty", nil, "", "$", "empty input"),
		bad("only whitespace", nil, " \t\r\n", "$", "empty input"),
		bad("BOM", nil, "\xEF\xBB\xBF{}", "$", "byte order mark"),
		bad("BOM after space", nil, " \xEF\xBB\xBF{}", "$", `invalid character '\xef' looking for beginning of value`),
		bad("unclosed object", nil, "{", "$", "unexpected end of JSON input"),
		bad("unclosed array", nil, "[1,", "$[1]", "unexpected end of JSON input"),
		bad("trailing comma object", nil, `{"a":1,}`, "$", "looking for beginning of object key string"),
		bad("trailing comma array", nil, `[1,]`, "$[1]", "looking for beginning of value"),
		bad("missing comma", nil, `[1 2]`, "$", "after array element"),
		bad("missing colon", nil, `{"a" 1}`, "$", "after object key"),
		bad("unquoted key", nil, `{a:1}`, "$", "looking for beginning of object key string"),
		bad("single quotes", nil, `'a'`, "$", "looking for beginning of value"),
		bad("short literal", nil, `tru`, "$", "unexpected end of JSON input"),
		bad("wrong literal", nil, `trUe`, "$", "in literal true"),
		bad("literal with junk", nil, `[nullx]`, "$", "after array element"),
		bad("trailing value", nil, `{} x`, "$", "after top-level value"),
		bad("two values", nil, `{}{}`, "$", "after top-level value"),
		bad("trailing NUL", nil, "1\x00", "$", "after top-level value"),
		bad("unterminated string", nil, `"abc`, "$", "unterminated string"),
		bad("raw tab in string", nil, "\"a\tb\"", "$", `control character '\t'`),
		bad("raw newline in key", nil, "{\"a\nb\":1}", "$", "control character"),
		bad("bad escape", nil, `"\x41"`, "$", `invalid escape 'x'`),
		bad("short unicode escape", nil, `"\u12"`, "$", `invalid \u escape`),
		bad("non-hex unicode escape", nil, `"\u12G4"`, "$", `invalid \u escape`),
		bad("backslash at end", nil, `"\`, "$", "unterminated string"),
		ok("all escapes", nil, `"\" \\ \/ \b \f \n \r \t \u0000 \u00e9 \uFFFF"`),
		ok("whitespace everywhere", nil, " \t\n\r{ \"a\" : [ 1 , { } , [ ] ] } \n"),
		ok("scalars", nil, `[true,false,null,"",0,-0,1.5e-10,1E+2,0.0,-12.75e3]`),
		bad("leading zero", nil, `01`, "$", "leading zero"),
		bad("negative leading zero", nil, `[-01]`, "$[0]", "leading zero"),
		bad("plus sign", nil, `+1`, "$", "looking for beginning of value"),
		bad("NaN", nil, `NaN`, "$", "looking for beginning of value"),
		bad("Infinity", nil, `[-Infinity]`, "$[0]", "in numeric literal"),
		bad("bare minus", nil, `-`, "$", "unexpected end of JSON input"),
		bad("trailing dot", nil, `1.`, "$", "unexpected end of JSON input"),
		bad("dot without digits", nil, `[1.e5]`, "$[0]", "after decimal point"),
		bad("leading dot", nil, `.5`, "$", "looking for beginning of value"),
		bad("empty exponent", nil, `[1e]`, "$[0]", "in exponent"),
		bad("signed empty exponent", nil, `1.5e+`, "$", "unexpected end of JSON input"),
		bad("hex number", nil, `0x10`, "$", "after top-level value"),
	})
}

func TestUTF8AndSurrogates(t *testing.T) {
	runCases(t, []checkCase{
		bad("invalid byte", nil, "\"\xff\"", "$", "invalid UTF-8"),
		bad("invalid in key", nil, "{\"ok\":1,\"\xffk\":2}", "$", "invalid UTF-8"),
		bad("invalid in struct key", typeOf[Inner](), "{\"\xffid\":1}", "$", "invalid UTF-8"),
		bad("invalid in struct value", typeOf[Inner](), "{\"name\":\"a\xc3\"}", "$.name", "invalid UTF-8"),
		bad("truncated sequence", nil, "[\"\xe2\x82\"]", "$[0]", "invalid UTF-8"),
		bad("encoded surrogate", nil, "\"\xed\xa0\x80\"", "$", "invalid UTF-8"),
		bad("overlong", nil, "\"\xc0\xaf\"", "$", "invalid UTF-8"),
		bad("invalid inside time", typeOf[Kinds](), "{\"T\":\"2024\xff\"}", "$.T", "invalid UTF-8"),
		bad("invalid inside raw", typeOf[Kinds](), "{\"Raw\":[\"\x80\"]}", "$.Raw[0]", "invalid UTF-8"),
		ok("valid replacement char", nil, "\"\xef\xbf\xbd\""),
		ok("emoji raw", nil, "\"\xf0\x9f\x98\x80\""),
		ok("emoji escaped pair", nil, `"\ud83d\ude00"`),
		ok("line separators", nil, "[\"\u2028\u2029\", \"\\u2028\"]"),
		ok("non-ASCII key", typeOf[map[string]int](), `{"café":1,"日本":2}`),
		bad("lone high surrogate", nil, `"\ud800"`, "$", `lone surrogate \ud800`),
		bad("high then text", nil, `"\uD800x"`, "$", "lone surrogate"),
		bad("high then non-surrogate escape", nil, `"\ud800\u0041"`, "$", "lone surrogate"),
		bad("two highs", nil, `"\ud800\ud800"`, "$", "lone surrogate"),
		bad("lone low surrogate", nil, `"a\udc00"`, "$", `lone surrogate \udc00`),
		bad("low then high", nil, `"\udc00\ud800"`, "$", "lone surrogate"),
		bad("high at end", nil, `"\ud83d`, "$", "lone surrogate"),
		bad("surrogate in key", typeOf[map[string]int](), `{"\ud800":1}`, "$", "lone surrogate"),
		bad("surrogate in any", typeOf[Kinds](), `{"If":{"k":["\udfff"]}}`, `$.If["k"][0]`, "lone surrogate"),
	})
}

func TestDuplicateKeys(t *testing.T) {
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(extra)
		b.WriteString("}")
		return b.String()
	}
	runCases(t, []checkCase{
		bad("any", nil, `{"a":1,"a":2}`, "$", `duplicate key "a"`),
		bad("after unescaping", nil, `{"a":1,"\u0061":2}`, "$", `duplicate key "a"`),
		bad("both escaped", nil, `{"\u00e9":1,"\u00E9":2}`, "$", `duplicate key "é"`),
		bad("escaped and raw non-ASCII", nil, `{"é":1,"\u00e9":2}`, "$", `duplicate key "é"`),
		bad("escaped slash", nil, `{"a/b":1,"a\/b":2}`, "$", `duplicate key "a/b"`),
		bad("surrogate pair", nil, `{"😀":1,"\ud83d\ude00":2}`, "$", "duplicate key"),
		bad("nested in any", nil, `[{"x":{"a":1,"b":2,"a":3}}]`, `$[0]["x"]`, `duplicate key "a"`),
		ok("case differs", nil, `{"a":1,"A":2}`),
		ok("same key in siblings", nil, `[{"a":1},{"a":2}]`),
		ok("same key at two levels", nil, `{"a":{"a":{"a":1}}}`),
		bad("struct", typeOf[Inner](), `{"id":1,"id":2}`, "$", `duplicate key "id"`),
		bad("struct escaped", typeOf[Inner](), `{"id":1,"name":"x","\u0069d":2}`, "$", `duplicate key "id"`),
		bad("struct promoted", typeOf[Dom](), `{"Y":1,"W":2,"Y":3}`, "$", `duplicate key "Y"`),
		bad("wide struct", typeOf[Wide](), `{"F00":0,"F65":1,"F03":2,"F65":3}`, "$", `duplicate key "F65"`),
		ok("wide struct all", typeOf[Wide](), mustMarshal(t, Wide{F69: 1})),
		bad("map", typeOf[map[string]int](), `{"k":1,"j":2,"k":3}`, "$", `duplicate key "k"`),
		bad("map escaped", typeOf[map[string]int](), `{"k\n":1,"k\u000a":2}`, "$", `duplicate key "k\n"`),
		bad("map in raw message", typeOf[Kinds](), `{"Raw":{"a":1,"a":1}}`, "$.Raw", `duplicate key "a"`),
		bad("nested map", typeOf[map[string]map[string]int](), `{"x":{},"y":{"a":1,"a":2}}`, `$["y"]`, `duplicate key "a"`),
		ok("many distinct keys", nil, many(40, `"last":0`)),
		bad("many keys, early duplicate late", nil, many(40, `"k3":0`), "$", `duplicate key "k3"`),
		bad("many keys, late duplicate", nil, many(40, `"k39x":0,"k39x":1`), "$", `duplicate key "k39x"`),
		bad("many keys, escaped duplicate", typeOf[map[string]int](), many(20, `"\u006b17":0`), "$", `duplicate key "k17"`),
		bad("17th key duplicates", nil, many(16, `"k0":0`), "$", `duplicate key "k0"`),
		ok("inner objects beyond the small stack", nil,
			`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7},"p":16}`),
		bad("inner duplicate beyond the small stack", nil,
			`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"a":7},"p":16}`,
			`$["o"]`, `duplicate key "a"`),
		bad("outer duplicate after inner object", nil,
			`{"\u0061":{"\u0062":1,"c":{"d":2}},"x":1,"a":3}`, "$", `duplicate key "a"`),
	})
}

func TestStructFields(t *testing.T) {
	runCases(t, []checkCase{
		ok("inner", typeOf[Inner](), `{"id":1,"name":"x"}`),
		ok("empty object", typeOf[Inner](), `{}`),
		ok("missing fields", typeOf[Inner](), `{"name":"x"}`),
		bad("case variant", typeOf[Inner](), `{"ID":1}`, "$", `unknown field "ID" for strictjson_test.Inner (the field is "id"; names are case-sensitive)`),
		bad("type tag injection", typeOf[Inner](), `{"__type":"os/exec.Cmd","id":1}`, "$", `unknown field "__type"`),
		bad("Go name of renamed", typeOf[Tagged](), `{"Renamed":1}`, "$", `unknown field "Renamed"`),
		ok("tag name", typeOf[Tagged](), `{"renamed":1}`),
		bad("dash skips", typeOf[Tagged](), `{"Skipped":1}`, "$", `unknown field "Skipped"`),
		ok("dash comma names it dash", typeOf[Tagged](), `{"-":1}`),
		bad("Go name of dash comma", typeOf[Tagged](), `{"Dash":1}`, "$", `unknown field "Dash"`),
		ok("invalid tag falls back", typeOf[Tagged](), `{"BadTag":1}`),
		bad("invalid tag name itself", typeOf[Tagged](), `{"a\\b":1}`, "$", "unknown field"),
		ok("options only", typeOf[Tagged](), `{"Opts":1}`),
		ok("punctuation tag", typeOf[Tagged](), `{"x-y.z":1}`),
		bad("punctuation tag path", typeOf[Tagged](), `{"x-y.z":"1"}`, `$["x-y.z"]`, "found string"),
		ok("escaped field name", typeOf[Tagged](), `{"x\u002dy.z":1}`),
		bad("unexported", typeOf[Tagged](), `{"lower":1}`, "$", `unknown field "lower"`),
		ok("dominance winners", typeOf[Dom](), `{"Y":1,"W":2,"Z":"z","named":{"X":1,"Y":2,"Z":3},"MyInt":4,"S1":5}`),
		bad("ambiguous dropped", typeOf[Dom](), `{"X":1}`, "$", `unknown field "X"`),
		bad("shadowed type", typeOf[Dom](), `{"Z":1}`, "$.Z", "found number where json.Marshal writes a string"),
		bad("embedded struct name", typeOf[Dom](), `{"EmbA":{}}`, "$", `unknown field "EmbA"`),
		bad("embedded pointer name", typeOf[Dom](), `{"EmbB":null}`, "$", `unknown field "EmbB"`),
		bad("unexported embedded non-struct", typeOf[Dom](), `{"myInt":1}`, "$", `unknown field "myInt"`),
		bad("tagged embedded is nested path", typeOf[Dom](), `{"named":{"X":1,"Q":1}}`, "$.named", `unknown field "Q"`),
		ok("shallower wins", typeOf[Shallow](), `{"X":1,"Y":2,"Z":3,"W":4}`),
		bad("unknown nested path", typeOf[Doc](), `{"Item":{"id":1,"Id":2}}`, "$.Item", `unknown field "Id"`),
		bad("deep path", typeOf[Doc](), `{"Log":[{"id":1},{"id":"2"}]}`, "$.Log[1].id", "found string where json.Marshal writes a number for int"),
		bad("map path", typeOf[Doc](), `{"Tags":{"k":1}}`, `$.Tags["k"]`, "found number"),
		bad("map path quoting", typeOf[Doc](), `{"Tags":{"a\"b\n":1}}`, `$.Tags["a\"b\n"]`, "found number"),
		bad("promoted through pointer", typeOf[Doc](), `{"extra":"x","Level":1000,"level":1}`, "$", `unknown field "level"`),
	})
}

func TestQuoted(t *testing.T) {
	q := typeOf[Quoted]()
	runCases(t, []checkCase{
		ok("marshaled", q, mustMarshal(t, Quoted{Q: -5, QS: `a"<b>`, QB: true, QF: 1e21, QN: "12.5", QT: Stamp{"x"}})),
		ok("int", q, `{"q":"12"}`),
		bad("int unquoted", q, `{"q":12}`, "$.q", "found number where json.Marshal writes a string (the field has the ,string option)"),
		bad("int null", q, `{"q":null}`, "$.q", "found null"),
		bad("int holding null", q, `{"q":"null"}`, "$.q", `string "null" for int with the ,string option does not hold a JSON number`),
		bad("int holding junk", q, `{"q":"1x"}`, "$.q", "does not hold a JSON number"),
		bad("int holding space", q, `{"q":" 1"}`, "$.q", "does not hold a JSON number"),
		bad("int holding empty", q, `{"q":""}`, "$.q", "does not hold"),
		bad("int holding plus", q, `{"q":"+1"}`, "$.q", "does not hold"),
		ok("pointer null", q, `{"qp":null}`),
		ok("pointer value", q, `{"qp":"5","qu":"7"}`),
		bad("pointer holding null", q, `{"qp":"null"}`, "$.qp", "does not hold"),
		ok("string", q, `{"qs":"\"a\\\"b\""}`),
		bad("string not JSON inside", q, `{"qs":"a"}`, "$.qs", "does not hold a JSON string"),
		bad("string with trailing", q, `{"qs":"\"a\" "}`, "$.qs", "does not hold a JSON string"),
		bad("string surrogate inside", q, `{"qs":"\"\\ud800\""}`, "$.qs", "does not hold a JSON string"),
		ok("bool", q, `{"qb":"false"}`),
		bad("bool other", q, `{"qb":"yes"}`, "$.qb", "does not hold true or false"),
		bad("bool escaped spelling", q, `{"qb":"TRUE"}`, "$.qb", "does not hold true or false"),
		ok("bool via escapes", q, `{"qb":"\u0074rue"}`),
		ok("float", q, `{"qf":"1e+21"}`),
		bad("float infinity", q, `{"qf":"-Inf"}`, "$.qf", "does not hold a JSON number"),
		bad("float hex", q, `{"qf":"0x1p4"}`, "$.qf", "does not hold a JSON number"),
		ok("number", q, `{"qn":"12.5"}`),
		bad("number holding string", q, `{"qn":"\"12\""}`, "$.qn", "does not hold a JSON number"),
		ok("own marshaler ignores option", q, `{"qt":"stamp:x"}`),
		ok("non-quotable kind ignores option", q, `{"qa":["a"]}`),
	})
}

// TestFloats (issue 16): a float field holds only a number that reads
// back as itself: what json.Marshal writes for the float it decodes to
// has the same value. 9007199254740993 (which a float64 rounds to ...992),
// a 17-digit spelling that rounds, and an underflow to zero are refused,
// at any depth and in ,string fields; other spellings of the same value
// (1.0, 1e0) and integers are not checked.
func TestFloats(t *testing.T) {
	f64, f32 := typeOf[float64](), typeOf[float32]()
	k, q, d := typeOf[Kinds](), typeOf[Quoted](), typeOf[Doc]()
	runCases(t, []checkCase{
		ok("float64 integer", f64, `9007199254740992`),
		ok("float64 fraction", f64, `0.1`),
		ok("float64 other spelling", f64, `1.0`),
		ok("float64 exponent", f64, `100e-2`),
		ok("float64 shortest of a sum", f64, `0.30000000000000004`),
		ok("float64 largest", f64, `1.7976931348623157e308`),
		ok("float64 smallest", f64, `5e-324`),
		ok("float64 negative zero", f64, `-0`),
		ok("float64 out of range left to encoding/json", f64, `1e400`),
		bad("float64 2^53+1", f64, `9007199254740993`, "$", "number 9007199254740993 for float64 reads back as another value"),
		bad("float64 18 digits", f64, `123456789012345678`, "$", "reads back as another value"),
		bad("float64 17-digit spelling", f64, `0.10000000000000001`, "$", "reads back as another value"),
		bad("float64 underflow", f64, `1e-400`, "$", "reads back as another value"),
		bad("float64 below the smallest", f64, `4e-324`, "$", "reads back as another value"),
		ok("float32 short", f32, `0.1`),
		bad("float32 2^24+1", f32, `16777217`, "$", "number 16777217 for float32 reads back as another value"),
		bad("float32 a float64", f32, `0.30000000000000004`, "$", "for float32 reads back"),
		ok("int not checked", typeOf[int64](), `9007199254740993`),
		ok("json.Number not checked", typeOf[json.Number](), `9007199254740993`),
		ok("interface not checked", nil, `9007199254740993`),
		ok("raw message not checked", typeOf[json.RawMessage](), `9007199254740993`),
		bad("struct field", k, `{"F":9007199254740993}`, "$.F", "reads back as another value"),
		bad("pointer field", d, `{"Opt":16777217}`, "$.Opt", "for float32 reads back"),
		bad("slice element", typeOf[[]float64](), `[1,9007199254740993]`, "$[1]", "reads back as another value"),
		bad("map value", typeOf[map[string]float64](), `{"a":9007199254740993}`, `$["a"]`, "reads back as another value"),
		bad("string option", q, `{"qf":"9007199254740993"}`, "$.qf", "number 9007199254740993 for float64 reads back as another value"),
		bad("long text cut in the reason", f64, "1."+strings.Repeat("1", 100), "$", "…"),
	})
}

func TestNull(t *testing.T) {
	k := typeOf[Kinds]()
	cases := []checkCase{
		bad("top-level int", typeOf[int](), `null`, "$", "null for int, which json.Marshal never writes as null"),
		bad("slice element", typeOf[[]int](), `[1,null]`, "$[1]", "null for int"),
		bad("map value", typeOf[map[string]int](), `{"k":null}`, `$["k"]`, "null for int"),
		ok("top-level pointer", typeOf[*int](), `null`),
		ok("pointer to pointer", typeOf[**Inner](), `null`),
		ok("array of pointers", typeOf[[2]*int](), `[null,1]`),
		bad("pointer cycle type", typeOf[P](), `1`, "$", "pointer cycle"),
		ok("pointer cycle null", typeOf[P](), `null`),
	}
	for _, f := range []string{"B", "I", "U", "F", "S", "St", "Arr"} {
		cases = append(cases, bad("refused "+f, k, `{"`+f+`":null}`, "$."+f, "which json.Marshal never writes as null"))
	}
	for _, f := range []string{"P", "If", "Sl", "M", "T", "Raw", "Big", "BigP", "Txt", "Bytes", "Stamp"} {
		cases = append(cases, ok("allowed "+f, k, `{"`+f+`":null}`))
	}
	cases = append(cases, bad("number", k, `{"Num":null}`, "$.Num", "null for json.Number"))
	runCases(t, cases)
}

func TestCustomAndInterface(t *testing.T) {
	k := typeOf[Kinds]()
	runCases(t, []checkCase{
		ok("time", k, `{"T":"2024-01-02T03:04:05.123456789+01:00"}`),
		ok("time wrong kind left to Unmarshal", k, `{"T":5}`),
		ok("raw anything", k, `{"Raw":[1,{"a":{"b":[true,null]}},"x"]}`),
		ok("big int", k, `{"Big":123456789012345678901234567890,"BigP":-1}`),
		ok("text unmarshaler any shape", k, `{"Txt":{"weird":[1]}}`),
		ok("interface any shape", k, `{"If":{"a":[1,"b",{"c":null}]}}`),
		ok("interface scalar", k, `{"If":1.5e300}`),
		bad("interface bad number", k, `{"If":[1,01]}`, "$.If[1]", "leading zero"),
		bad("interface duplicate", k, `{"If":{"x":1,"x":1}}`, "$.If", "duplicate key"),
		ok("json.Number", k, `{"Num":-1.5e3}`),
		bad("json.Number as string", k, `{"Num":"1"}`, "$.Num", "found string where json.Marshal writes a number for json.Number"),
		ok("whole document through RawMessage", typeOf[json.RawMessage](), `{"a":[1,2,{"b":null}]}`),
		bad("RawMessage trailing", typeOf[json.RawMessage](), `{} {}`, "$", "after top-level value"),
	})
}

func TestShapes(t *testing.T) {
	runCases(t, []checkCase{
		bad("struct from array", typeOf[Inner](), `[]`, "$", "found array where json.Marshal writes an object for strictjson_test.Inner"),
		bad("struct from string", typeOf[Inner](), `"x"`, "$", "found string"),
		bad("slice from object", typeOf[[]int](), `{}`, "$", "found object where json.Marshal writes an array for []int"),
		bad("map from array", typeOf[map[string]int](), `[]`, "$", "found array where json.Marshal writes an object"),
		bad("bool from number", typeOf[bool](), `1`, "$", "found number where json.Marshal writes true or false"),
		bad("int from string", typeOf[int](), `"1"`, "$", "found string where json.Marshal writes a number"),
		bad("string from number", typeOf[string](), `1`, "$", "found number where json.Marshal writes a string"),
		bad("int from bool", typeOf[int](), `true`, "$", "found boolean"),
		bad("bad token where struct expected", typeOf[Inner](), `x`, "$", "looking for beginning of value"),
		ok("int with fraction is left to Unmarshal", typeOf[int](), `1.5`),
		ok("overflow is left to Unmarshal", typeOf[int8](), `300`),
		ok("bytes", typeOf[[]byte](), `"AQI="`),
		ok("bytes empty", typeOf[[]byte](), `""`),
		ok("bytes null", typeOf[[]byte](), `null`),
		ok("bytes two pads", typeOf[[]byte](), `"AQ=="`),
		bad("bytes as array", typeOf[[]byte](), `[1,2]`, "$", "found array where json.Marshal writes a base64 string for []uint8"),
		bad("bytes unpadded", typeOf[[]byte](), `"AQI"`, "$", "not padded standard base64"),
		bad("bytes url alphabet", typeOf[[]byte](), `"-_8="`, "$", "not padded standard base64"),
		bad("bytes escaped", typeOf[[]byte](), `"AQ\u003d="`, "$", "not padded standard base64"),
		bad("bytes escaped newline", typeOf[[]byte](), `"AQ\nI="`, "$", "not padded standard base64"),
		bad("bytes too much padding", typeOf[[]byte](), `"A==="`, "$", "not padded standard base64"),
		bad("bytes pad in middle", typeOf[[]byte](), `"AQ==AQ=="`, "$", "not padded standard base64"),
		ok("byte array is an array", typeOf[[2]byte](), `[1,2]`),
		bad("byte array from string", typeOf[[2]byte](), `"AQI="`, "$", "found string"),
		ok("array exact", typeOf[[2]int](), `[1,2]`),
		bad("array short", typeOf[[2]int](), `[1]`, "$", "1 elements for [2]int (json.Marshal writes exactly 2)"),
		bad("array long", typeOf[[2]int](), `[1,2,3]`, "$", "more than 2 elements for [2]int"),
		bad("array empty", typeOf[[2]int](), `[]`, "$", "0 elements"),
		ok("zero-length array", typeOf[[0]int](), `[]`),
		bad("zero-length array long", typeOf[[0]int](), `[1]`, "$", "more than 0 elements"),
		bad("chan", typeOf[Unsup](), `{"C":null}`, "$.C", "json.Marshal cannot encode type chan int"),
		ok("pointer to chan null", typeOf[Unsup](), `{"PC":null}`),
		bad("pointer to chan value", typeOf[Unsup](), `{"PC":1}`, "$.PC", "cannot encode type chan int"),
		bad("func", typeOf[Unsup](), `{"F":"x"}`, "$.F", "cannot encode type func()"),
		bad("complex", typeOf[Unsup](), `{"Cx":1}`, "$.Cx", "cannot encode type complex128"),
		bad("unsupported map key", typeOf[map[bool]int](), `{}`, "$", "cannot encode map key type bool"),
		bad("unsupported map key null", typeOf[map[bool]int](), `null`, "$", "cannot encode map key type bool"),
		ok("unsupported map value empty", typeOf[map[string]func()](), `{}`),
	})
}

func TestMapKeys(t *testing.T) {
	mi := typeOf[map[int]string]()
	mu := typeOf[map[uint8]string]()
	runCases(t, []checkCase{
		ok("ints", mi, `{"1":"a","-2":"b","0":"c","9223372036854775807":"d"}`),
		bad("leading zero", mi, `{"01":"a"}`, "$", `map key "01" is not an integer as json.Marshal writes it`),
		bad("plus", mi, `{"+1":"a"}`, "$", `map key "+1"`),
		bad("minus zero", mi, `{"-0":"a"}`, "$", `map key "-0"`),
		bad("exponent", mi, `{"1e3":"a"}`, "$", `map key "1e3"`),
		bad("word", mi, `{"a":"a"}`, "$", `map key "a"`),
		bad("empty", mi, `{"":"a"}`, "$", `map key ""`),
		bad("space", mi, `{" 1":"a"}`, "$", `map key " 1"`),
		bad("duplicate via escape", mi, `{"1":"a","\u0031":"b"}`, "$", `duplicate key "1"`),
		bad("unsigned negative", mu, `{"-1":"a"}`, "$", `map key "-1"`),
		ok("unsigned overflow left to Unmarshal", mu, `{"300":"a"}`),
		ok("text keys", typeOf[map[netip.Addr]int](), `{"1.2.3.4":1,"::1":2,"anything":3}`),
		bad("text keys duplicate", typeOf[map[netip.Addr]int](), `{"::1":1,"::1":2}`, "$", "duplicate key"),
		ok("string kind keys", typeOf[map[MyString]int](), `{"01":1,"+1":2}`),
	})
}

type MyString string

func TestDepth(t *testing.T) {
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	check := func(t *testing.T, typ reflect.Type, in string, wantErr bool) {
		t.Helper()
		err := strictjson.For(typ).Check([]byte(in))
		if (err != nil) != wantErr {
			t.Fatalf("Check(%.40q...) = %v, want error %v", in, err, wantErr)
		}
		if wantErr && !strings.Contains(err.Error(), "nesting deeper than 10000") {
			t.Fatalf("Check = %v, want depth error", err)
		}
	}
	t.Run("arrays at the limit", func(t *testing.T) { check(t, nil, nest(strictjson.MaxDepth, "[", "]"), false) })
	t.Run("arrays past the limit", func(t *testing.T) { check(t, nil, nest(strictjson.MaxDepth+1, "[", "]"), true) })
	t.Run("objects at the limit", func(t *testing.T) {
		check(t, nil, strings.Repeat(`{"a":`, strictjson.MaxDepth)+"1"+strings.Repeat("}", strictjson.MaxDepth), false)
	})
	t.Run("objects past the limit", func(t *testing.T) {
		check(t, nil, strings.Repeat(`{"a":`, strictjson.MaxDepth+1)+"1"+strings.Repeat("}", strictjson.MaxDepth+1), true)
	})
	t.Run("million unclosed", func(t *testing.T) { check(t, nil, strings.Repeat("[", 1_000_000), true) })
	t.Run("million through a slice type", func(t *testing.T) {
		check(t, typeOf[[][][][]any](), strings.Repeat("[", 1_000_000), true)
	})
	t.Run("recursive type", func(t *testing.T) {
		check(t, typeOf[Node](), strings.Repeat(`{"Next":`, strictjson.MaxDepth)+"null"+strings.Repeat("}", strictjson.MaxDepth), false)
		check(t, typeOf[Node](), strings.Repeat(`{"Kids":[`, 6000)+strings.Repeat("]}", 6000), true)
	})
	t.Run("path of a deep error", func(t *testing.T) {
		err := strictjson.For(typeOf[Node]()).Check([]byte(`{"Next":{"Kids":[{},{"Map":{"x":{"Val":null}}}]}}`))
		var e *strictjson.Error
		if !errors.As(err, &e) {
			t.Fatalf("Check = %v", err)
		}
		want := &strictjson.Error{Path: `$.Next.Kids[1].Map["x"].Val`, Reason: "null for int, which json.Marshal never writes as null"}
		if diff := cmp.Diff(want, e); diff != "" {
			t.Errorf("error mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestError(t *testing.T) {
	err := strictjson.For(nil).Check([]byte(`{"a":1,"a":2}`))
	if got, want := err.Error(), `strictjson: duplicate key "a" at $`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, strictjson.ErrInvalid) {
		t.Error("errors.Is(err, ErrInvalid) = false")
	}
	if errors.Is(err, errors.New("other")) {
		t.Error("errors.Is(err, other) = true")
	}
	wrapped := fmt.Errorf("state %q: %w", "x", err)
	var e *strictjson.Error
	if !errors.As(wrapped, &e) || !errors.Is(wrapped, strictjson.ErrInvalid) {
		t.Errorf("wrapped error lost its identity: %v", wrapped)
	}
	if diff := cmp.Diff(&strictjson.Error{Path: "$", Reason: `duplicate key "a"`}, e); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
	var nilSchema *strictjson.Schema
	if err := nilSchema.Check([]byte(`{"x":[1]}`)); err != nil {
		t.Errorf("nil Schema Check = %v, want nil", err)
	}
	if err := nilSchema.Check([]byte(`{"x":1,"x":1}`)); err == nil {
		t.Error("nil Schema accepted a duplicate key")
	}
}

// TestFieldSetMatchesMarshal compares, for structs with every embedding
// rule in play, the keys Check accepts with the keys json.Marshal writes.
func TestFieldSetMatchesMarshal(t *testing.T) {
	values := []any{
		Dom{EmbB: &EmbB{}, embS: &embS{}},
		Shallow{},
		Tagged{},
		Quoted{},
		Doc{Inner2: &Inner2{}},
		Kinds{},
		Wide{},
	}
	g := gen{r: rand.New(rand.NewPCG(1, 2)), full: true}
	for _, v := range values {
		typ := reflect.TypeOf(v)
		t.Run(typ.Name(), func(t *testing.T) {
			pv := reflect.New(typ)
			pv.Elem().Set(reflect.ValueOf(v))
			g.fill(pv.Elem(), 4)
			b, err := json.Marshal(pv.Elem().Interface())
			if err != nil {
				t.Fatal(err)
			}
			var written map[string]json.RawMessage
			if err := json.Unmarshal(b, &written); err != nil {
				t.Fatal(err)
			}
			s := strictjson.For(typ)
			for _, name := range candidateNames(typ, nil) {
				raw, isWritten := written[name]
				if !isWritten {
					raw = json.RawMessage("null")
				}
				doc := `{` + strconv.Quote(name) + `:` + string(raw) + `}`
				err := s.Check([]byte(doc))
				if isWritten && err != nil {
					t.Errorf("json.Marshal writes %s but Check(%s) = %v", name, doc, err)
				}
				if !isWritten && (err == nil || !strings.Contains(err.Error(), "unknown field")) {
					t.Errorf("json.Marshal never writes %q but Check(%s) = %v", name, doc, err)
				}
			}
		})
	}
}

// candidateNames lists every Go field name and tag name reachable through
// embedding, plus case variants, written or not.
func candidateNames(t reflect.Type, seen map[reflect.Type]bool) []string {
	if seen == nil {
		seen = map[reflect.Type]bool{}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	var names []string
	for i := range t.NumField() {
		sf := t.Field(i)
		names = append(names, sf.Name, strings.ToLower(sf.Name), strings.ToUpper(sf.Name))
		if tag, _, _ := strings.Cut(sf.Tag.Get("json"), ","); tag != "" {
			names = append(names, tag, strings.ToUpper(tag))
		}
		if sf.Anonymous {
			names = append(names, candidateNames(sf.Type, seen)...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// ---------------------------------------------------------------------------
// No false positives: whatever json.Marshal writes passes.

// gen fills values at random. With full set, every pointer, slice, map,
// interface, string, number and bool above the depth limit is non-zero, so
// json.Marshal writes every field, omitempty or not.
type gen struct {
	r    *rand.Rand
	full bool
}

var trickyStrings = []string{
	"", "plain", "<script>alert('x') & \"y\"</script>", "\u2028 line \u2029 para",
	"\x00\x01\x1f\x7f controls", "tab\tnl\nquote\"back\\slash/", "\uFFFD valid replacement",
	"😀 emoji 👩‍👩‍👧", "café", "e\u0301", "日本語", "\xff\xfe invalid bytes", "\xed\xa0\x80 surrogate bytes",
	"a\xc3", "\u00a0nbsp", "\ufeffBOM inside", "{\"not\":\"json\"}", "\\u0000",
}

func (g *gen) string() string {
	if g.full {
		return "x" + trickyStrings[g.r.IntN(len(trickyStrings))]
	}
	switch g.r.IntN(4) {
	case 0:
		return trickyStrings[g.r.IntN(len(trickyStrings))]
	case 1:
		b := make([]byte, g.r.IntN(12))
		for i := range b {
			b[i] = byte(g.r.IntN(256))
		}
		return string(b)
	default:
		var sb strings.Builder
		for range g.r.IntN(10) {
			switch g.r.IntN(4) {
			case 0:
				sb.WriteRune(rune(g.r.IntN(0x80)))
			case 1:
				sb.WriteRune(rune(g.r.IntN(0x800)))
			case 2:
				sb.WriteRune(rune(g.r.IntN(0x10FFFF)))
			default:
				const chars = "<>&\"\\ az"
				sb.WriteByte(chars[g.r.IntN(len(chars))])
			}
		}
		return sb.String()
	}
}

func (g *gen) float(bits int) float64 {
	var f float64
	if g.full {
		return 1.5
	}
	switch g.r.IntN(8) {
	case 0:
		f = 0
	case 1:
		f = math.Copysign(0, -1)
	case 2:
		f = math.MaxFloat64
	case 3:
		f = math.SmallestNonzeroFloat64
	default:
		f = (g.r.Float64()*2 - 1) * math.Pow(10, float64(g.r.IntN(80)-40))
	}
	if bits == 32 {
		f = float64(float32(max(min(f, math.MaxFloat32), -math.MaxFloat32)))
	}
	return f
}

func (g *gen) anyValue(depth int) any {
	n := 9
	if depth <= 0 {
		n = 6
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return g.float(64)
	case 3:
		return g.string()
	case 4:
		return g.r.Int64() - g.r.Int64()
	case 5:
		return json.Number(strconv.Itoa(g.r.IntN(1000)))
	case 6:
		s := make([]any, g.r.IntN(4))
		for i := range s {
			s[i] = g.anyValue(depth - 1)
		}
		return s
	case 7:
		m := map[string]any{}
		for range g.r.IntN(5) {
			m[validKey(g.string())] = g.anyValue(depth - 1)
		}
		return m
	default:
		m := map[int]string{}
		for range g.r.IntN(4) {
			m[g.r.IntN(200)-100] = g.string()
		}
		return m
	}
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	rawType    = reflect.TypeFor[json.RawMessage]()
	bigType    = reflect.TypeFor[big.Int]()
	addrType   = reflect.TypeFor[netip.Addr]()
	numberType = reflect.TypeFor[json.Number]()
	stampType  = reflect.TypeFor[Stamp]()
)

func (g *gen) fill(v reflect.Value, depth int) {
	switch v.Type() {
	case timeType:
		tm := time.Unix(g.r.Int64N(1e11)-5e10, g.r.Int64N(1e9))
		if g.r.IntN(2) == 0 {
			tm = tm.In(time.FixedZone("", (g.r.IntN(48)-24)*1800))
		}
		v.Set(reflect.ValueOf(tm))
		return
	case rawType:
		b, err := json.Marshal(g.anyValue(depth))
		if err != nil {
			panic(err)
		}
		v.SetBytes(b)
		return
	case bigType:
		v.Addr().Interface().(*big.Int).SetInt64(g.r.Int64() - g.r.Int64())
		return
	case addrType:
		a := netip.AddrFrom4([4]byte{byte(g.r.IntN(256)), byte(g.r.IntN(256)), 0, 1})
		if g.r.IntN(2) == 0 {
			a = netip.AddrFrom16(a.As16())
		}
		v.Set(reflect.ValueOf(a))
		return
	case numberType:
		v.SetString(strconv.FormatFloat(g.float(64), 'g', -1, 64))
		return
	case stampType:
		v.Set(reflect.ValueOf(Stamp{g.string()}))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(g.full || g.r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(g.r.Uint64()|1) >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(g.r.Uint64() >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(g.float(v.Type().Bits()))
	case reflect.String:
		v.SetString(g.string())
	case reflect.Pointer:
		if depth <= 0 || (!g.full && g.r.IntN(4) == 0) {
			return
		}
		p := reflect.New(v.Type().Elem())
		g.fill(p.Elem(), depth-1)
		v.Set(p)
	case reflect.Slice:
		if !g.full && g.r.IntN(5) == 0 {
			return
		}
		n := g.r.IntN(4)
		if g.full {
			n++
		}
		if depth <= 0 {
			n = 0
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			g.fill(s.Index(i), depth-1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			g.fill(v.Index(i), depth-1)
		}
	case reflect.Map:
		if !g.full && g.r.IntN(5) == 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		if depth > 0 {
			n := g.r.IntN(5)
			if g.full {
				n++
			}
			for range n {
				k := reflect.New(v.Type().Key()).Elem()
				g.fill(k, depth-1)
				if k.Kind() == reflect.String {
					k.SetString(validKey(k.String()))
				}
				e := reflect.New(v.Type().Elem()).Elem()
				g.fill(e, depth-1)
				m.SetMapIndex(k, e)
			}
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				g.fill(f, depth)
			}
		}
	case reflect.Interface:
		if v.NumMethod() == 0 {
			a := g.anyValue(depth)
			if a == nil && g.full {
				a = "x"
			}
			if a != nil {
				v.Set(reflect.ValueOf(a))
			}
		}
	}
}

// validKey makes a map key valid UTF-8. json.Marshal writes each invalid
// byte as U+FFFD, so the keys "\xff" and "\xfe" of one map both come out
// as "\ufffd": a document with a duplicate key, which cannot decode to the
// map it came from and which Check refuses (see TestLossyMapKeys).
func validKey(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func mustMarshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMarshalOutputPasses(t *testing.T) {
	types := []reflect.Type{
		typeOf[Doc](), typeOf[*Doc](), typeOf[Dom](), typeOf[Shallow](), typeOf[Tagged](),
		typeOf[Quoted](), typeOf[Kinds](), typeOf[Node](), typeOf[Wide](),
		typeOf[map[int]*Inner](), typeOf[map[uint16][]Inner](), typeOf[map[netip.Addr]Inner](),
		typeOf[[]any](), typeOf[map[string]any](), typeOf[[3]Inner](), typeOf[any](),
		typeOf[[]byte](), typeOf[[]*[]byte](), typeOf[map[MyString]*time.Time](), typeOf[benchDoc](),
	}
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			g := gen{r: rand.New(rand.NewPCG(uint64(len(typ.String())), 42))}
			s := strictjson.For(typ)
			for i := range iterations {
				v := reflect.New(typ).Elem()
				g.fill(v, 4)
				plain, err := json.Marshal(v.Interface())
				if err != nil {
					t.Fatalf("iteration %d: json.Marshal: %v", i, err)
				}
				indented, err := json.MarshalIndent(v.Interface(), "", "\t")
				if err != nil {
					t.Fatal(err)
				}
				var noHTML bytes.Buffer
				enc := json.NewEncoder(&noHTML)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(v.Interface()); err != nil {
					t.Fatal(err)
				}
				for _, doc := range [][]byte{plain, indented, noHTML.Bytes()} {
					if err := s.Check(doc); err != nil {
						t.Fatalf("iteration %d: Check(json.Marshal(v)) = %v\ndocument: %s", i, err, doc)
					}
				}
				// The pointer type's schema accepts the same document.
				if err := strictjson.For(reflect.PointerTo(typ)).Check(plain); err != nil {
					t.Fatalf("iteration %d: Check for *%s = %v", i, typ, err)
				}
			}
		})
	}
}

// TestLossyMapKeys pins down the one case where json.Marshal writes a
// duplicate key: distinct invalid UTF-8 map keys that both become U+FFFD.
// Unmarshal would silently keep one entry, so Check refuses the document.
func TestLossyMapKeys(t *testing.T) {
	doc := mustMarshal(t, map[string]int{"\xff": 1, "\xfe": 2})
	if want := `{"\ufffd":1,"\ufffd":2}`; doc != want && doc != `{"\ufffd":2,"\ufffd":1}` {
		t.Fatalf("json.Marshal = %s, want %s", doc, want)
	}
	err := strictjson.For(typeOf[map[string]int]()).Check([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "duplicate key \"\uFFFD\"") {
		t.Fatalf("Check(%s) = %v, want duplicate key", doc, err)
	}
}

func TestRecursiveType(t *testing.T) {
	type T struct {
		Name string
		Next *T
		Kids []T
		ByID map[int]*T
	}
	s := strictjson.For(typeOf[T]())
	v := T{Name: "root", Next: &T{Name: "n", Next: &T{}}, Kids: []T{{Name: "k", Kids: []T{{}}}}, ByID: map[int]*T{-1: {Name: "m"}, 2: nil}}
	if err := s.Check([]byte(mustMarshal(t, v))); err != nil {
		t.Fatalf("Check(Marshal) = %v", err)
	}
	err := s.Check([]byte(`{"Next":{"Kids":[{"ByID":{"1":{"Name":"x","name":"y"}}}]}}`))
	var e *strictjson.Error
	if !errors.As(err, &e) || e.Path != `$.Next.Kids[0].ByID["1"]` {
		t.Fatalf("Check = %v, want unknown field at $.Next.Kids[0].ByID[\"1\"]", err)
	}
}

func TestConcurrentCheck(t *testing.T) {
	s := strictjson.For(typeOf[Doc]())
	docs := [][]byte{[]byte(benchJSON), []byte(`{"Item":{"id":1,"id":2}}`), []byte(`{"Tags":{"a":"b"},"Any":[{"x":1}]}`), []byte(`[`)}
	want := make([]error, len(docs))
	for i, d := range docs {
		want[i] = s.Check(d)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				d := (g + i) % len(docs)
				got := s.Check(docs[d])
				if fmt.Sprint(got) != fmt.Sprint(want[d]) {
					select {
					case errs <- fmt.Sprintf("doc %d: got %v want %v", d, got, want[d]):
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNoAllocations(t *testing.T) {
	docs := map[string]struct {
		s   *strictjson.Schema
		doc []byte
	}{
		"bench document":   {strictjson.For(typeOf[benchDoc]()), []byte(benchJSON)},
		"map and any":      {strictjson.For(typeOf[map[string]any]()), []byte(`{"a":[1,{"b":true,"c":null}],"d":"e","f":{"g":{"h":1.5}}}`)},
		"non-ASCII values": {strictjson.For(typeOf[[]string]()), []byte(`["café","日本語","😀","\ud83d\ude00"]`)},
	}
	for name, d := range docs {
		if err := d.s.Check(d.doc); err != nil {
			t.Fatalf("%s: Check = %v", name, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = d.s.Check(d.doc) }); n != 0 {
			t.Errorf("%s: Check allocates %v times per run, want 0", name, n)
		}
	}
}

// ---------------------------------------------------------------------------
// Example and benchmarks.

func Example() {
	type State struct {
		ID    int      `json:"id"`
		Tags  []string `json:"tags,omitempty"`
		Extra any      `json:"extra,omitempty"`
	}
	schema := strictjson.For(reflect.TypeFor[State]())

	for _, doc := range []string{
		`{"id":1,"tags":["a"],"extra":{"k":[1,2]}}`,
		`{"id":1,"ID":2}`,
		`{"id":null}`,
		`{"id":1,"extra":{"k":1,"k":2}}`,
		`{"id":1,"__type":"os/exec.Cmd"}`,
	} {
		err := schema.Check([]byte(doc))
		fmt.Println(err, errors.Is(err, strictjson.ErrInvalid))
	}
	// Output:
	// <nil> false
	// strictjson: unknown field "ID" for strictjson_test.State (the field is "id"; names are case-sensitive) at $ true
	// strictjson: null for int, which json.Marshal never writes as null at $.id true
	// strictjson: duplicate key "k" at $.extra true
	// strictjson: unknown field "__type" for strictjson_test.State at $ true
}

type benchItem struct {
	ID    int64   `json:"id"`
	Name  string  `json:"name"`
	Score float64 `json:"score"`
	Done  bool    `json:"done"`
}

type benchDoc struct {
	Run      string            `json:"run"`
	Step     int               `json:"step"`
	Node     string            `json:"node"`
	Items    []benchItem       `json:"items"`
	Labels   map[string]string `json:"labels"`
	Parent   *benchItem        `json:"parent,omitempty"`
	Notes    []string          `json:"notes"`
	Attempts [3]int            `json:"attempts"`
	Updated  time.Time         `json:"updated"`
}

var benchJSON = func() string {
	d := benchDoc{
		Run:  "run-7f3a9c2e-5b1d-4e8f-a6c0-1d2e3f4a5b6c",
		Step: 42,
		Node: "summarize_results",
		Labels: map[string]string{
			"tenant": "acme", "region": "eu-west-1", "priority": "high", "owner": "data-platform",
		},
		Parent:   &benchItem{ID: 7, Name: "parent task", Score: 0.5, Done: true},
		Notes:    []string{"retrieved 12 documents", "ranked by relevance", "summary draft accepted by reviewer"},
		Attempts: [3]int{1, 0, 2},
		Updated:  time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC),
	}
	for i := range 8 {
		d.Items = append(d.Items, benchItem{ID: int64(1000 + i), Name: fmt.Sprintf("search result number %d", i), Score: float64(i) * 1.25, Done: i%2 == 0})
	}
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func BenchmarkCheck(b *testing.B) {
	s := strictjson.For(reflect.TypeFor[benchDoc]())
	data := []byte(benchJSON)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Check(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	data := []byte(benchJSON)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var d benchDoc
		if err := json.Unmarshal(data, &d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		strictjson.For(reflect.TypeFor[Doc]())
	}
}

// TestLongPathMessage: the message of a depth error stays short; the full
// path stays in Path.
func TestLongPathMessage(t *testing.T) {
	deep := strings.Repeat("[", strictjson.MaxDepth+1) + strings.Repeat("]", strictjson.MaxDepth+1)
	err := strictjson.For(reflect.TypeFor[any]()).Check([]byte(deep))
	var se *strictjson.Error
	if !errors.As(err, &se) {
		t.Fatalf("Check = %v, want an *Error", err)
	}
	if len(se.Error()) > 300 || len(se.Path) < strictjson.MaxDepth {
		t.Errorf("message of %d bytes, path of %d bytes; want a short message and the whole path", len(se.Error()), len(se.Path))
	}
}

type textKey struct{ s string }

func (k textKey) MarshalText() ([]byte, error) { return []byte(k.s), nil }

// TestOpaque: a type is opaque when json.Marshal hands some of its JSON to
// code other than its own rules.
func TestOpaque(t *testing.T) {
	type plain struct {
		N    int
		Tags map[string][]string
		Ptr  *struct{ B []byte }
		Arr  [2]float64
	}
	type withRaw struct{ R json.RawMessage }
	type withAny struct{ V []any }
	type withTime struct{ At *time.Time }
	type withTextKeys struct{ M map[textKey]int }
	for _, tc := range []struct {
		name string
		t    reflect.Type
		want bool
	}{
		{"plain struct", reflect.TypeFor[plain](), false},
		{"int", reflect.TypeFor[int](), false},
		{"json.RawMessage field", reflect.TypeFor[withRaw](), true},
		{"interface inside a slice", reflect.TypeFor[withAny](), true},
		{"time.Time behind a pointer", reflect.TypeFor[withTime](), true},
		{"text-marshaler map keys", reflect.TypeFor[withTextKeys](), true},
		{"channel", reflect.TypeFor[chan int](), true},
		{"nil type", nil, true},
	} {
		if got := strictjson.For(tc.t).Opaque(); got != tc.want {
			t.Errorf("%s: Opaque() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
