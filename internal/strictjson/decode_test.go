package strictjson_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// DecDoc has a field of every kind Decode decodes itself: every integer
// and float size, named strings and numbers, json.Number, []byte, Go
// arrays, pointers, slices, maps with string, integer and unsigned keys,
// recursion, tags, a skipped field and an embedded struct (by value,
// unexported, with a shadowed field).
type DecDoc struct {
	I8     int8
	I16    int16
	I32    int32
	I64    int64 `json:"i64"`
	I      int
	U8     uint8
	U16    uint16
	U32    uint32
	U64    uint64
	U      uint
	F32    float32
	F64    float64
	B      bool
	S      string `json:"s,omitempty"`
	Named  decName
	Num    json.Number
	Blob   []byte
	Arr    [3]int16
	Bytes  [2]byte
	P      *string
	PP     **int
	Sl     []DecItem
	SP     []*DecItem
	Nested [][]string
	MS     map[string]DecItem
	MI     map[int8]string
	MU     map[uint32]*DecItem
	MN     map[decName][]int
	Next   *DecDoc
	Skip   int `json:"-"`
	decEmbed
	Shadow string
}

type decName string

type DecItem struct {
	K string `json:"k"`
	V *int   `json:"v"`
	F []float64
}

type decEmbed struct {
	E1     string
	Shadow int
}

// decodeBoth decodes data with json.Unmarshal and with Decode into fresh
// values of typ. It fails the test when Decode reports success and the
// two differ, or Unmarshal failed; it returns whether Decode decoded it.
func decodeBoth(t *testing.T, s *strictjson.Schema, typ reflect.Type, data []byte) bool {
	t.Helper()
	want := reflect.New(typ)
	uerr := json.Unmarshal(data, want.Interface())
	got := reflect.New(typ)
	if !s.Decode(data, got.Elem()) {
		return false
	}
	if uerr != nil {
		t.Fatalf("Decode accepted what json.Unmarshal refuses (%v): %s", uerr, data)
	}
	if diff := cmp.Diff(want.Interface(), got.Interface(), cmp.AllowUnexported(DecDoc{})); diff != "" {
		t.Fatalf("Decode differs from json.Unmarshal (-Unmarshal +Decode):\n%s\ndocument: %s", diff, data)
	}
	return true
}

