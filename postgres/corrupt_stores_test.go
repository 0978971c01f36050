package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// approvalItem is a pending approval of a refund, as the inbox lists it.
func approvalItem(t *testing.T, id string, now time.Time) approval.Item {
	t.Helper()
	args := json.RawMessage(`{"amount":40,"order":"order-` + id + `"}`)
	h, err := approval.ArgsHash("refund", args)
	if err != nil {
		t.Fatal(err)
	}
	return approval.Item{ID: id, Thread: "thread-" + id, Checkpoint: "cp-" + id, TaskID: "task-" + id, Node: "refund", PausedAt: now,
		Request: approval.Request{Type: approval.RequestType, Tool: "refund", Args: args, ArgsHash: h, CallID: "call-" + id,
			Rationale: "the parcel never arrived", Risk: approval.RiskHigh, Owner: "payments", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}}
}

// TestHandEditedApprovalRowsAreCorrupt: an approval row changed by hand in
// psql, or copied under another approval ID (its checksum with it), is an
// *approval.CorruptError naming the approval from every read and every
// write on it, and nothing is written on it.
func TestHandEditedApprovalRowsAreCorrupt(t *testing.T) {
	clock := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	db := openTest(t, Config{Now: func() time.Time { return clock }})
	store := db.Approvals()
	ctx := context.Background()
	q := pgx.Identifier{db.Schema()}.Sanitize()
	cases := []struct {
		name string
		what string // the CorruptError's What
		sql  string // $1 the approval edited, $2 another one, decided and resumed
	}{
		{"an outcome edited", "decision", `UPDATE ` + q + `.approval_decisions SET outcome = 'rejected' WHERE id = $1`},
		{"the request snapshot edited", "decision", `UPDATE ` + q + `.approval_decisions SET request = jsonb_set(request, '{rationale}', '"x"') WHERE id = $1`},
		{"a decision copied from another approval", "decision", `UPDATE ` + q + `.approval_decisions d SET thread = o.thread, checkpoint = o.checkpoint,
			request = o.request, args_hash = o.args_hash, crc = o.crc FROM ` + q + `.approval_decisions o WHERE d.id = $1 AND o.id = $2`},
		{"resume progress copied from another approval", "resume", `UPDATE ` + q + `.approval_decisions d SET resumed_at = o.resumed_at,
			resume_note = o.resume_note, resume_crc = o.resume_crc FROM ` + q + `.approval_decisions o WHERE d.id = $1 AND o.id = $2`},
		{"attempts edited", "resume", `UPDATE ` + q + `.approval_decisions SET resume_attempts = 7 WHERE id = $1`},
		{"a claim's holder written by hand", "resume", `UPDATE ` + q + `.approval_decisions SET resume_claimant = 'mallory', resume_claim = 'c-1', resume_not_before = '2099-01-01T00:00:00.000000000Z' WHERE id = $1`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, other := "a-"+string(rune('a'+i)), "b-"+string(rune('a'+i))
			for _, x := range []string{id, other} {
				if _, err := store.Decide(ctx, approvalItem(t, x, clock), approval.Verdict{Outcome: approval.Approved, Reviewer: "ada"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.FinishResume(ctx, other, "resumed"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool().Exec(ctx, tc.sql, sqlArgs(tc.sql, id, other)...); err != nil {
				t.Fatal(err)
			}
			before := rowText(t, db, `SELECT d::text FROM `+q+`.approval_decisions d WHERE id = $1`, id)
			want := func(op string, err error) {
				t.Helper()
				var ce *approval.CorruptError
				if !errors.As(err, &ce) || ce.ID != id || ce.What != tc.what || !errors.Is(err, approval.ErrCorrupt) {
					t.Errorf("%s: %v, want an *approval.CorruptError of approval %s, %s", op, err, id, tc.what)
				}
			}
			_, err := store.Get(ctx, id)
			want("Get", err)
			_, err = store.Audit(ctx, id)
			want("Audit", err)
			if (tc.what != "resume" || !strings.Contains(tc.sql, "resumed_at")) && tc.name != "a claim's holder written by hand" {
				// (a row whose copied progress says resumed, or that a
				// live claim holds, is not listed)
				_, err = store.Unresumed(ctx, 0)
				want("Unresumed", err)
			}
			_, err = store.Decide(ctx, approvalItem(t, id, clock), approval.Verdict{Outcome: approval.Rejected, Reviewer: "eve"})
			want("Decide", err)
			_, err = store.ClaimResume(ctx, id, time.Minute)
			want("ClaimResume", err)
			_, err = store.ClaimResumeAs(ctx, id, approval.Claim{Worker: "mallory", ID: "c-2", Lease: time.Minute, TakeBack: "c-1"})
			want("ClaimResumeAs", err)
			if tc.name == "a claim's holder written by hand" {
				_, err = store.Claims(ctx, "mallory", 0)
				want("Claims", err)
			}
			want("RetryResume", store.RetryResume(ctx, id, "later", time.Minute))
			want("FinishResume", store.FinishResume(ctx, id, "done"))
			want("RecordOutcome", store.RecordOutcome(ctx, id, approval.Execution{IdempotencyKey: "k", ArgsHash: approvalItem(t, id, clock).Request.ArgsHash}))
			if after := rowText(t, db, `SELECT d::text FROM `+q+`.approval_decisions d WHERE id = $1`, id); after != before {
				t.Errorf("a write changed the corrupt row:\n before %s\n after  %s", before, after)
			}
			if _, err := db.Pool().Exec(ctx, `DELETE FROM `+q+`.approval_decisions WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Unresumed(ctx, 0); err != nil {
				t.Errorf("Unresumed without the corrupt row: %v", err)
			}
		})
	}
	t.Run("an outcome edited", func(t *testing.T) {
		id := "exec-1"
		item := approvalItem(t, id, clock)
		if _, err := store.Decide(ctx, item, approval.Verdict{Outcome: approval.Approved, Reviewer: "ada"}); err != nil {
			t.Fatal(err)
		}
		if err := store.RecordOutcome(ctx, id, approval.Execution{IdempotencyKey: "k-1", ArgsHash: item.Request.ArgsHash, Result: json.RawMessage(`{"refund":"r-1"}`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool().Exec(ctx, `UPDATE `+q+`.approval_executions SET result = '{"refund": "r-2"}' WHERE approval_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		_, err := store.Audit(ctx, id)
		var ce *approval.CorruptError
		if !errors.As(err, &ce) || ce.ID != id || ce.What != "execution" {
			t.Errorf("Audit: %v, want an *approval.CorruptError of the execution of %s", err, id)
		}
	})
}

// sqlArgs is args cut to the parameters query uses ($1, or $1 and $2).
func sqlArgs(query string, args ...any) []any {
	if !strings.Contains(query, "$2") {
		return args[:1]
	}
	return args
}

// rowText returns the one text value query selects with args.
func rowText(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	var s string
	if err := db.Pool().QueryRow(context.Background(), query, args...).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHandEditedLedgerRowsAreCorrupt: a ledger record or message claim
// changed by hand, or copied under another key (its checksum with it), is
// a *ledger.CorruptError naming the key from every read and write on it,
// nothing is written on it (Prune deletes nothing), and Forget still
// deletes it.
func TestHandEditedLedgerRowsAreCorrupt(t *testing.T) {
	clock := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	db := openTest(t, Config{Now: func() time.Time { return clock }})
	l := db.Ledger()
	ctx := context.Background()
	q := pgx.Identifier{db.Schema()}.Sanitize()
	done := func(key string, result string) {
		t.Helper()
		if _, _, err := l.Begin(ctx, ledger.Intent{Key: key, Tool: "charge", ArgsHash: "h-" + key, Owner: "run-1", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := l.Complete(ctx, key, "run-1", ledger.Outcome{Result: json.RawMessage(result)}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, sql string // $1 the key edited, $2 another done key
		pending   bool   // the record edited is a pending intent
	}{
		{name: "a result edited", sql: `UPDATE ` + q + `.ledger SET result = '{"charge": "c-999"}' WHERE key = $1`},
		{name: "a record copied from another key", sql: `UPDATE ` + q + `.ledger d SET tool = o.tool, args_hash = o.args_hash, result = o.result,
			created_at = o.created_at, completed_at = o.completed_at, crc = o.crc FROM ` + q + `.ledger o WHERE d.key = $1 AND o.key = $2`},
		{name: "a pending intent's owner edited", pending: true, sql: `UPDATE ` + q + `.ledger SET owner = 'run-2' WHERE key = $1`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, other := "k-"+string(rune('a'+i)), "o-"+string(rune('a'+i))
			if tc.pending {
				if _, _, err := l.Begin(ctx, ledger.Intent{Key: key, Tool: "charge", ArgsHash: "h-" + key, Owner: "run-1", Lease: time.Minute}); err != nil {
					t.Fatal(err)
				}
			} else {
				done(key, `{"charge":"c-1"}`)
			}
			done(other, `{"charge":"c-2"}`)
			if _, err := db.Pool().Exec(ctx, tc.sql, sqlArgs(tc.sql, key, other)...); err != nil {
				t.Fatal(err)
			}
			before := rowText(t, db, `SELECT d::text FROM `+q+`.ledger d WHERE key = $1`, key)
			want := func(op string, err error) {
				t.Helper()
				var ce *ledger.CorruptError
				if !errors.As(err, &ce) || ce.Key != key || !errors.Is(err, ledger.ErrCorrupt) {
					t.Errorf("%s: %v, want a *ledger.CorruptError of key %s", op, err, key)
				}
			}
			_, err := l.Get(ctx, key)
			want("Get", err)
			_, _, err = l.Begin(ctx, ledger.Intent{Key: key, Tool: "charge", ArgsHash: "h-" + key, Owner: "run-3", Lease: time.Minute})
			want("Begin", err)
			want("Complete", l.Complete(ctx, key, "run-2", ledger.Outcome{Result: json.RawMessage(`{}`)}))
			want("Release", l.Release(ctx, key, "run-2"))
			want("Resolve", l.Resolve(ctx, key, ledger.Outcome{Result: json.RawMessage(`{}`)}))
			if after := rowText(t, db, `SELECT d::text FROM `+q+`.ledger d WHERE key = $1`, key); after != before {
				t.Errorf("a write changed the corrupt row:\n before %s\n after  %s", before, after)
			}
			if err := l.Forget(ctx, key); err != nil {
				t.Errorf("Forget: %v", err)
			}
			if _, err := l.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("Get after Forget: %v, want ErrNotFound", err)
			}
		})
	}
	t.Run("Prune deletes nothing past a corrupt record", func(t *testing.T) {
		done("p-1", `{"charge":"c-1"}`)
		done("p-2", `{"charge":"c-2"}`)
		if _, err := db.Pool().Exec(ctx, `UPDATE `+q+`.ledger SET result = '{"charge": "c-9"}' WHERE key = 'p-1'`); err != nil {
			t.Fatal(err)
		}
		old, err := l.WithOptions(ledger.Options{Retention: time.Minute, Now: func() time.Time { return clock.Add(time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = old.Prune(ctx)
		var ce *ledger.CorruptError
		if !errors.As(err, &ce) || ce.Key != "p-1" {
			t.Errorf("Prune: %v, want a *ledger.CorruptError of key p-1", err)
		}
		if _, err := l.Get(ctx, "p-2"); err != nil {
			t.Errorf("Get(p-2) after the refused Prune: %v, want the record kept", err)
		}
	})
	t.Run("a message claim copied under another ID", func(t *testing.T) {
		if err := l.ClaimMessage(ctx, ledger.Claim{Scope: "webhooks", ID: "m-1", Fingerprint: "f-1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool().Exec(ctx, `INSERT INTO `+q+`.messages (scope, id, fingerprint, claimed_at, crc)
			SELECT scope, 'm-2', fingerprint, claimed_at, crc FROM `+q+`.messages WHERE id = 'm-1'`); err != nil {
			t.Fatal(err)
		}
		err := l.ClaimMessage(ctx, ledger.Claim{Scope: "webhooks", ID: "m-2", Fingerprint: "f-1"})
		var ce *ledger.CorruptError
		if !errors.As(err, &ce) || ce.Key != "m-2" || ce.Scope != "webhooks" {
			t.Errorf("ClaimMessage(m-2): %v, want a *ledger.CorruptError of message m-2", err)
		}
		if err := l.ClaimMessage(ctx, ledger.Claim{Scope: "webhooks", ID: "m-1", Fingerprint: "f-1"}); !errors.Is(err, ledger.ErrDuplicateMessage) {
			t.Errorf("ClaimMessage(m-1) again: %v, want ErrDuplicateMessage", err)
		}
	})
}
