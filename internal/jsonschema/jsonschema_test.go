package jsonschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type closeArgs struct {
	TicketID string     `json:"ticket_id" description:"The ticket to close, like TKT-3." jsonschema:"pattern=^TKT-[0-9]+$"`
	Reason   string     `json:"reason,omitempty" jsonschema:"maxLength=200"`
	Priority int        `json:"priority,omitempty" jsonschema:"minimum=1,maximum=5"`
	Tags     []string   `json:"tags,omitempty" jsonschema:"maxItems=3"`
	Mode     string     `json:"mode,omitempty" jsonschema:"enum=soft|hard"`
	Due      *time.Time `json:"due,omitempty"`
}

func TestForDerivesSchema(t *testing.T) {
	s, err := For[closeArgs]()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"type":"object","properties":{"due":{"type":"string","format":"date-time"},"mode":{"type":"string","enum":["soft","hard"]},"priority":{"type":"integer","minimum":1,"maximum":5},"reason":{"type":"string","maxLength":200},"tags":{"type":"array","items":{"type":"string"},"maxItems":3},"ticket_id":{"type":"string","description":"The ticket to close, like TKT-3.","pattern":"^TKT-[0-9]+$"}},"required":["ticket_id"],"additionalProperties":false}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("schema mismatch (-want +got):\n%s", diff)
	}
}

func TestForRejectsUnsupported(t *testing.T) {
	type bad struct{ C chan int }
	if _, err := For[bad](); !errors.Is(err, ErrUnsupported) {
		t.Errorf("For[chan field] error = %v, want ErrUnsupported", err)
	}
	type badTag struct {
		N int `jsonschema:"minimum=x"`
	}
	if _, err := For[badTag](); !errors.Is(err, ErrUnsupported) {
		t.Errorf("For[bad tag] error = %v, want ErrUnsupported", err)
	}
}

func TestValidate(t *testing.T) {
	s, err := For[closeArgs]()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, doc, path string // path "" means valid
	}{
		{"valid", `{"ticket_id":"TKT-3"}`, ""},
		{"valid full", `{"ticket_id":"TKT-3","reason":"done","priority":2,"tags":["a"],"mode":"soft","due":"2026-11-30T10:00:00Z"}`, ""},
		{"integer spelled 2.0", `{"ticket_id":"TKT-3","priority":2.0}`, ""},
		{"missing required", `{"reason":"x"}`, "$.ticket_id"},
		{"wrong type", `{"ticket_id":3}`, "$.ticket_id"},
		{"pattern", `{"ticket_id":"3"}`, "$.ticket_id"},
		{"unknown field", `{"ticket_id":"TKT-3","confirmed":true}`, "$.confirmed"},
		{"duplicate key", `{"ticket_id":"TKT-3","ticket_id":"TKT-4"}`, "$"},
		{"case variant key", `{"ticket_id":"TKT-3","Ticket_ID":"TKT-4"}`, "$"},
		{"not integer", `{"ticket_id":"TKT-3","priority":2.5}`, "$.priority"},
		{"below minimum", `{"ticket_id":"TKT-3","priority":0}`, "$.priority"},
		{"enum", `{"ticket_id":"TKT-3","mode":"nuke"}`, "$.mode"},
		{"too many items", `{"ticket_id":"TKT-3","tags":["a","b","c","d"]}`, "$.tags"},
		{"item type", `{"ticket_id":"TKT-3","tags":[1]}`, "$.tags[0]"},
		{"bad date", `{"ticket_id":"TKT-3","due":"tomorrow"}`, "$.due"},
		{"not an object", `["TKT-3"]`, "$"},
		{"malformed", `{"ticket_id":`, "$.ticket_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(s, []byte(tc.doc))
			if tc.path == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tc.doc, err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate(%s) = %v, want a *ValidationError", tc.doc, err)
			}
			if ve.Path != tc.path {
				t.Errorf("Validate(%s) path = %q, want %q (%v)", tc.doc, ve.Path, tc.path, err)
			}
		})
	}
}