// What json.Marshal writes (and documents written by hand: whitespace,
// escapes, null, empty containers) Decode decodes itself, to exactly what
// json.Unmarshal decodes.
func TestDecodeMatchesUnmarshal(t *testing.T) {
	typ := reflect.TypeFor[DecDoc]()
	s := strictjson.For(typ)
	if !s.Decodable() {
		t.Fatal("DecDoc is not decodable")
	}
	for name, doc := range map[string]string{
		"empty":       `{}`,
		"whitespace":  " {\n\t\"I8\" : -8 ,\r\n \"Sl\" : [ { \"k\" : \"a\" , \"v\" : 1 } , { } ] , \"MS\" : { } } \n",
		"nulls":       `{"P":null,"PP":null,"Sl":null,"MS":null,"Next":null,"Blob":null,"Nested":[null,[]]}`,
		"empty lists": `{"Sl":[],"SP":[null],"Blob":"","Nested":[],"MI":{},"Arr":[1,2,3]}`,
		"escapes":     `{"s":"a\"b\\c\/d\b\f\n\r\t\u0000\u00e9\u2028\ud83d\ude00","MS":{"k\u00e9\"":{"k":"\u0041"}}}`,
		"numbers":     `{"I8":-128,"I16":32767,"I32":-2147483648,"i64":9223372036854775807,"U8":255,"U64":18446744073709551615,"F32":3.4028235e+38,"F64":-5e-324,"Num":-1.5e+300}`,
		"int keys":    `{"MI":{"-128":"a","127":"b","0":"c"},"MU":{"4294967295":{"F":[1,2.5]}},"MN":{"x":[1]}}`,
		"deep":        `{"Next":{"Next":{"Next":{"I":1,"E1":"e","Shadow":"outer"}}},"PP":7,"P":"p","Bytes":[255,0]}`,
		"base64":      `{"Blob":"AAEC+v8="}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := s.Check([]byte(doc)); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !decodeBoth(t, s, typ, []byte(doc)) {
				t.Errorf("Decode fell back on %s", doc)
			}
		})
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g := gen{r: rand.New(rand.NewPCG(seed, 22))}
	for i := range 300 {
		v := reflect.New(typ).Elem()
		g.fill(v, 3)
		data, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(data); err != nil {
			t.Fatalf("value %d (seed %d): Check(json.Marshal) = %v", i, seed, err)
		}
		if !decodeBoth(t, s, typ, data) {
			t.Fatalf("value %d (seed %d): Decode fell back on json.Marshal's output %s", i, seed, data)
		}
	}
}

// Decode leaves to json.Unmarshal what only it may decode (types with
// their own methods, interfaces, ,string, embedded pointers, map keys
// with UnmarshalText) and the values Unmarshal refuses although Check
// accepts them (a number out of range, a fraction for an integer).
func TestDecodeFallsBack(t *testing.T) {
	type quoted struct {
		N int `json:",string"`
	}
	type ptrEmbed struct {
		*DecItem
	}
	for name, typ := range map[string]reflect.Type{
		"interface":         reflect.TypeFor[struct{ A any }](),
		"raw message":       reflect.TypeFor[[]json.RawMessage](),
		"time":              reflect.TypeFor[struct{ T time.Time }](),
		"string option":     reflect.TypeFor[quoted](),
		"embedded pointer":  reflect.TypeFor[ptrEmbed](),
		"text key":          reflect.TypeFor[map[netip.Addr]int](),
		"unsupported field": reflect.TypeFor[struct{ C chan int }](),
	} {
		if strictjson.For(typ).Decodable() {
			t.Errorf("%s: %s is decodable", name, typ)
		}
		if strictjson.For(typ).Decode([]byte(`{}`), reflect.New(typ).Elem()) {
			t.Errorf("%s: Decode decoded {} into %s", name, typ)
		}
	}
	typ := reflect.TypeFor[DecDoc]()
	s := strictjson.For(typ)
	for _, doc := range []string{`{"U8":256}`, `{"I8":-129}`, `{"I":1.5}`, `{"I":1e2}`, `{"F32":1e39}`, `{"MI":{"200":"x"}}`} {
		if s.Check([]byte(doc)) != nil {
			continue // Check refuses it already
		}
		if decodeBoth(t, s, typ, []byte(doc)) {
			t.Errorf("Decode decoded %s, which json.Unmarshal refuses", doc)
		}
	}
	if s.Decode([]byte(`{}`), reflect.New(reflect.TypeFor[DecItem]()).Elem()) {
		t.Error("Decode decoded into a value of another type")
	}
	if s.Decode([]byte(`{}`), reflect.ValueOf(DecDoc{})) {
		t.Error("Decode decoded into a value it cannot set")
	}
}

// FuzzDecode: whatever Check accepts for DecDoc, Decode decodes to what
// json.Unmarshal does, or leaves to it; it never panics.
func FuzzDecode(f *testing.F) {
	for _, doc := range []string{`{}`, `{"Sl":[{"k":"a","v":1,"F":[1.5]}],"MI":{"-1":"x"}}`, `{"s":"\ud83d\ude00\n","Blob":"AAE=","Next":{"PP":3}}`, `{"U8":300}`} {
		f.Add([]byte(doc))
	}
	typ := reflect.TypeFor[DecDoc]()
	s := strictjson.For(typ)
	f.Fuzz(func(t *testing.T, data []byte) {
		if s.Check(data) != nil {
			s.Decode(data, reflect.New(typ).Elem()) // must not panic
			return
		}
		decodeBoth(t, s, typ, data)
	})
}
