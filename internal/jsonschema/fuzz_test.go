package jsonschema

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/internal/canon"
)

// FuzzValidate checks a document against a schema that was read from JSON,
// as an approval edit is checked against the schema stored with its
// request: both are input the validator must survive. Properties: Validate
// never panics; every failure is a *ValidationError matching ErrInvalid; a
// document it accepts is one canon accepts (it never passes what the
// idempotency and approval hashes refuse); and the schema checks the same
// after another trip through JSON.
func FuzzValidate(f *testing.F) {
	derived, err := For[closeArgs]()
	if err != nil {
		f.Fatal(err)
	}
	closeSchema, err := json.Marshal(derived)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct{ schema, doc string }{
		{string(closeSchema), `{"ticket_id":"TKT-3","reason":"done","priority":2,"tags":["a"],"mode":"soft"}`},
		{string(closeSchema), `{"ticket_id":"TKT-3","due":"2026-01-02T03:04:05Z"}`},
		{string(closeSchema), `{"ticket_id":"tkt-3","priority":9}`},
		{string(closeSchema), `{"ticket_id":"TKT-3","TICKET_ID":"TKT-4"}`},
		{`{"type":"object","additionalProperties":{"type":"integer","minimum":0}}`, `{"a":1,"b":1e2,"c":-1}`},
		{`{"type":"array","items":{"type":"string","maxLength":2},"maxItems":2}`, `["ab","c"]`},
		{`{"type":"string","enum":["x","y"]}`, `"x"`},
		{`{"enum":[1,2.5,"a",true,null]}`, `2.50`},
		{`{"enum":[[1],{"a":1}]}`, `[1]`},
		{`{"enum":[{"a":1}]}`, `{"a":1}`},
		{`{"type":"number","maximum":1e308}`, `1e400`},
		{`{"type":"integer"}`, `1.0e30`},
		{`{"type":"object","properties":{"a":{"type":"oneOf"}}}`, `{"a":1}`},
		{`{"type":"string","pattern":"(["}`, `"x"`},
		{`{"type":"object","additionalProperties":7}`, `{}`},
	} {
		f.Add(seed.schema, seed.doc)
	}
	f.Fuzz(func(t *testing.T, schemaJSON, doc string) {
		var s Schema
		if json.Unmarshal([]byte(schemaJSON), &s) != nil {
			return
		}
		err := Validate(&s, []byte(doc))
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate failed with %T %v, want a *ValidationError matching ErrInvalid", err, err)
			}
		} else if _, cerr := canon.JSON([]byte(doc)); cerr != nil {
			t.Fatalf("Validate accepted %q, which canon refuses: %v", doc, cerr)
		}
		again, merr := json.Marshal(&s)
		if merr != nil {
			return // a schema read from JSON whose enum holds a non-finite number, say
		}
		var s2 Schema
		if uerr := json.Unmarshal(again, &s2); uerr != nil {
			t.Fatalf("schema %s does not read back: %v", again, uerr)
		}
		if err2 := Validate(&s2, []byte(doc)); (err == nil) != (err2 == nil) {
			t.Fatalf("schema %s: Validate gave %v, after a trip through JSON %v", schemaJSON, err, err2)
		}
	})
}
