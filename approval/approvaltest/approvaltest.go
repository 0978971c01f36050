// Package approvaltest is the conformance suite of approval.Store: every
// implementation (approval.MemoryStore, approval.SQLStore on SQLite, the
// PostgreSQL store of package postgres) runs it, so that they decide
// alike. The cases are the store rules of package approval's
// documentation: first-wins decisions naming the winner, edits and their
// hash, invalid verdicts that change nothing, outcomes only for approved
// calls, the expiry boundary, the resume bookkeeping, resume claims that
// name their holder (approval.ResumeClaimer, for the stores that implement
// it), and 64 goroutines deciding one set of approvals.
package approvaltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
)

// Factory returns a new, empty store that reads time from now, and
// optionally a dump of everything it holds of the approvals named (nil:
// the suite compares their audits), which tests compare to check that a
// refused call changed nothing. It registers its cleanup with t.Cleanup.
type Factory func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string)

// Run runs every case against the stores open makes, as subtests of t.
func Run(t *testing.T, open Factory) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(*testing.T, Factory)
	}{
		{"DecideFirstWins", testDecideFirstWins},
		{"KeepsTraceParent", testKeepsTraceParent},
		{"DecideEdit", testDecideEdit},
		{"DecideInvalid", testDecideInvalid},
		{"RecordOutcomeNotApproved", testRecordOutcomeNotApproved},
		{"ExpiryBoundary", testExpiryBoundary},
		{"ResumeBookkeeping", testResumeBookkeeping},
		{"ResumeClaims", testResumeClaims},
		{"DecisionRace", testDecisionRace},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

// openStore opens a store and its dump.
func openStore(t testing.TB, open Factory, now func() time.Time) (approval.Store, func(ids ...string) string) {
	t.Helper()
	s, dump := open(t, now)
	if dump == nil {
		dump = func(ids ...string) string { return dumpAudits(t, s, ids) }
	}
	return s, dump
}

// testDecideFirstWins: the second decision on an approval fails with an
// *AlreadyDecidedError that names the winner, and the record keeps the
// winner (G5, R35 at its smallest).
func testDecideFirstWins(t *testing.T, open Factory) {
	{
		{
			ctx := context.Background()
			clock := newClock()
			s, _ := openStore(t, open, clock.Now)
			it := newItem(t, refundSchema(t), clock.Now(), "a1")
			clock.Add(time.Minute)
			got, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Note: "ok"})
			if err != nil {
				t.Fatal(err)
			}
			want := approval.Decision{ID: it.ID, Outcome: approval.Approved, Reviewer: "alice", Note: "ok", ArgsHash: it.Request.ArgsHash, DecidedAt: epoch.Add(time.Minute)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			clock.Add(time.Minute)
			_, err = s.Decide(ctx, it, approval.Verdict{Outcome: approval.Rejected, Reviewer: "bob"})
			var lost *approval.AlreadyDecidedError
			if !errors.As(err, &lost) || !errors.Is(err, approval.ErrAlreadyDecided) || errors.Is(err, approval.ErrExpired) {
				t.Fatalf("second Decide: %v, want an *AlreadyDecidedError", err)
			}
			if diff := cmp.Diff(want, lost.Winner); diff != "" {
				t.Errorf("winner named to the loser (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), `"a1"`) || !strings.Contains(err.Error(), `"alice"`) {
				t.Errorf("error %q should name the approval and the winner", err)
			}
			rec, err := s.Get(ctx, "a1")
			if err != nil {
				t.Fatal(err)
			}
			wantRec := approval.Record{ID: "a1", Thread: it.Thread, Checkpoint: it.Checkpoint, Request: it.Request, Decision: want}
			if diff := cmp.Diff(wantRec, rec, sameJSON); diff != "" {
				t.Errorf("stored record, JSON compared by value (-want +got):\n%s", diff)
			}
		}
	}
}

// testKeepsTraceParent: every store keeps a request's traceparent with
// the decision, for the worker's resume to link to (in any process).
func testKeepsTraceParent(t *testing.T, open Factory) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := context.Background()
	clock := newClock()
	s, _ := openStore(t, open, clock.Now)
	it := newItem(t, refundSchema(t), clock.Now(), "a1")
	it.Request.TraceParent = tp
	if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "a1")
	if err != nil || rec.Request.TraceParent != tp {
		t.Fatalf("Get: traceparent %q, %v", rec.Request.TraceParent, err)
	}
	recs, err := s.Unresumed(ctx, 0)
	if err != nil || len(recs) != 1 || recs[0].Request.TraceParent != tp {
		t.Fatalf("Unresumed: %+v, %v", recs, err)
	}
}

