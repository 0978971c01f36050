package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// FuzzCanonicalArgs: arguments the executor accepts hash to one memo key
// whatever their key order and spacing: a respelled repeat is a cache hit
// with the same result, and canonicalisation is idempotent.
func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[1,2,{"c":"d"}]}`, `{"q":"login","limit":10}`, `{"n":1.0e2,"s":"\u00e9"}`, `{"x":{"y":{"z":null}}}`, `[1]`, `{"a":1,"a":2}`, `{"A":1,"a":2}`, `{"s":"\ud800"}`, `{"s":"\ufffd"}`, `{"n":9007199254740993}`} {
		f.Add(s)
	}
	runs := &counter{}
	echo, err := nodes.NewTool("echo", "Echo the arguments.", func(ctx context.Context, a map[string]any, env nodes.Env) (map[string]any, error) {
		runs.inc("echo")
		return a, nil
	}, nodes.Idempotent())
	if err != nil {
		f.Fatal(err)
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{echo})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		memo := nodes.NewMemo(nil)
		first, err := ex.Execute(context.Background(), nodes.Call{Tool: "echo", Args: json.RawMessage(args), Scope: "t", Memo: memo})
		if err != nil {
			if !errors.Is(err, nodes.ErrInvalidArgs) && !errors.Is(err, nodes.ErrSecretReference) && !errors.Is(err, nodes.ErrToolFailed) {
				t.Fatalf("untyped error for %q: %v", args, err)
			}
			return
		}
		if len(bytes.TrimSpace([]byte(args))) == 0 {
			args = "{}" // no arguments at all: the executor reads {}
		}
		c, err := canon.JSON([]byte(args))
		if err != nil {
			t.Fatalf("accepted %q that has no canonical form: %v", args, err)
		}
		if c2, err := canon.JSON(c); err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("canonical form is not stable: %s then %s (%v)", c, c2, err)
		}
		// Respell: decode and encode again (sorted keys), with indentation.
		dec := json.NewDecoder(bytes.NewReader([]byte(args)))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		respelled, err := json.MarshalIndent(v, " ", "\t")
		if err != nil {
			t.Fatal(err)
		}
		second, err := ex.Execute(context.Background(), nodes.Call{Tool: "echo", Args: respelled, Scope: "t", Memo: memo})
		if err != nil {
			t.Fatalf("respelled %q as %s: %v", args, respelled, err)
		}
		if second.Status != nodes.StatusCacheHit || !bytes.Equal(first.Output, second.Output) {
			t.Fatalf("respelled %q as %s: %s %s, want a cache hit of %s", args, respelled, second.Status, second.Output, first.Output)
		}
	})
}

// FuzzToolCallArgs: whatever the model sends, decoding and validation never
// panic, failures are typed errors naming a field, and what reaches the
// body satisfies the schema.
func FuzzToolCallArgs(f *testing.F) {
	for _, s := range []string{`{"ticket_id":"TKT-3"}`, `{"ticket_id":"tkt-3"}`, `{"ticket_id":3}`, `{}`, `{"ticket_id":"TKT-3","x":1}`, `{"Ticket_ID":"TKT-3"}`,
		`{"query":"login","limit":0}`, `{"query":"a","limit":51}`, `{"query":"a","limit":1.5}`, `null`, `"x"`, `{"query":"\ud800"}`} {
		f.Add("close_ticket", s)
		f.Add("search_tickets", s)
	}
	d := &desk{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(f, nodes.NoMemo()), d.closeTool(f)}, nodes.WithPolicy(nodes.AlwaysApprove()))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		res, err := ex.Execute(context.Background(), nodes.Call{Tool: tool, Args: json.RawMessage(args), Scope: "t"})
		if err != nil {
			var ae *nodes.ArgsError
			switch {
			case errors.As(err, &ae):
				if ae.Path == "" || ae.Path[0] != '$' {
					t.Fatalf("ArgsError without a path: %v", err)
				}
			case errors.Is(err, nodes.ErrUnknownTool), errors.Is(err, nodes.ErrSecretReference):
			default:
				t.Fatalf("%s(%q): untyped error %v", tool, args, err)
			}
			return
		}
		if tool == "close_ticket" {
			var c Closed
			if json.Unmarshal(res.Output, &c) != nil || len(c.ID) < 5 || c.ID[:4] != "TKT-" {
				t.Fatalf("close_ticket ran with %q: %s", args, res.Output)
			}
		}
	})
}

// FuzzIdempotencyKeyTuple: keys are injective over (scope, tool, args):
// equal keys only for equal tuples, whatever bytes they hold; natural keys
// likewise over (tool, natural key).
func FuzzIdempotencyKeyTuple(f *testing.F) {
	f.Add("ab", "c", "{}", "a", "bc", "{}")
	f.Add("t", "x", `{"a":1}`, "t", "x", `{"a":1}`)
	f.Add("", "", "", "", "", "")
	f.Add("t\x00", "x", "", "t", "\x00x", "")
	f.Fuzz(func(t *testing.T, s1, t1, a1, s2, t2, a2 string) {
		same := s1 == s2 && t1 == t2 && a1 == a2
		if k1, k2 := nodes.IdempotencyKey(s1, t1, []byte(a1)), nodes.IdempotencyKey(s2, t2, []byte(a2)); (k1 == k2) != same {
			t.Fatalf("(%q,%q,%q) vs (%q,%q,%q): keys equal %v", s1, t1, a1, s2, t2, a2, k1 == k2)
		}
		if n1, n2 := nodes.NaturalIdempotencyKey(t1, a1), nodes.NaturalIdempotencyKey(t2, a2); (n1 == n2) != (t1 == t2 && a1 == a2) {
			t.Fatalf("natural (%q,%q) vs (%q,%q)", t1, a1, t2, a2)
		}
		if nodes.IdempotencyKey(s1, t1, []byte(a1)) == nodes.NaturalIdempotencyKey(t1, a1) {
			t.Fatal("a derived key equals a natural key")
		}
	})
}

// FuzzToolNameGate: no name but the exact one reaches the destructive tool,
// and even that one does not run without an approval.
func FuzzToolNameGate(f *testing.F) {
	for _, s := range []string{"delete_file", "Delete_File", "delete_file ", "delete_file\u200b", "d\u0435lete_file", "delete_file\x00", ""} {
		f.Add(s)
	}
	runs := &counter{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{deleteTool(f, runs)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: name, Args: json.RawMessage(`{"path":"/x"}`), Scope: "t"})
		switch {
		case name == "delete_file":
			if !errors.Is(err, nodes.ErrConfirmationRequired) {
				t.Fatalf("exact name: %v", err)
			}
		case !errors.Is(err, nodes.ErrUnknownTool):
			t.Fatalf("name %q: %v, want ErrUnknownTool", name, err)
		}
		if runs.get("all") != 0 {
			t.Fatalf("the destructive tool ran for name %q", name)
		}
	})
}

// FuzzModelToolCallArgs: whatever arguments text the model sends with a
// tool call (a JSON string, valid or not), the agent neither fails nor
// panics: the call becomes a tool result the model reads (executed, or
// failed with an error and a note saying what to do), the model sees its
// call as it sent it (empty arguments as "{}"), and a write only runs with
// arguments its schema accepts. Bytes that are not UTF-8 text fail the
// model node with ErrMalformedAnswer.
func FuzzModelToolCallArgs(f *testing.F) {
	for _, s := range []string{`{"ticket_id":"TKT-3"}`, `{"query":"login"}`, ``, `{}`, `{"query":`, `[1]`, `null`, `"{\"query\":\"x\"}"`,
		`{"query":"a","query":"b"}`, `{"ticket_id":"TKT-3","x":1}`, `{"query":"\u0000"}`, " {\"query\" : \"x\" } ", `{"query":"{{secrets.TOKEN}}"}`} {
		f.Add("close_ticket", s)
		f.Add("search_tickets", s)
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		if tool == "" {
			return // a nameless call is a model error, tested elsewhere
		}
		d := &desk{}
		ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t, nodes.NoMemo()), d.closeTool(t)}, nodes.WithPolicy(nodes.AlwaysApprove()))
		if err != nil {
			t.Fatal(err)
		}
		m := scripted.New(scripted.CallTools("", scripted.Call("c", tool, args)), scripted.Say("ok"))
		a, err := nodes.NewAgent(m, ex, nodes.AgentOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Invoke(context.Background(), "t", graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "go"}}}, "Messages"))
		if !utf8.ValidString(tool) || !utf8.ValidString(args) {
			// Not text a model can send: the model node refuses it, loudly.
			if !errors.Is(err, nodes.ErrMalformedAnswer) || d.calls.get("close_ticket")+d.calls.get("search_tickets") != 0 {
				t.Fatalf("%q(%q): %v", tool, args, err)
			}
			return
		}
		if err != nil || res.Status != graph.StatusDone {
			t.Fatalf("%s(%q): status %s, %v", tool, args, res.Status, err)
		}
		msgs := res.Values.Messages
		if len(msgs) != 4 || msgs[2].Role != nodes.RoleTool || msgs[2].ToolCallID != "c" {
			t.Fatalf("%s(%q): messages %+v", tool, args, msgs)
		}
		want := args
		if want == "" {
			want = "{}"
		}
		if got := msgs[1].ToolCalls[0].Arguments; got != want {
			t.Fatalf("the call was stored with arguments %q, the model sent %q", got, args)
		}
		var o nodes.Observation
		if err := json.Unmarshal([]byte(msgs[2].Content), &o); err != nil {
			t.Fatalf("%s(%q): tool result %q: %v", tool, args, msgs[2].Content, err)
		}
		switch o.Status {
		case nodes.StatusExecuted:
			if tool == "close_ticket" {
				var c Closed
				if json.Unmarshal(o.Result, &c) != nil || len(c.ID) < 5 || c.ID[:4] != "TKT-" {
					t.Fatalf("close_ticket ran with %q: %s", args, o.Result)
				}
			}
		case nodes.StatusFailed:
			if o.Error == "" || o.Note == "" {
				t.Fatalf("%s(%q): failure without an error and a note: %+v", tool, args, o)
			}
			if d.calls.get("close_ticket")+d.calls.get("search_tickets") != 0 {
				t.Fatalf("%s(%q) failed after running", tool, args)
			}
		default:
			t.Fatalf("%s(%q): status %s", tool, args, o.Status)
		}
		if sent := m.Calls()[1].Messages; len(sent) != 3 || sent[1].ToolCalls[0].Arguments != want {
			t.Fatalf("the model was sent %+v", sent)
		}
	})
}
