package graph

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/interrupt"
)

// interruptSeeds are interrupt writes: Marshal's form, and near misses,
// most of which must go to json.Unmarshal.
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
}

// TestDecodeInterrupts: Marshal's form is read directly and gives what
// json.Unmarshal gives; the other seeds go to Unmarshal.
func TestDecodeInterrupts(t *testing.T) {
	direct := map[string]bool{
		interruptSeeds[0]: true, interruptSeeds[2]: true, interruptSeeds[3]: true,
		interruptSeeds[4]: true, interruptSeeds[5]: true,
		interruptSeeds[10]: true, // spaces inside a value are the value's
	}
	for _, in := range interruptSeeds {
		_, ok := readInterrupts([]byte(in))
		if ok != direct[in] {
			t.Errorf("%s: read directly %v, want %v", in, ok, direct[in])
		}
		checkDecodeInterrupts(t, []byte(in))
	}
	// What the runtime writes is always read directly.
	b, err := json.Marshal([]interrupt.Interrupt{{ID: "x1", Value: json.RawMessage(`{"a":[1,"<&>"]}`)}, {ID: "x2", Value: json.RawMessage(`"s"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := readInterrupts(b); !ok {
		t.Errorf("%s, as json.Marshal wrote it, was not read directly", b)
	}
	checkDecodeInterrupts(t, b)
}

// checkDecodeInterrupts compares decodeInterrupts with json.Unmarshal.
func checkDecodeInterrupts(t *testing.T, b []byte) {
	t.Helper()
	var want []interrupt.Interrupt
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeInterrupts(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: error %v, json.Unmarshal's %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%q: decoded (-json.Unmarshal +ours):\n%s", b, diff)
	}
	if (want == nil) != (got == nil) {
		t.Fatalf("%q: nil %v, json.Unmarshal's nil %v", b, got == nil, want == nil)
	}
}

func FuzzDecodeInterrupts(f *testing.F) {
	for _, s := range interruptSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeInterrupts(t, b)
	})
}