// testDecideEdit: an edit runs the reviewer's arguments, canonical, and the
// decision's hash covers them, not the original ones.
func testDecideEdit(t *testing.T, open Factory) {
	{
		{
			ctx := context.Background()
			clock := newClock()
			s, _ := openStore(t, open, clock.Now)
			it := newItem(t, refundSchema(t), clock.Now(), "e1")
			got, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Tool: "refund",
				Args: json.RawMessage(`{ "amount": 25.0, "order": "order-e1" }`), Note: "partial refund"})
			if err != nil {
				t.Fatal(err)
			}
			wantArgs := json.RawMessage(`{"amount":25,"order":"order-e1"}`)
			h, _ := approval.ArgsHash("refund", wantArgs)
			want := approval.Decision{ID: it.ID, Outcome: approval.Edited, Reviewer: "alice", Note: "partial refund", Args: wantArgs, ArgsHash: h, DecidedAt: epoch}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			if h == it.Request.ArgsHash {
				t.Error("the edited decision covers the original arguments")
			}
			rec, err := s.Get(ctx, "e1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, rec.Decision); diff != "" {
				t.Errorf("stored decision (-want +got):\n%s", diff)
			}
		}
	}
}

// testDecideInvalid (R38): invalid operations fail with typed errors and
// change nothing: the tables (SQL) or the audits (memory) are the same
// before and after, and messages carry neither the note nor the arguments.
func testDecideInvalid(t *testing.T, open Factory) {
	schema := refundSchema(t)
	huge := strings.Repeat("n", 1<<20)
	tampered := func(it approval.Item) approval.Item {
		it.Request.Args = json.RawMessage(`{"amount":500,"order":"order-x"}`)
		return it
	}
	withExpiry := func(created, expires time.Time) func(approval.Item) approval.Item {
		return func(it approval.Item) approval.Item {
			it.Request.CreatedAt, it.Request.ExpiresAt = created, expires
			return it
		}
	}
	tests := []struct {
		name string
		item func(approval.Item) approval.Item // changes the pending item
		v    approval.Verdict
		want error
	}{
		{"empty ID", func(it approval.Item) approval.Item { it.ID = ""; return it }, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrNotFound},
		{"no thread", func(it approval.Item) approval.Item { it.Thread = ""; return it }, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidRequest},
		{"outcome APPROVE", nil, approval.Verdict{Outcome: "APPROVE", Reviewer: "alice"}, approval.ErrInvalidDecision},
		{"outcome yes", nil, approval.Verdict{Outcome: "yes", Reviewer: "alice"}, approval.ErrInvalidDecision},
		{"empty outcome", nil, approval.Verdict{Outcome: "", Reviewer: "alice"}, approval.ErrInvalidDecision},
		{"outcome approve", nil, approval.Verdict{Outcome: "approve", Reviewer: "alice"}, approval.ErrInvalidDecision},
		{"empty reviewer", nil, approval.Verdict{Outcome: approval.Approved}, approval.ErrInvalidDecision},
		{"blank reviewer", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: " \t"}, approval.ErrInvalidDecision},
		{"reviewer imitates expiry", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: approval.ExpiryReviewer}, approval.ErrInvalidDecision},
		{"reviewer imitates the system", nil, approval.Verdict{Outcome: approval.Rejected, Reviewer: " System:admin"}, approval.ErrInvalidDecision},
		{"reviewer with control characters", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice\nsystem:expiry"}, approval.ErrInvalidDecision},
		{"reviewer with a C1 control (NEL)", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice\u0085"}, approval.ErrInvalidDecision},
		{"reviewer hides the prefix behind a zero-width space", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "\u200bsystem:expiry"}, approval.ErrInvalidDecision},
		{"reviewer spells the prefix in full width", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "ＳＹＳＴＥＭ:expiry"}, approval.ErrInvalidDecision},
		{"reviewer reversed by a direction mark", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "\u202eecila"}, approval.ErrInvalidDecision},
		{"human records an expiry", nil, approval.Verdict{Outcome: approval.Expired, Reviewer: "alice"}, approval.ErrInvalidDecision},
		{"expiry before the deadline", nil, approval.Verdict{Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer}, approval.ErrInvalidDecision},
		{"1 MB note", nil, approval.Verdict{Outcome: approval.Rejected, Reviewer: "alice", Note: huge}, approval.ErrInvalidDecision},
		{"approve with arguments", nil, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Args: json.RawMessage(`{"amount":1,"order":"o"}`)}, approval.ErrInvalidDecision},
		{"edit switches tool", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Tool: "delete_account", Args: json.RawMessage(`{"amount":1,"order":"o"}`)}, approval.ErrInvalidArgs},
		{"edit over the schema's maximum", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":10000,"order":"o"}`)}, approval.ErrInvalidArgs},
		{"edit adds a field", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":1,"order":"o","to":"attacker"}`)}, approval.ErrInvalidArgs},
		{"edit drops a field", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":1}`)}, approval.ErrInvalidArgs},
		{"edit with duplicate keys", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":1,"order":"o","amount":400}`)}, approval.ErrInvalidArgs},
		{"edit without arguments", nil, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice"}, approval.ErrInvalidArgs},
		{"edit without a schema", func(it approval.Item) approval.Item { it.Request.Schema = nil; return it }, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":1,"order":"o"}`)}, approval.ErrInvalidArgs},
		{"edit of an outcome-unknown request", func(it approval.Item) approval.Item { it.Request.Kind = approval.KindOutcomeUnknown; return it },
			approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"amount":1,"order":"o"}`)}, approval.ErrInvalidArgs},
		{"arguments changed after hashing", tampered, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidRequest},
		{"not an approval request", func(it approval.Item) approval.Item { it.Request.Type = "question"; return it }, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidRequest},
		{"zero expiry", withExpiry(epoch, time.Time{}), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
		{"expiry before creation", withExpiry(epoch, epoch.Add(-time.Second)), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
		{"expiry in year 9999", withExpiry(epoch, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
	}
	{
		{
			ctx := context.Background()
			clock := newClock()
			s, dump := openStore(t, open, clock.Now)
			// One decided approval with an outcome, so that every table has rows.
			done := newItem(t, schema, clock.Now(), "done")
			if _, err := s.Decide(ctx, done, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordOutcome(ctx, "done", approval.Execution{IdempotencyKey: "k", ArgsHash: done.Request.ArgsHash, Result: json.RawMessage(`{"ok":true}`)}); err != nil {
				t.Fatal(err)
			}
			before := dump("done", "p1", "")
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					it := newItem(t, schema, clock.Now(), "p1")
					if tc.item != nil {
						it = tc.item(it)
					}
					_, err := s.Decide(ctx, it, tc.v)
					if !errors.Is(err, tc.want) {
						t.Fatalf("Decide: %v, want an error matching %v", err, tc.want)
					}
					var ae *approval.Error
					if !errors.As(err, &ae) {
						t.Errorf("Decide: %T, want an *approval.Error", err)
					}
					if msg := err.Error(); len(msg) > 400 || strings.Contains(msg, "nnnnnnnn") || strings.Contains(msg, "attacker") {
						t.Errorf("the error message leaks the note or the arguments: %.200q", msg)
					}
					if diff := cmp.Diff(before, dump("done", "p1", "")); diff != "" {
						t.Errorf("state changed (-before +after):\n%s", diff)
					}
				})
			}
			// Other operations on unknown or unfit approvals.
			ops := []struct {
				name string
				call func() error
				want error
			}{
				{"Get unknown", func() error { _, err := s.Get(ctx, "nope"); return err }, approval.ErrNotFound},
				{"Audit unknown", func() error { _, err := s.Audit(ctx, "nope"); return err }, approval.ErrNotFound},
				{"Claim unknown", func() error { _, err := s.ClaimResume(ctx, "nope", time.Minute); return err }, approval.ErrNotFound},
				{"Finish unknown", func() error { return s.FinishResume(ctx, "nope", "x") }, approval.ErrNotFound},
				{"Retry unknown", func() error { return s.RetryResume(ctx, "nope", "x", 0) }, approval.ErrNotFound},
				{"outcome of unknown", func() error { return s.RecordOutcome(ctx, "nope", approval.Execution{}) }, approval.ErrNotFound},
				{"outcome with other arguments", func() error {
					return s.RecordOutcome(ctx, "done", approval.Execution{IdempotencyKey: "k", ArgsHash: "0000", Result: json.RawMessage(`{"ok":true}`)})
				}, approval.ErrArgsMismatch},
				{"a second, different outcome", func() error {
					return s.RecordOutcome(ctx, "done", approval.Execution{IdempotencyKey: "k", ArgsHash: done.Request.ArgsHash, Result: json.RawMessage(`{"ok":false}`)})
				}, approval.ErrOutcomeRecorded},
				{"outcome that is not JSON", func() error {
					return s.RecordOutcome(ctx, "done", approval.Execution{IdempotencyKey: "k", ArgsHash: done.Request.ArgsHash, Result: json.RawMessage(`{ok`)})
				}, approval.ErrInvalidArgs},
				{"the same outcome again", func() error {
					return s.RecordOutcome(ctx, "done", approval.Execution{IdempotencyKey: "k", ArgsHash: done.Request.ArgsHash, Result: json.RawMessage(`{ "ok": true }`)})
				}, nil},
			}
			for _, op := range ops {
				t.Run(op.name, func(t *testing.T) {
					err := op.call()
					if op.want == nil && err != nil || !errors.Is(err, op.want) {
						t.Fatalf("%v, want %v", err, op.want)
					}
					if diff := cmp.Diff(before, dump("done", "p1", "")); diff != "" {
						t.Errorf("state changed (-before +after):\n%s", diff)
					}
				})
			}
		}
	}
}

// testRecordOutcomeNotApproved: nothing can be recorded as having run for
// a rejected call.
func testRecordOutcomeNotApproved(t *testing.T, open Factory) {
	{
		{
			ctx := context.Background()
			clock := newClock()
			s, _ := openStore(t, open, clock.Now)
			it := newItem(t, refundSchema(t), clock.Now(), "r1")
			if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Rejected, Reviewer: "bob", Note: "no"}); err != nil {
				t.Fatal(err)
			}
			err := s.RecordOutcome(ctx, "r1", approval.Execution{IdempotencyKey: "k", ArgsHash: it.Request.ArgsHash})
			if !errors.Is(err, approval.ErrNotApproved) {
				t.Fatalf("RecordOutcome on a rejection: %v, want ErrNotApproved", err)
			}
			tr, err := s.Audit(ctx, "r1")
			if err != nil {
				t.Fatal(err)
			}
			if tr.Execution != nil {
				t.Errorf("a rejected call has an execution: %+v", tr.Execution)
			}
		}
	}
}

// testExpiryBoundary (R36 b, c, e) with an injected clock: one tick before
// the deadline an approval works; at the deadline the first verdict to
// arrive, whatever it says, fails with ErrExpired and records the expiry
// (by ExpiryReviewer, at the time it arrived); every later one, 1 ns after
// or with the clock moved back an hour, is told the expiry won and changes
// nothing.
func testExpiryBoundary(t *testing.T, open Factory) {
	{
		{
			ctx := context.Background()
			clock := newClock()
			s, dump := openStore(t, open, clock.Now)
			schema := refundSchema(t)
			deadline := epoch.Add(ttl)
			approve := approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}
			verdicts := []approval.Verdict{approve, {Outcome: approval.Rejected, Reviewer: "bob"}, {Outcome: approval.Edited, Reviewer: "bob", Args: json.RawMessage(`{"amount":1,"order":"o"}`)}}

			early := newItem(t, schema, epoch, "early")
			clock.Set(deadline.Add(-time.Nanosecond))
			if _, err := s.Decide(ctx, early, approve); err != nil {
				t.Fatalf("approve one tick before the deadline: %v", err)
			}

			for _, v := range verdicts {
				t.Run(string(v.Outcome), func(t *testing.T) {
					late := newItem(t, schema, epoch, "late-"+string(v.Outcome))
					clock.Set(deadline)
					_, err := s.Decide(ctx, late, v)
					var lost *approval.AlreadyDecidedError
					if !errors.Is(err, approval.ErrExpired) || errors.As(err, &lost) {
						t.Fatalf("%s at the deadline: %v, want an *Error matching ErrExpired", v.Outcome, err)
					}
					rec, err := s.Get(ctx, late.ID)
					if err != nil {
						t.Fatalf("the expiry the late %s observed was not recorded: %v", v.Outcome, err)
					}
					want := approval.Decision{ID: late.ID, Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer,
						Note:     "nobody decided before 2026-03-02T10:00:00Z; expired requests are rejected; escalate to payments instead of retrying",
						ArgsHash: late.Request.ArgsHash, DecidedAt: deadline}
					if diff := cmp.Diff(want, rec.Decision); diff != "" {
						t.Errorf("recorded expiry (-want +got):\n%s", diff)
					}
					after := dump("early", late.ID)
					for _, at := range []time.Time{deadline.Add(time.Nanosecond), deadline.Add(-time.Hour)} {
						clock.Set(at)
						for _, v2 := range verdicts {
							_, err := s.Decide(ctx, late, v2)
							if !errors.As(err, &lost) || lost.Winner.Outcome != approval.Expired || !errors.Is(err, approval.ErrExpired) {
								t.Errorf("%s at deadline%+v after the expiry was recorded: %v, want *AlreadyDecidedError matching ErrExpired", v2.Outcome, at.Sub(deadline), err)
							}
						}
					}
					if diff := cmp.Diff(after, dump("early", late.ID)); diff != "" {
						t.Errorf("verdicts after the expiry changed the store (-before +after):\n%s", diff)
					}
				})
			}
		}
	}
}

// fakeClock is the injected clock of the stores, inboxes, workers and the
// gated node.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

var epoch = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func newClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// DumpAudits prints the audit trails of ids in s, one line each, for a
// test's failure message; a trail that cannot be read prints its error.
func DumpAudits(t testing.TB, s approval.Store, ids []string) string {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		tr, err := s.Audit(context.Background(), id)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", id, err)
			continue
		}
		j, _ := json.Marshal(tr)
		fmt.Fprintf(&b, "%s: %s\n", id, j)
	}
	return b.String()
}

// RefundArgs are the arguments of the gated refund tool the suite's
// requests call.
type RefundArgs struct {
	Order  string `json:"order" jsonschema:"minLength=1"`
	Amount int    `json:"amount" jsonschema:"minimum=1,maximum=500"`
}

// RefundSchema returns the JSON Schema of RefundArgs; it fails t if the
// schema cannot be built.
func RefundSchema(t testing.TB) json.RawMessage {
	t.Helper()
	s, err := jsonschema.For[RefundArgs]()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MustJSON returns v's JSON; it fails t if v cannot be encoded.
func MustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TTL is how long the suite's requests wait for a decision.
const TTL = time.Hour

// NewRequest builds the request the tool node would raise for a refund of
// amount on order, created at now; it fails t if its arguments cannot be
// hashed.
func NewRequest(t testing.TB, schema json.RawMessage, now time.Time, order string, amount int) approval.Request {
	t.Helper()
	args := MustJSON(t, RefundArgs{Order: order, Amount: amount})
	h, err := approval.ArgsHash("refund", args)
	if err != nil {
		t.Fatal(err)
	}
	return approval.Request{
		Type: approval.RequestType, Tool: "refund", Args: args, ArgsHash: h, CallID: "call-" + order,
		Rationale: "the parcel never arrived", Context: json.RawMessage(`{"customer":"c-42","order_total":120}`),
		Risk: approval.RiskHigh, Rule: "risk:high", Owner: "payments", Schema: schema,
		CreatedAt: now, ExpiresAt: now.Add(TTL),
	}
}

// NewItem is a pending approval with ID id as the inbox would list it,
// without a graph.
func NewItem(t testing.TB, schema json.RawMessage, now time.Time, id string) approval.Item {
	t.Helper()
	return approval.Item{ID: id, Thread: "thread-" + id, Checkpoint: "cp-" + id, TaskID: "task-" + id, Node: "refund",
		PausedAt: now, Request: NewRequest(t, schema, now, "order-"+id, 40)}
}

// The suite's own spellings.
var (
	dumpAudits   = DumpAudits
	refundSchema = RefundSchema
	newItem      = NewItem
)

const ttl = TTL

// testResumeBookkeeping: Unresumed lists decided, unresumed approvals
// oldest decision first; ClaimResume takes one once until its lease
// lapses; RetryResume counts attempts and defers; FinishResume marks it
// resumed once, for good; Decided tells which IDs have a decision.
func testResumeBookkeeping(t *testing.T, open Factory) {
	ctx := context.Background()
	clock := newClock()
	s, _ := openStore(t, open, clock.Now)
	schema := refundSchema(t)
	var ids []string
	for i := range 3 {
		it := newItem(t, schema, clock.Now(), fmt.Sprintf("b%d", i))
		if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, it.ID)
		clock.Add(time.Second)
	}
	list := func() []string {
		t.Helper()
		recs, err := s.Unresumed(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	if diff := cmp.Diff(ids, list()); diff != "" {
		t.Errorf("Unresumed, oldest first (-want +got):\n%s", diff)
	}
	if recs, err := s.Unresumed(ctx, 2); err != nil || len(recs) != 2 {
		t.Errorf("Unresumed(2) = %d records, %v", len(recs), err)
	}
	if ok, err := s.ClaimResume(ctx, "b0", time.Minute); err != nil || !ok {
		t.Fatalf("first claim: %v, %v", ok, err)
	}
	if ok, err := s.ClaimResume(ctx, "b0", time.Minute); err != nil || ok {
		t.Errorf("second claim within the lease: %v, %v; want not taken", ok, err)
	}
	if diff := cmp.Diff(ids[1:], list()); diff != "" {
		t.Errorf("Unresumed while b0 is claimed (-want +got):\n%s", diff)
	}
	clock.Add(time.Minute)
	if ok, err := s.ClaimResume(ctx, "b0", time.Minute); err != nil || !ok {
		t.Errorf("claim after the lease lapsed: %v, %v", ok, err)
	}
	if err := s.RetryResume(ctx, "b0", "busy", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "b0")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Resume.Attempts != 1 || rec.Resume.LastError != "busy" || !rec.Resume.NotBefore.Equal(clock.Now().Add(10*time.Second)) {
		t.Errorf("after RetryResume: %+v", rec.Resume)
	}
	if err := s.RetryResume(ctx, "b0", "x", -time.Second); !errors.Is(err, approval.ErrInvalidConfig) {
		t.Errorf("negative retry delay: %v, want ErrInvalidConfig", err)
	}
	if _, err := s.ClaimResume(ctx, "b0", 0); !errors.Is(err, approval.ErrInvalidConfig) {
		t.Errorf("zero claim lease: %v, want ErrInvalidConfig", err)
	}
	if err := s.FinishResume(ctx, "b1", "resumed"); err != nil {
		t.Fatal(err)
	}
	at := clock.Now()
	clock.Add(time.Minute)
	if err := s.FinishResume(ctx, "b1", "again"); err != nil {
		t.Errorf("finishing twice: %v", err)
	}
	rec, err = s.Get(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Resume.At.Equal(at) || rec.Resume.Note != "resumed" {
		t.Errorf("a finished resume changed: %+v", rec.Resume)
	}
	if ok, err := s.ClaimResume(ctx, "b1", time.Minute); err != nil || ok {
		t.Errorf("claim of a finished resume: %v, %v", ok, err)
	}
	clock.Add(time.Minute)
	if diff := cmp.Diff([]string{"b0", "b2"}, list()); diff != "" {
		t.Errorf("Unresumed at the end (-want +got):\n%s", diff)
	}
	got, err := s.Decided(ctx, []string{"b0", "b1", "nope", ""})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"b0": true, "b1": true}, got); diff != "" {
		t.Errorf("Decided (-want +got):\n%s", diff)
	}
}

// testResumeClaims (approval.ResumeClaimer; skipped for a store that does
// not implement it): ClaimResumeAs records its holder; a live claim is
// taken by nobody else, and taken back only by its own worker naming it
// (once, of two at once); Claims lists a worker's live claims, oldest
// decision first; an anonymous claim, a retry and a finish clear the
// holder; invalid claims are refused with ErrInvalidConfig and claim
// nothing.
func testResumeClaims(t *testing.T, open Factory) {
	ctx := context.Background()
	clock := newClock()
	st, _ := openStore(t, open, clock.Now)
	s, ok := st.(approval.ResumeClaimer)
	if !ok {
		t.Skipf("%T does not implement approval.ResumeClaimer", st)
	}
	schema := refundSchema(t)
	for i := range 3 {
		it := newItem(t, schema, clock.Now(), fmt.Sprintf("c%d", i))
		if _, err := st.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	claim := func(id string, c approval.Claim) bool {
		t.Helper()
		ok, err := s.ClaimResumeAs(ctx, id, c)
		if err != nil {
			t.Fatalf("ClaimResumeAs(%s, %+v): %v", id, c, err)
		}
		return ok
	}
	holder := func(id string) (string, string) {
		t.Helper()
		rec, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Resume.Claimant, rec.Resume.Claim
	}
	claims := func(worker string, limit int) []string {
		t.Helper()
		recs, err := s.Claims(ctx, worker, limit)
		if err != nil {
			t.Fatalf("Claims(%s): %v", worker, err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	if !claim("c1", approval.Claim{Worker: "w1", ID: "k1", Lease: time.Minute}) {
		t.Fatal("the first claim of c1 was not taken")
	}
	if w, c := holder("c1"); w != "w1" || c != "k1" {
		t.Errorf("holder of c1: %q %q, want w1 k1", w, c)
	}
	if !claim("c0", approval.Claim{Worker: "w1", ID: "k0", Lease: time.Minute}) {
		t.Fatal("the first claim of c0 was not taken")
	}
	if diff := cmp.Diff([]string{"c0", "c1"}, claims("w1", 0)); diff != "" {
		t.Errorf("Claims(w1), oldest decision first (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c0"}, claims("w1", 1)); diff != "" {
		t.Errorf("Claims(w1, 1) (-want +got):\n%s", diff)
	}
	if got := claims("w2", 0); len(got) != 0 {
		t.Errorf("Claims(w2) = %v, want none", got)
	}
	for _, c := range []approval.Claim{
		{Worker: "w2", ID: "k2", Lease: time.Minute},
		{Worker: "w2", ID: "k2", Lease: time.Minute, TakeBack: "k1"}, // another worker naming the claim
		{Worker: "w1", ID: "k3", Lease: time.Minute},                 // its own worker, naming no claim
		{Worker: "w1", ID: "k3", Lease: time.Minute, TakeBack: "k0"}, // naming another claim
	} {
		if claim("c1", c) {
			t.Errorf("ClaimResumeAs(c1, %+v) took a live claim of w1 k1", c)
		}
	}
	if ok, err := st.ClaimResume(ctx, "c1", time.Minute); err != nil || ok {
		t.Errorf("ClaimResume of a live named claim: %v, %v; want not taken", ok, err)
	}
	if w, c := holder("c1"); w != "w1" || c != "k1" {
		t.Errorf("holder of c1 after the refused claims: %q %q, want w1 k1", w, c)
	}
	// Two take-backs of one claim at once: one wins.
	var wg sync.WaitGroup
	won := make([]bool, 2)
	for i := range won {
		wg.Go(func() {
			ok, err := s.ClaimResumeAs(ctx, "c1", approval.Claim{Worker: "w1", ID: fmt.Sprintf("back-%d", i), Lease: time.Minute, TakeBack: "k1"})
			if err != nil {
				t.Error(err)
			}
			won[i] = ok
		})
	}
	wg.Wait()
	if won[0] == won[1] {
		t.Errorf("two take-backs of claim k1 at once: taken %v; want exactly one", won)
	}
	if w, c := holder("c1"); w != "w1" || (c != "back-0" && c != "back-1") {
		t.Errorf("holder of c1 after the take-back: %q %q", w, c)
	}
	// A lapsed claim is anyone's, and not listed.
	clock.Add(time.Minute)
	if got := claims("w1", 0); len(got) != 0 {
		t.Errorf("Claims(w1) after the leases lapsed = %v, want none", got)
	}
	if !claim("c0", approval.Claim{Worker: "w2", ID: "k4", Lease: time.Minute}) {
		t.Error("a lapsed claim was not taken by another worker")
	}
	// An anonymous claim, a retry and a finish clear the holder.
	clock.Add(time.Minute)
	if ok, err := st.ClaimResume(ctx, "c0", time.Minute); err != nil || !ok {
		t.Fatalf("ClaimResume of c0: %v, %v", ok, err)
	}
	if w, c := holder("c0"); w != "" || c != "" {
		t.Errorf("holder of c0 after an anonymous claim: %q %q, want none", w, c)
	}
	if !claim("c2", approval.Claim{Worker: "w1", ID: "k5", Lease: time.Minute}) {
		t.Fatal("claim of c2 not taken")
	}
	if err := st.RetryResume(ctx, "c2", "down", time.Second); err != nil {
		t.Fatal(err)
	}
	if w, c := holder("c2"); w != "" || c != "" {
		t.Errorf("holder of c2 after RetryResume: %q %q, want none", w, c)
	}
	if got := claims("w1", 0); len(got) != 0 {
		t.Errorf("Claims(w1) after the retry = %v: a backoff is no claim", got)
	}
	clock.Add(time.Second)
	if !claim("c2", approval.Claim{Worker: "w1", ID: "k6", Lease: time.Minute}) {
		t.Fatal("claim of c2 after its backoff not taken")
	}
	if err := st.FinishResume(ctx, "c2", "done"); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "c2"); err != nil || rec.Resume.Claimant != "" || rec.Resume.Claim != "" || rec.Resume.At.IsZero() {
		t.Errorf("c2 after FinishResume: %+v, %v; want resumed, no holder", rec.Resume, err)
	}
	if claim("c2", approval.Claim{Worker: "w1", ID: "k7", Lease: time.Minute, TakeBack: "k6"}) {
		t.Error("a finished resume was claimed")
	}
	if _, err := s.ClaimResumeAs(ctx, "nope", approval.Claim{Worker: "w1", ID: "k", Lease: time.Minute}); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("ClaimResumeAs of an unknown approval: %v, want ErrNotFound", err)
	}
	// Invalid claims change nothing.
	before, _ := holder("c1")
	long := strings.Repeat("w", approval.MaxClaimBytes+1)
	for _, c := range []approval.Claim{
		{ID: "c", Lease: time.Minute},
		{Worker: "w", Lease: time.Minute},
		{Worker: long, ID: "c", Lease: time.Minute},
		{Worker: "w", ID: long, Lease: time.Minute},
		{Worker: "w", ID: "c", Lease: time.Minute, TakeBack: long},
		{Worker: "w\xff", ID: "c", Lease: time.Minute},
		{Worker: "w", ID: "c"},
		{Worker: "w", ID: "c", Lease: -time.Second},
	} {
		if ok, err := s.ClaimResumeAs(ctx, "c1", c); ok || !errors.Is(err, approval.ErrInvalidConfig) {
			t.Errorf("ClaimResumeAs(%+v) = %v, %v; want ErrInvalidConfig", c, ok, err)
		}
	}
	if after, _ := holder("c1"); after != before {
		t.Errorf("the refused claims changed c1's holder: %q, was %q", after, before)
	}
	for _, w := range []string{"", long, "w\xff"} {
		if _, err := s.Claims(ctx, w, 0); !errors.Is(err, approval.ErrInvalidConfig) {
			t.Errorf("Claims(%q) = %v, want ErrInvalidConfig", w, err)
		}
	}
}

// testDecisionRace (R35 at the store): 32 goroutines approve and 32
// reject each of 50 approvals at once. Each approval gets exactly one
// winner, the store holds it, and every loser is told that winner.
func testDecisionRace(t *testing.T, open Factory) {
	const approvals, resolvers = 50, 64
	ctx := context.Background()
	clock := newClock()
	s, _ := openStore(t, open, clock.Now)
	schema := refundSchema(t)
	items := make([]approval.Item, approvals)
	for i := range items {
		items[i] = newItem(t, schema, clock.Now(), fmt.Sprintf("race-%02d", i))
	}
	var (
		mu      sync.Mutex
		winners = map[string][]string{}
		told    = map[string][]approval.Decision{}
		other   []error
		wg      sync.WaitGroup
		gate    = make(chan struct{})
	)
	for g := range resolvers {
		wg.Go(func() {
			<-gate
			for i, it := range items {
				v := approval.Verdict{Outcome: approval.Approved, Reviewer: fmt.Sprintf("approver-%02d", g)}
				if (g+i)%2 == 1 {
					v = approval.Verdict{Outcome: approval.Rejected, Reviewer: fmt.Sprintf("rejecter-%02d", g)}
				}
				_, err := s.Decide(ctx, it, v)
				var lost *approval.AlreadyDecidedError
				mu.Lock()
				switch {
				case err == nil:
					winners[it.ID] = append(winners[it.ID], v.Reviewer)
				case errors.As(err, &lost):
					told[it.ID] = append(told[it.ID], lost.Winner)
				default:
					other = append(other, err)
				}
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d errors other than a lost race, first: %v", len(other), other[0])
	}
	for _, it := range items {
		if len(winners[it.ID]) != 1 {
			t.Fatalf("approval %s has %d winners: %v", it.ID, len(winners[it.ID]), winners[it.ID])
		}
		rec, err := s.Get(ctx, it.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Decision.Reviewer != winners[it.ID][0] || len(told[it.ID]) != resolvers-1 {
			t.Errorf("approval %s: stored %s, winner %s, %d losers", it.ID, rec.Decision.Reviewer, winners[it.ID][0], len(told[it.ID]))
		}
		for _, w := range told[it.ID] {
			if diff := cmp.Diff(rec.Decision, w, sameJSON); diff != "" {
				t.Fatalf("approval %s: a loser was told another winner (-stored +told):\n%s", it.ID, diff)
			}
		}
	}
}

// sameJSON compares JSON by value: key order and spacing aside (a store
// on PostgreSQL's JSONB keeps neither).
var sameJSON = cmp.Comparer(func(a, b json.RawMessage) bool {
	if string(a) == string(b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
})
