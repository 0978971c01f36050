package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// FuzzDoc is the fixed type FuzzCheck checks documents against. It has a
// field for every kind of rule: tags, ,string, embedding (by value and by
// exported pointer; Shadow is ambiguous and so dropped), recursion, maps
// with string and integer keys, a Go array, []byte, an interface and a
// json.RawMessage.
type FuzzDoc struct {
	ID     int64             `json:"id"`
	Name   string            `json:"name,omitempty"`
	Tags   map[string]string `json:"tags"`
	Counts map[int]uint8
	Items  []FuzzItem
	Next   *FuzzDoc
	Pair   [2]bool
	Blob   []byte
	Any    any
	Raw    json.RawMessage
	Num    json.Number
	F      float32
	Q      int      `json:"q,string"`
	QS     string   `json:"qs,string"`
	QP     *float64 `json:",string"`
	Skip   int      `json:"-"`
	FuzzEmbed
	*FuzzPtrEmbed
}

type FuzzItem struct {
	K string `json:"k"`
	V *int   `json:"v"`
}

type FuzzEmbed struct {
	E1     string
	Shadow int
}

type FuzzPtrEmbed struct {
	P1     uint16
	Shadow int
}

func fuzzSeedDoc() FuzzDoc {
	v, x := 7, 2.5
	return FuzzDoc{
		ID: -3, Name: "n<&>\u2028", Tags: map[string]string{"a": "b", "é": "\x00"},
		Counts: map[int]uint8{-1: 2, 10: 255}, Items: []FuzzItem{{K: "k", V: &v}, {}},
		Next: &FuzzDoc{ID: 1}, Pair: [2]bool{true, false}, Blob: []byte{0, 1, 2, 250},
		Any: map[string]any{"x": []any{1.5, "s", nil, true}}, Raw: json.RawMessage(`{"r":[1,2]}`),
		Num: "1e3", F: 1.25, Q: 42, QS: `q"s`, QP: &x,
		FuzzEmbed: FuzzEmbed{E1: "e"}, FuzzPtrEmbed: &FuzzPtrEmbed{P1: 9},
	}
}

// FuzzCheck feeds arbitrary bytes to Check for FuzzDoc. Check must not
// panic and must fail only with an *Error. When it accepts a document:
//   - encoding/json agrees the document is valid JSON;
//   - json.Unmarshal into FuzzDoc succeeds or fails only with a
//     *json.UnmarshalTypeError, the errors Check leaves to encoding/json: a
//     number out of range for its Go type (300 for a uint8, 1e40 for a
//     float32) or with a fraction or exponent for an integer (1.5, 1e2),
//     also inside a ,string field ("1.5" for the int q);
//   - json.Marshal of the decoded value passes Check too.
func FuzzCheck(f *testing.F) {
	seed, err := json.Marshal(fuzzSeedDoc())
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(seed),
		`{}`, `null`, ` {"id": 1} `, `{"id":1,"id":2}`, `{"ID":1}`, `{"__type":"os/exec.Cmd"}`,
		`{"Any":{"a":[1,"\ud800"]}}`, `{"Any":{"a":1,"\u0061":2}}`, `{"q":"12","qs":"\"x\"","QP":null}`,
		`{"q":"null"}`, `{"Counts":{"01":1}}`, `{"Counts":{"1":300}}`, `{"Pair":[true]}`, `{"Blob":[1]}`,
		`{"Blob":"AQI="}`, `{"Raw":{"x":{"y":[]}}}`, `{"Next":{"Next":{"Items":[{"k":"v","v":null}]}}}`,
		`{"F":1e40}`, `{"Num":-0.5E-3}`, `{"E1":"a","P1":1,"Shadow":2}`, "\xef\xbb\xbf{}", `[`,
		strings.Repeat(`{"Next":`, 50) + "null" + strings.Repeat("}", 50),
		"{\"name\":\"\xff\"}", `{"tags":{"k":"v"}} x`,
		`{"F":16777217}`, `{"F":1e-50}`, `{"QP":"9007199254740993"}`, `{"Any":9007199254740993}`, `{"F":0.1,"QP":"1.0"}`,
	} {
		f.Add([]byte(s))
	}
	s := strictjson.For(reflect.TypeFor[FuzzDoc]())
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		err := s.Check(data)
		if !bytes.Equal(orig, data) {
			t.Fatalf("Check modified its input %q to %q", orig, data)
		}
		if err != nil {
			var e *strictjson.Error
			if !errors.As(err, &e) || !errors.Is(err, strictjson.ErrInvalid) || e.Path == "" || e.Path[0] != '$' || e.Reason == "" {
				t.Fatalf("Check(%q) = %#v, want a well-formed *Error", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Check accepted %q, which json.Valid refuses", data)
		}
		var v FuzzDoc
		if err := json.Unmarshal(data, &v); err != nil {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				t.Fatalf("Check accepted %q but json.Unmarshal = %v (%T), not a type error", data, err, err)
			}
		}
		out, err := json.Marshal(&v)
		if err != nil {
			t.Fatalf("json.Marshal of the value decoded from %q: %v", data, err)
		}
		if err := s.Check(out); err != nil {
			t.Fatalf("Check(json.Marshal(json.Unmarshal(%q))) = %v\nre-encoded: %s", data, err, out)
		}
	})
}

