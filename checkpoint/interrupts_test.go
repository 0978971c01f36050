package checkpoint

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// interruptSeeds are interrupt writes: Marshal's form, near misses that go
// to json.Unmarshal, and what json.Marshal never writes for the list
// (refused).
var interruptSeeds = []string{
	`[]`,
	`null`,
	`[{"id":"4d90be861d2945505973673a3c02db84","value":"k1"}]`,
	`[{"id":"a","value":{"q":"approve?","n":[1,2,{"x":"}]\""}]}},{"id":"b","value":null}]`,
	`[{"id":"a","value":1},{"id":"b","value":true},{"id":"c","value":-1.5e3}]`,
	`[{"id":"a","value":"\u003cb\u003e \"quoted\" \\ ]},"}]`,
	`[{"id":"a\u0062","value":1}]`,
	`[{"id":"a","value":1,"id":"b"}]`,
	`[{"value":1,"id":"a"}]`,
	`[ {"id":"a","value":1} ]`,
	`[{"id":"a","value":{"x": 1 }}]`,
	`[{"id":"a","value":1}`,
	`[{"id":"a","value":01}]`,
	`[{"id":"a","value":}]`,
	`[{"id":"a","value":"unterminated}]`,
	`[{"id":"a","value":1}],`,
	`[{"id":"é","value":1}]`,
	`[{"id":"a","value":[1,2}]`,
	`[{"ID":"a","value":1}]`,
	`[{"id":"a","ID":"b","value":1}]`,
	`[{"id":"a","value":1},{"id":"a","value":2}]`,
	`[{"id":"","value":1}]`,
	`[{"id":"a"}]`,
	`[{"id":"a","value":"\ud800"}]`,
	"[{\"id\":\"a\xff\",\"value\":1}]",
	`[{"id":"a","value":{"k":1,"k":2}}]`,
	`[null]`,
	`{"id":"a","value":1}`,
}

// TestDecodeInterrupts: Marshal's form is read directly and gives what
// json.Unmarshal gives; what Marshal never writes for the list (null,
// duplicate, unknown or case-variant keys, invalid UTF-8, a lone
// surrogate, a missing value, an empty or repeated ID) is refused.
func TestDecodeInterrupts(t *testing.T) {
	direct := map[string]bool{
		interruptSeeds[0]: true, interruptSeeds[2]: true, interruptSeeds[3]: true,
		interruptSeeds[4]: true, interruptSeeds[5]: true,
		interruptSeeds[10]: true, // spaces inside a value are the value's
		// read directly, then refused for their IDs
		`[{"id":"a","value":1},{"id":"a","value":2}]`: true, `[{"id":"","value":1}]`: true,
	}
	refused := map[string]bool{}
	for _, s := range interruptSeeds[18:] {
		refused[s] = true
	}
	refused[`null`] = true
	refused[`[{"id":"a","value":1,"id":"b"}]`] = true
	for _, in := range interruptSeeds {
		// The direct reader reads only what the strict check passed.
		if interruptsJSON.Check([]byte(in)) == nil {
			_, ok := readInterrupts([]byte(in))
			if ok != direct[in] {
				t.Errorf("%s: read directly %v, want %v", in, ok, direct[in])
			}
		}
		_, err := DecodeInterrupts([]byte(in))
		if refused[in] && err == nil {
			t.Errorf("%q: decoded, want refused", in)
		}
		checkDecodeInterrupts(t, []byte(in))
	}
	// What the runtime writes is always read directly.
	b, err := json.Marshal([]Interrupt{{ID: "x1", Value: json.RawMessage(`{"a":[1,"<&>"]}`)}, {ID: "x2", Value: json.RawMessage(`"s"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := readInterrupts(b); !ok {
		t.Errorf("%s, as json.Marshal wrote it, was not read directly", b)
	}
	checkDecodeInterrupts(t, b)
}

// checkDecodeInterrupts compares DecodeInterrupts with json.Unmarshal:
// what it accepts, Unmarshal reads the same.
func checkDecodeInterrupts(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeInterrupts(b)
	if err != nil {
		return
	}
	var want []Interrupt
	if werr := json.Unmarshal(b, &want); werr != nil {
		t.Fatalf("%q: decoded, but json.Unmarshal fails: %v", b, werr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%q: decoded (-json.Unmarshal +ours):\n%s", b, diff)
	}
	if got == nil {
		t.Fatalf("%q: decoded to a nil list", b)
	}
	seen := map[string]bool{}
	for _, in := range got {
		if in.ID == "" || seen[in.ID] || in.Value == nil {
			t.Fatalf("%q: decoded %+v", b, got)
		}
		seen[in.ID] = true
	}
}

// FuzzDecodeInterrupts: whatever an interrupt write holds, decoding never
// panics, and what it accepts is what json.Unmarshal reads, with distinct
// non-empty IDs and a value each.
func FuzzDecodeInterrupts(f *testing.F) {
	for _, s := range interruptSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeInterrupts(t, b)
	})
}
