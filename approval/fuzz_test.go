package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
)

// fuzzRequest is a valid gate request for tool "close_ticket" whose stored
// schema is schema.
func fuzzRequest(t testing.TB, args string, schema json.RawMessage) Request {
	c, err := canon.JSON([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ArgsHash("close_ticket", c)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	return Request{Type: RequestType, Tool: "close_ticket", Args: c, ArgsHash: h, CallID: "call_1",
		Rationale: "the customer asked", Risk: RiskHigh, Schema: schema, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
}

const fuzzSchema = `{"type":"object","properties":{"ticket_id":{"type":"string","pattern":"^TKT-[0-9]+$"},` +
	`"reason":{"type":"string","maxLength":200},"priority":{"type":"integer","minimum":1,"maximum":5}},` +
	`"required":["ticket_id"],"additionalProperties":false}`

// FuzzParseRequest reads interrupt values as the inbox reads them from a
// paused thread. Properties: it never panics; a value that is not a
// request gives ok false and no error; a request it decodes encodes and
// decodes again to the same bytes, still a request.
func FuzzParseRequest(f *testing.F) {
	req, err := json.Marshal(fuzzRequest(f, `{"ticket_id":"TKT-3"}`, json.RawMessage(fuzzSchema)))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(req),
		`{"type":"approval_request","tool":"refund","args":{"amount":10},"risk":"critical","kind":"fallback","fallback_for":"refund_v2"}`,
		`{"type":"approval_request","created_at":"not a time"}`,
		`{"type":"approval_request","args":[1,2,3}`,
		`{"type":"question","text":"which room?"}`,
		`"approval_request"`,
		`null`,
		`{"type":"approval_request","type":"other"}`,
		`{"Type":"approval_request"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		r, ok, err := ParseRequest(value)
		if !ok {
			if err != nil {
				t.Fatalf("not a request, yet an error: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		if r.Type != RequestType {
			t.Fatalf("decoded a request of type %q", r.Type)
		}
		b1, err := json.Marshal(r)
		if err != nil {
			return // a time outside what JSON can write, say
		}
		r2, ok, err := ParseRequest(b1)
		if !ok || err != nil {
			t.Fatalf("re-encoded request %s does not parse: ok=%v err=%v", b1, ok, err)
		}
		b2, err := json.Marshal(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("request does not round trip:\n%s\n%s (%v)", b1, b2, err)
		}
	})
}

// FuzzDecideEdit decides a reviewer's edit of a request's arguments, the
// path where a human's JSON meets the schema stored with the request.
// Properties: decide never panics; every refusal is an *Error; an accepted
// edit carries canonical arguments that pass the request's schema and the
// hash of exactly those arguments.
func FuzzDecideEdit(f *testing.F) {
	for _, seed := range []struct{ schema, args string }{
		{fuzzSchema, `{"ticket_id":"TKT-4","reason":"duplicate"}`},
		{fuzzSchema, `{ "priority" : 2.0, "ticket_id" : "TKT-4" }`},
		{fuzzSchema, `{"ticket_id":"TKT-4","ticket_ID":"TKT-5"}`},
		{fuzzSchema, `{"ticket_id":"TKT-4","extra":1}`},
		{fuzzSchema, `{"ticket_id":"TKT-4"} trailing`},
		{`{"type":"object","additionalProperties":{"enum":[[1],{"a":2}]}}`, `{"x":[1],"y":{"a":2.0}}`},
		{`{"type":"object","additionalProperties":"yes"}`, `{}`},
		{``, `{"ticket_id":"TKT-4"}`},
	} {
		f.Add(seed.schema, []byte(seed.args))
	}
	now := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, schema string, args []byte) {
		req := fuzzRequest(t, `{"ticket_id":"TKT-3"}`, json.RawMessage(schema))
		item := Item{ID: "appr-1", Thread: "t1", Request: req}
		d, late, err := decide(item, Verdict{Outcome: Edited, Reviewer: "alice", Args: args}, now)
		if late != nil {
			t.Fatalf("the request expired at %s, before now: %v", req.ExpiresAt, late)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("decide failed with %T %v, want an *Error", err, err)
			}
			return
		}
		c, err := canon.JSON(d.Args)
		if err != nil || !bytes.Equal(c, d.Args) {
			t.Fatalf("accepted arguments %s are not canonical (%v)", d.Args, err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(schema), &s); err != nil {
			t.Fatalf("accepted an edit against a schema that does not decode: %v", err)
		}
		if err := jsonschema.Validate(&s, d.Args); err != nil {
			t.Fatalf("accepted arguments %s fail the schema: %v", d.Args, err)
		}
		if h, _ := ArgsHash(req.Tool, d.Args); h != d.ArgsHash {
			t.Fatalf("decision hash %s is not the hash %s of its arguments", d.ArgsHash, h)
		}
	})
}

// FuzzCursor checks the inbox's page cursor, which callers hand back as
// an opaque string. Properties: decoding never panics; every cursor the
// encoder writes decodes to what it encoded; and a string it accepts is
// one the encoder writes, so one page has one cursor.
func FuzzCursor(f *testing.F) {
	for _, seed := range []string{"", "c1.", "c1.MTc3MjM1NjQwMDAwMHx0MXxhYmM", "c1.YQ", "c1.YR", "c1.Y\nQ", "c2.YQ", "MTc3", "c1.YQ=="} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		s, err := decodeCursor(c)
		if err != nil {
			if !errors.Is(err, ErrInvalidFilter) {
				t.Fatalf("cursor %q: %v, want ErrInvalidFilter", c, err)
			}
		} else if got := encodeCursor(s); got != c {
			t.Fatalf("cursor %q accepted as %q, which encodes as %q", c, s, got)
		}
		if c == "" {
			return
		}
		enc := encodeCursor(c)
		if back, err := decodeCursor(enc); err != nil || back != c {
			t.Fatalf("encodeCursor(%q) = %q decodes to %q, %v", c, enc, back, err)
		}
	})
}