type limitsArgs struct {
	Limits map[string]int `json:"limits"`
	Owner  struct {
		Name string `json:"name"`
	} `json:"owner"`
}

// TestSchemaSurvivesJSON: a schema stored as JSON and read back (as an
// approval request carries it) is the same schema and checks a document
// the same way, map values included; an additionalProperties that is
// neither a boolean nor a schema does not read.
func TestSchemaSurvivesJSON(t *testing.T) {
	s, err := For[limitsArgs]()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Schema
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(s, &back); d != "" {
		t.Errorf("read back (-written +read):\n%s", d)
	}
	for _, tc := range []struct{ doc, path string }{
		{`{"limits":{"a":1},"owner":{"name":"x"}}`, ""},
		{`{"limits":{"a":"lots"},"owner":{"name":"x"}}`, "$.limits.a"},
		{`{"limits":{},"owner":{"name":"x","extra":1}}`, "$.owner.extra"},
	} {
		for name, sc := range map[string]*Schema{"written": s, "read": &back} {
			err := Validate(sc, []byte(tc.doc))
			var ve *ValidationError
			if tc.path == "" && err != nil || tc.path != "" && (!errors.As(err, &ve) || ve.Path != tc.path) {
				t.Errorf("%s schema, %s: %v, want path %q", name, tc.doc, err, tc.path)
			}
		}
	}
	for _, bad := range []string{`{"type":"object","additionalProperties":5}`, `{"type":"object","additionalProperties":"no"}`} {
		if err := json.Unmarshal([]byte(bad), new(Schema)); err == nil {
			t.Errorf("%s read without error", bad)
		}
	}
}

type sizedArgs struct {
	Count uint8   `json:"count,omitempty"`
	Delta int16   `json:"delta,omitempty"`
	Items uint    `json:"items,omitempty"`
	Ratio float32 `json:"ratio,omitempty"`
	Wide  uint8   `json:"wide,omitempty" jsonschema:"maximum=1000"`
	Small int     `json:"small,omitempty" jsonschema:"minimum=1,maximum=5"`
}

// TestSizedNumbers: a value the Go type cannot hold fails validation,
// naming the field, instead of decoding; a tag narrows a type's range and
// never widens it.
func TestSizedNumbers(t *testing.T) {
	s, err := For[sizedArgs]()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, path string }{
		{`{"count":255,"delta":-32768,"items":0,"ratio":3.4e38,"wide":255,"small":5}`, ""},
		{`{"count":256}`, "$.count"},
		{`{"count":-1}`, "$.count"},
		{`{"delta":40000}`, "$.delta"},
		{`{"items":-1}`, "$.items"},
		{`{"ratio":1e39}`, "$.ratio"},
		{`{"wide":300}`, "$.wide"},
		{`{"small":6}`, "$.small"},
	} {
		err := Validate(s, []byte(tc.doc))
		var ve *ValidationError
		if tc.path == "" && err != nil || tc.path != "" && (!errors.As(err, &ve) || ve.Path != tc.path) {
			t.Errorf("%s: %v, want path %q", tc.doc, err, tc.path)
		}
	}
}

// TestInexactFloats (issue 16): a "number" a float field cannot hold as
// itself (it would decode as another value than the one validated,
// hashed and approved) fails validation naming the field: 2^53+1 for a
// float64, 2^24+1 for a float32, an underflow to zero; other spellings
// of a value a float holds pass.
func TestInexactFloats(t *testing.T) {
	type floatArgs struct {
		Amount float64   `json:"amount"`
		Ratio  float32   `json:"ratio,omitempty"`
		Rates  []float64 `json:"rates,omitempty"`
	}
	s, err := For[floatArgs]()
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON (an approval request stores the schema) the rule holds.
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Schema
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, path string }{
		{`{"amount":9007199254740992,"ratio":16777216,"rates":[0.1,1.0,1e2]}`, ""},
		{`{"amount":0.30000000000000004}`, ""},
		{`{"amount":9007199254740993}`, "$.amount"},
		{`{"amount":1e-400}`, "$.amount"},
		{`{"amount":0.10000000000000001}`, "$.amount"},
		{`{"amount":1,"ratio":16777217}`, "$.ratio"},
		{`{"amount":1,"rates":[1,123456789012345678]}`, "$.rates[1]"},
	} {
		for name, sch := range map[string]*Schema{"derived": s, "through JSON": &back} {
			err := Validate(sch, []byte(tc.doc))
			var ve *ValidationError
			if tc.path == "" && err != nil || tc.path != "" && (!errors.As(err, &ve) || ve.Path != tc.path) {
				t.Errorf("%s, %s: %v, want path %q", name, tc.doc, err, tc.path)
			}
		}
	}
}