// FuzzMarshalPasses builds values from fuzzed strings, numbers and bytes
// (and, from seed, random values of several types) and requires that
// whatever json.Marshal writes for them passes Check.
func FuzzMarshalPasses(f *testing.F) {
	f.Add("plain", int64(1), 1.5, []byte("b"), uint64(1))
	f.Add("<&>\u2028\u2029\x00\x1f\"\\", int64(-1<<63), math.Copysign(0, -1), []byte{}, uint64(2))
	f.Add("\xff\xfe\xed\xa0\x80", int64(1<<53+1), math.MaxFloat64, []byte{0xff}, uint64(3))
	f.Add("😀\uFFFDe\u0301", int64(0), 5e-324, []byte(nil), uint64(4))
	docSchema := strictjson.For(reflect.TypeFor[FuzzDoc]())
	types := []reflect.Type{
		reflect.TypeFor[FuzzDoc](), reflect.TypeFor[Doc](), reflect.TypeFor[Kinds](),
		reflect.TypeFor[map[int]any](), reflect.TypeFor[[]*Node](),
	}
	schemas := make([]*strictjson.Schema, len(types))
	for i, typ := range types {
		schemas[i] = strictjson.For(typ)
	}
	f.Fuzz(func(t *testing.T, s string, n int64, x float64, b []byte, seed uint64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			x = 0 // json.Marshal refuses these
		}
		v := int(n)
		f32 := float32(max(min(x, math.MaxFloat32), -math.MaxFloat32))
		d := FuzzDoc{
			ID: n, Name: s, Tags: map[string]string{validKey(s): s, "k": s},
			Counts: map[int]uint8{int(n): uint8(n), -int(n % 1000): 1}, Items: []FuzzItem{{K: s, V: &v}},
			Next: &FuzzDoc{Name: s, Blob: b}, Pair: [2]bool{n%2 == 0, true}, Blob: b,
			Any: map[string]any{validKey(s): []any{s, x, n, map[string]any{"b": b}}},
			Raw: json.RawMessage(mustMarshal(t, s)),
			Num: json.Number(strconv.FormatFloat(x, 'g', -1, 64)),
			F:   f32,
			Q:   int(n), QS: s, QP: &x,
			FuzzEmbed: FuzzEmbed{E1: s, Shadow: 1}, FuzzPtrEmbed: &FuzzPtrEmbed{P1: uint16(n), Shadow: 2},
		}
		for _, doc := range []any{d, &d, []FuzzDoc{d, {}}} {
			out, err := json.Marshal(doc)
			if err != nil {
				t.Fatalf("json.Marshal: %v", err)
			}
			sch := docSchema
			if _, ok := doc.([]FuzzDoc); ok {
				sch = strictjson.For(reflect.TypeFor[[]FuzzDoc]())
			}
			if err := sch.Check(out); err != nil {
				t.Fatalf("Check(json.Marshal(%T)) = %v\ndocument: %s", doc, err, out)
			}
		}
		for _, one := range []any{s, n, x, b, f32} {
			out, err := json.Marshal(one)
			if err != nil {
				t.Fatal(err)
			}
			if err := strictjson.For(reflect.TypeOf(one)).Check(out); err != nil {
				t.Fatalf("Check(json.Marshal(%#v)) = %v\ndocument: %s", one, err, out)
			}
		}
		g := gen{r: rand.New(rand.NewPCG(seed, uint64(n)))}
		for i, typ := range types {
			rv := reflect.New(typ).Elem()
			g.fill(rv, 3)
			out, err := json.Marshal(rv.Interface())
			if err != nil {
				t.Fatalf("json.Marshal(%s): %v", typ, err)
			}
			if err := schemas[i].Check(out); err != nil {
				t.Fatalf("Check(json.Marshal(%s)) = %v\ndocument: %s", typ, err, out)
			}
		}
	})
}
