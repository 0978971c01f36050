package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
)

// TestDecideFirstWins: the second decision on an approval fails with an
// *AlreadyDecidedError that names the winner, and the record keeps the
// winner (G5, R35 at its smallest).
func TestDecideFirstWins(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, _ := k.open(t, clock.Now)
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
			if diff := cmp.Diff(wantRec, rec); diff != "" {
				t.Errorf("stored record (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStoreKeepsTraceParent: every store keeps a request's traceparent
// with the decision, for the worker's resume to link to (in any process).
func TestStoreKeepsTraceParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, _ := k.open(t, clock.Now)
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
		})
	}
}

// TestDecideEdit: an edit runs the reviewer's arguments, canonical, and the
// decision's hash covers them, not the original ones.
func TestDecideEdit(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, _ := k.open(t, clock.Now)
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
		})
	}
}

// TestDecideInvalid (R38): invalid operations fail with typed errors and
// change nothing: the tables (SQL) or the audits (memory) are the same
// before and after, and messages carry neither the note nor the arguments.
func TestDecideInvalid(t *testing.T) {
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
		{"arguments changed after hashing", tampered, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidRequest},
		{"not an approval request", func(it approval.Item) approval.Item { it.Request.Type = "question"; return it }, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidRequest},
		{"zero expiry", withExpiry(epoch, time.Time{}), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
		{"expiry before creation", withExpiry(epoch, epoch.Add(-time.Second)), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
		{"expiry in year 9999", withExpiry(epoch, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}, approval.ErrInvalidExpiry},
	}
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, dump := k.open(t, clock.Now)
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
		})
	}
}

// TestRecordOutcomeNotApproved: nothing can be recorded as having run for
// a rejected call.
func TestRecordOutcomeNotApproved(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, _ := k.open(t, clock.Now)
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
		})
	}
}

// TestExpiryBoundary (R36 b, c, e) with an injected clock: one tick before
// the deadline an approval works; at the deadline the first verdict to
// arrive, whatever it says, fails with ErrExpired and records the expiry
// (by ExpiryReviewer, at the time it arrived); every later one, 1 ns after
// or with the clock moved back an hour, is told the expiry won and changes
// nothing.
func TestExpiryBoundary(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, dump := k.open(t, clock.Now)
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
		})
	}
}