// TestEnumOfArraysAndObjects checks enum values that are arrays or objects,
// which a schema read from JSON may hold: Validate compared them with ==,
// which panics on two slices or two maps.
func TestEnumOfArraysAndObjects(t *testing.T) {
	var s Schema
	if err := json.Unmarshal([]byte(`{"enum":[[1,"a"],{"k":2}]}`), &s); err != nil {
		t.Fatal(err)
	}
	for doc, ok := range map[string]bool{
		`[1,"a"]`:   true,
		`[1.0,"a"]`: true,
		`{"k":2}`:   true,
		`[1]`:       false,
		`{"k":3}`:   false,
		`"a"`:       false,
	} {
		if err := Validate(&s, []byte(doc)); (err == nil) != ok {
			t.Errorf("Validate(%s) = %v, want accepted %v", doc, err, ok)
		}
	}
}

// TestValidateAll: every problem of a document is reported at its path,
// sorted, so that a reviewer fixing an edit sees them all at once; the
// report is capped, and Validate returns its first entry.
func TestValidateAll(t *testing.T) {
	s, err := For[closeArgs]()
	if err != nil {
		t.Fatal(err)
	}
	type problem struct{ Path, Reason string }
	for _, tc := range []struct {
		name string
		doc  string
		want []problem
	}{
		{"valid", `{"ticket_id":"TKT-3","priority":2}`, nil},
		{"many", `{"priority":9,"tags":["a","b","c","d"],"mode":"x","extra":1,"reason":7}`, []problem{
			{"$.extra", "unknown field"},
			{"$.mode", "must be one of [soft hard]"},
			{"$.priority", "want at most 5, got 9"},
			{"$.reason", "want a string, got a number"},
			{"$.tags", "want at most 3 items, got 4"},
			{"$.ticket_id", "required field is missing"},
		}},
		{"not an object", `[1]`, []problem{{"$", "want an object, got an array"}}},
		{"not JSON", `{"ticket_id":`, []problem{{"$.ticket_id", "unexpected end of input"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []problem
			for _, p := range ValidateAll(s, []byte(tc.doc)) {
				got = append(got, problem{p.Path, p.Reason})
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ValidateAll(%s) (-want +got):\n%s", tc.doc, d)
			}
			err := Validate(s, []byte(tc.doc))
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Path != tc.want[0].Path || ve.Reason != tc.want[0].Reason {
				t.Errorf("Validate = %v, want the first problem %v", err, tc.want[0])
			}
		})
	}
	t.Run("capped", func(t *testing.T) {
		doc := []byte(`{"ticket_id":"TKT-1"`)
		for i := range MaxProblems + 50 {
			doc = fmt.Appendf(doc, `,"x%04d":1`, i)
		}
		doc = append(doc, '}')
		ps := ValidateAll(s, doc)
		if len(ps) != MaxProblems || ps[0].Path != "$.x0000" || ps[MaxProblems-1].Path != fmt.Sprintf("$.x%04d", MaxProblems-1) {
			t.Errorf("ValidateAll of %d unknown fields returned %d problems from %s to %s; want the first %d in path order",
				MaxProblems+50, len(ps), ps[0].Path, ps[len(ps)-1].Path, MaxProblems)
		}
	})
}