// TestValidateRequest: the checks the tool node runs before pausing.
func TestValidateRequest(t *testing.T) {
	good := newRequest(t, refundSchema(t), epoch, "o1", 40)
	tests := []struct {
		name   string
		change func(*approval.Request)
		want   error
	}{
		{"valid", func(*approval.Request) {}, nil},
		{"wrong type", func(r *approval.Request) { r.Type = "other" }, approval.ErrInvalidRequest},
		{"no tool", func(r *approval.Request) { r.Tool = "" }, approval.ErrInvalidRequest},
		{"unknown risk", func(r *approval.Request) { r.Risk = "HIGH" }, approval.ErrInvalidRequest},
		{"hash of other arguments", func(r *approval.Request) { r.ArgsHash = "00" }, approval.ErrInvalidRequest},
		{"arguments not JSON", func(r *approval.Request) { r.Args = json.RawMessage(`{`) }, approval.ErrInvalidRequest},
		{"zero created", func(r *approval.Request) { r.CreatedAt = time.Time{} }, approval.ErrInvalidExpiry},
		{"zero expiry", func(r *approval.Request) { r.ExpiresAt = time.Time{} }, approval.ErrInvalidExpiry},
		{"expiry in the past", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt.Add(-time.Minute) }, approval.ErrInvalidExpiry},
		{"expiry at creation", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt }, approval.ErrInvalidExpiry},
		{"expiry in 9999", func(r *approval.Request) { r.ExpiresAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) }, approval.ErrInvalidExpiry},
		{"just under MaxTTL", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt.Add(approval.MaxTTL) }, nil},
		{"kind gate", func(r *approval.Request) { r.Kind = approval.KindGate }, nil},
		{"kind fallback", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindFallback, "create_issue" }, nil},
		{"kind outcome unknown of a fallback", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindOutcomeUnknown, "create_issue" }, nil},
		{"unknown kind", func(r *approval.Request) { r.Kind = "Gate" }, approval.ErrInvalidRequest},
		{"fallback without fallback_for", func(r *approval.Request) { r.Kind = approval.KindFallback }, approval.ErrInvalidRequest},
		{"fallback_for on a gate", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindGate, "create_issue" }, approval.ErrInvalidRequest},
		{"fallback_for without a kind", func(r *approval.Request) { r.FallbackFor = "create_issue" }, approval.ErrInvalidRequest},
		{"traceparent", func(r *approval.Request) { r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }, nil},
		{"traceparent upper case", func(r *approval.Request) { r.TraceParent = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01" }, approval.ErrInvalidRequest},
		{"traceparent of zeros", func(r *approval.Request) { r.TraceParent = "00-00000000000000000000000000000000-00f067aa0ba902b7-01" }, approval.ErrInvalidRequest},
		{"traceparent of version 01", func(r *approval.Request) { r.TraceParent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }, approval.ErrInvalidRequest},
		{"traceparent cut", func(r *approval.Request) { r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" }, approval.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.change(&r)
			err := r.Validate()
			if tc.want == nil && err != nil || !errors.Is(err, tc.want) {
				t.Fatalf("Validate: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestSQLStoreSchema: opening twice is a no-op, a newer schema is refused,
// and the stock sqlite3 shell reads the tables (JSON in TEXT columns).
func TestSQLStoreSchema(t *testing.T) {
	ctx := context.Background()
	db, path := tempDB(t)
	clock := newClock()
	s := openSQLStore(t, db, clock.Now)
	it := newItem(t, refundSchema(t), clock.Now(), "s1")
	if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Rejected, Reviewer: "carol", Note: "too much"}); err != nil {
		t.Fatal(err)
	}
	before := dumpTables(t, db)
	openSQLStore(t, db, clock.Now)
	if diff := cmp.Diff(before, dumpTables(t, db)); diff != "" {
		t.Errorf("reopening changed the tables:\n%s", diff)
	}
	if _, err := db.Exec(`INSERT INTO approval_schema (version) VALUES (?)`, approval.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.OpenSQLStore(ctx, db, nil); !errors.Is(err, approval.ErrSchemaVersion) {
		t.Errorf("open with a newer schema: %v, want ErrSchemaVersion", err)
	}

	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("no sqlite3 shell")
	}
	out, err := exec.Command(shell, path, `SELECT id, outcome, reviewer, note, json_extract(request, '$.tool'), json_extract(request, '$.args.amount'), decided_at FROM approval_decisions`).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	}
	want := "s1|rejected|carol|too much|refund|40|2026-03-02T09:00:00.000000000Z\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("sqlite3 output (-want +got):\n%s", diff)
	}
}

// TestOpenSQLStoreWaitsForNoWriter: opening a store whose tables are
// current writes nothing, so it does not wait for another connection's
// write transaction (the CLI listing approvals while the application
// writes).
func TestOpenSQLStoreWaitsForNoWriter(t *testing.T) {
	db, path := tempDB(t)
	if _, err := approval.OpenSQLStore(context.Background(), db, nil); err != nil {
		t.Fatal(err)
	}
	writer := openDB(t, path)
	tx, err := writer.BeginTx(context.Background(), nil) // IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := approval.OpenSQLStore(ctx, db, nil); err != nil {
		t.Fatalf("open while a writer holds the lock: %v (after %v)", err, time.Since(start))
	}
}

// TestEditReportsEveryProblem (issue 17): an edit that fails the tool's
// schema in several places is refused with every problem at its path, in
// path order (Error.Problems), the first few named in the message, and
// nothing is recorded. Before, only the first problem was reported.
func TestEditReportsEveryProblem(t *testing.T) {
	schema := refundSchema(t)
	args := json.RawMessage(`{"amount":"forty","note":1,"to":"x","zz":2}`) // order missing
	want := []approval.ArgsProblem{
		{Path: "$.amount", Reason: "want an integer, got a string"},
		{Path: "$.note", Reason: "unknown field"},
		{Path: "$.order", Reason: "required field is missing"},
		{Path: "$.to", Reason: "unknown field"},
		{Path: "$.zz", Reason: "unknown field"},
	}
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, dump := k.open(t, clock.Now)
			it := newItem(t, schema, clock.Now(), "p1")
			before := dump("p1")
			_, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: args})
			var ae *approval.Error
			if !errors.Is(err, approval.ErrInvalidArgs) || !errors.As(err, &ae) {
				t.Fatalf("Decide: %v, want an *approval.Error matching ErrInvalidArgs", err)
			}
			if d := cmp.Diff(want, ae.Problems); d != "" {
				t.Errorf("Problems (-want +got):\n%s", d)
			}
			for _, p := range want[:3] {
				if !strings.Contains(err.Error(), p.Path+": "+p.Reason) {
					t.Errorf("the message does not name %s: %v", p.Path, err)
				}
			}
			if !strings.Contains(err.Error(), "and 2 more") {
				t.Errorf("the message does not count the others: %v", err)
			}
			if d := cmp.Diff(before, dump("p1")); d != "" {
				t.Errorf("state changed (-before +after):\n%s", d)
			}
		})
	}
}
