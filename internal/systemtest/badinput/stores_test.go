package badinput_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The bad-input pass over the rows of the approval store and the ledger
// (issue 16, item 3): rows edited by hand and re-checksummed by someone
// who knows the format (the approval and ledger package docs describe
// it), and rows copied under another approval ID or idempotency key with
// the checksum they had. Each is a typed corrupt error naming the
// approval or the key from every reader, no call runs or replays because
// of it, and nothing is written.

// docSum is a row's checksum as the approval and ledger package docs
// describe it: the CRC-32C of the domain and the columns, a TEXT as 'b',
// its length as an unsigned varint and its bytes, an INTEGER as 'i' and
// eight bytes big-endian, a NULL as 'n'.
func docSum(domain string, cols ...any) int64 {
	var c uint32
	text := func(s string) {
		c = crc32.Update(c, crcTable, []byte{'b'})
		c = crc32.Update(c, crcTable, binary.AppendUvarint(nil, uint64(len(s))))
		c = crc32.Update(c, crcTable, []byte(s))
	}
	text(domain)
	for _, v := range cols {
		switch v := v.(type) {
		case nil:
			c = crc32.Update(c, crcTable, []byte{'n'})
		case string:
			text(v)
		case int64:
			c = crc32.Update(c, crcTable, binary.BigEndian.AppendUint64([]byte{'i'}, uint64(v)))
		default:
			panic(fmt.Sprintf("docSum: %T", v))
		}
	}
	return int64(c)
}

// nullable is a column that may be NULL, for docSum.
func nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

func nullableInt(n sql.NullInt64) any {
	if !n.Valid {
		return nil
	}
	return n.Int64
}

// storesRechecksum recomputes the checksums of every row of the approval
// tables and of the ledger, as the package docs define them.
func storesRechecksum(ctx context.Context, db *sql.DB) error {
	type fix struct {
		query string
		args  []any
	}
	var fixes []fix
	rows, err := db.QueryContext(ctx, `SELECT id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
		resumed_at, resume_note, resume_attempts, resume_error, resume_not_before FROM approval_decisions`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, thread, cp, tool, owner, outcome, reviewer, note, hash, at, req, rnote, rerr, rnb string
		var args, resumed sql.NullString
		var attempts int64
		if err := rows.Scan(&id, &thread, &cp, &tool, &owner, &outcome, &reviewer, &note, &args, &hash, &at, &req, &resumed, &rnote, &attempts, &rerr, &rnb); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{`UPDATE approval_decisions SET crc = ?, resume_crc = ? WHERE id = ?`, []any{
			docSum("lockstep/approval/decision/v1", id, thread, cp, tool, owner, outcome, reviewer, note, nullable(args), hash, at, req),
			docSum("lockstep/approval/resume/v1", id, nullable(resumed), rnote, attempts, rerr, rnb), id}})
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id FROM lockstep_ledger`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var key, tool, hash, state, owner, thread, run string
		var result, failure sql.NullString
		var lease, created int64
		var completed sql.NullInt64
		if err := rows.Scan(&key, &tool, &hash, &state, &result, &failure, &owner, &lease, &created, &completed, &thread, &run); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{`UPDATE lockstep_ledger SET crc = ? WHERE key = ?`, []any{
			docSum("lockstep/ledger/record/v1", key, tool, hash, state, nullable(result), nullable(failure), owner, lease, created, nullableInt(completed), thread, run), key}})
	}
	rows.Close()
	for _, f := range fixes {
		if _, err := db.ExecContext(ctx, f.query, f.args...); err != nil {
			return err
		}
	}
	return nil
}

// approvalEdit is the edit of a case on the approval of thread
// "pay-wait" (?1 in query). With twin, a decision on another approval,
// "twin", for the very same pay call (tool and arguments, in a thread
// "pay-twin"), is recorded first and its row is ?2 (the edit copies it
// with its checksum); without, the pending approval is approved by alice
// and its own row edited, then the checksums recomputed.
func approvalEdit(query string, twin bool) func(ctx context.Context, f *badFixture) error {
	return func(ctx context.Context, f *badFixture) error {
		if twin {
			it, err := f.app.Inbox.Get(ctx, f.approval)
			if err != nil {
				return err
			}
			it.ID, it.Thread, it.Checkpoint = "twin", "pay-twin", "twin-checkpoint"
			if _, err := f.app.Store.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Note: "refund it"}); err != nil {
				return err
			}
		} else if _, err := f.app.Inbox.Approve(ctx, f.approval, "alice", "refund it"); err != nil {
			return err
		}
		res, err := f.db.ExecContext(ctx, query, f.approval, "twin")
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errors.New("the edit changed nothing")
		}
		if !twin {
			return storesRechecksum(ctx, f.db)
		}
		return nil
	}
}

// paidFor returns how many calls of pay the provider saw for thread.
func paidFor(ctx context.Context, f *badFixture, thread string) (int, error) {
	var n sql.NullInt64
	err := f.app.Provider.DB.QueryRowContext(ctx, `SELECT sum(calls) FROM payments WHERE thread = ?`, thread).Scan(&n)
	return int(n.Int64), err
}

// TestBadInputCorruptApprovalRows: a decision copied onto the waiting
// approval of thread "pay-wait" from an approval of the very same call
// (tool and arguments) would otherwise approve a payment nobody reviewed:
// the worker would resume "pay-wait" with it and pay. A decision of
// "pay-wait" whose request snapshot has a case-variant or an injected
// key, that was recorded after its request expired, or that carries
// arguments an approval never does, all re-checksummed, would otherwise
// be read as valid decisions, and the worker would pay. Each is an
// *approval.CorruptError naming the approval, from the worker, the inbox
// and the store; nothing is paid or written.
func TestBadInputCorruptApprovalRows(t *testing.T) {
	edits := []struct {
		name, sql string
		twin      bool
	}{
		{"decision copied onto the waiting approval of the same call", `INSERT INTO approval_decisions (id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
			resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc)
			SELECT ?1, 'pay-wait', checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
			resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc FROM approval_decisions WHERE id = ?2`, true},
		{"request snapshot with a case-variant key", `UPDATE approval_decisions SET request = replace(request, '"tool":', '"Tool":') WHERE id = ?1`, false},
		{"request snapshot with an injected key", `UPDATE approval_decisions SET request = replace(request, '{"type":', '{"__type":"os/exec.Cmd","type":') WHERE id = ?1`, false},
		{"approved after the request expired", `UPDATE approval_decisions SET decided_at = '2999-01-01T00:00:00.000000000Z' WHERE id = ?1`, false},
		{"approval carrying edited arguments", `UPDATE approval_decisions SET args = '{"amount":1,"order":"O-x"}' WHERE id = ?1`, false},
	}
	ops := []struct {
		name string
		call func(ctx context.Context, f *badFixture) error
	}{
		{"Worker", func(ctx context.Context, f *badFixture) error {
			_, err := f.app.Worker.RunOnce(ctx)
			if n, perr := paidFor(ctx, f, "pay-wait"); perr != nil || n != 0 {
				return fmt.Errorf("thread pay-wait paid %d times (%v); worker: %v", n, perr, err)
			}
			return err
		}},
		{"Inbox List", func(ctx context.Context, f *badFixture) error {
			_, err := f.app.Inbox.List(ctx, approval.Filter{})
			return err
		}},
		{"Inbox Get", func(ctx context.Context, f *badFixture) error {
			_, err := f.app.Inbox.Get(ctx, f.approval)
			return err
		}},
		{"Store Audit", func(ctx context.Context, f *badFixture) error {
			_, err := f.app.Store.Audit(ctx, f.approval)
			return err
		}},
	}
	var cases []badCase
	for _, e := range edits {
		for _, op := range ops {
			var cur *badFixture
			setup := approvalEdit(e.sql, e.twin)
			cases = append(cases, badCase{name: e.name + "/" + op.name,
				setup: func(ctx context.Context, f *badFixture) error { cur = f; return setup(ctx, f) },
				call:  op.call,
				check: asErr(func(e *approval.CorruptError) string {
					if e.ID != cur.approval || !errors.Is(e, approval.ErrCorrupt) {
						return fmt.Sprintf("%+v: want approval %q", e, cur.approval)
					}
					return ""
				})})
		}
	}
	runBadCases(t, cases)
}

// TestBadInputCorruptLedgerRows: a done record whose result was copied
// from another call's record would otherwise be replayed as this call's
// result, and a record copied, with its checksum, under another call's key
// would be taken for that call's; a result with a duplicate key or a lone
// surrogate escape, re-checksummed, would be replayed as it is. Each is a
// *nodes.LedgerError wrapping a *ledger.CorruptError naming the key, the
// tool does not run, and nothing is written.
func TestBadInputCorruptLedgerRows(t *testing.T) {
	call := func(order string) nodes.Call {
		return nodes.Call{Tool: "pay", Args: json.RawMessage(fmt.Sprintf(`{"order":%q,"amount":5}`, order)), Scope: "t"}
	}
	keyOf := func(order string) string {
		c, err := canon.JSON(call(order).Args)
		if err != nil {
			panic(err)
		}
		return nodes.IdempotencyKey("t", "pay", c)
	}
	run := func(orders ...string) func(ctx context.Context, f *badFixture) error {
		return func(ctx context.Context, f *badFixture) error {
			for _, o := range orders {
				if _, err := f.ex.Execute(ctx, call(o)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	edit := func(before func(ctx context.Context, f *badFixture) error, query string, fix bool) func(ctx context.Context, f *badFixture) error {
		return func(ctx context.Context, f *badFixture) error {
			if err := before(ctx, f); err != nil {
				return err
			}
			res, err := f.db.ExecContext(ctx, query, keyOf("A"), keyOf("B"))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return errors.New("the edit changed nothing")
			}
			*f.payCalls = 0
			if fix {
				return storesRechecksum(ctx, f.db)
			}
			return nil
		}
	}
	payB := func(ctx context.Context, f *badFixture) error {
		res, err := f.ex.Execute(ctx, call("B"))
		if *f.payCalls != 0 || err == nil {
			return fmt.Errorf("pay B ran %d times or replayed %s (%v)", *f.payCalls, res.Output, err)
		}
		return err
	}
	corruptKey := asErr(func(e *ledger.CorruptError) string {
		if e.Key != keyOf("B") || !errors.Is(e, ledger.ErrCorrupt) {
			return fmt.Sprintf("%+v: want key %q", e, keyOf("B"))
		}
		return ""
	})
	check := func(err error) string {
		if !errors.Is(err, nodes.ErrLedger) {
			return "want an error matching nodes.ErrLedger"
		}
		return corruptKey(err)
	}
	runBadCases(t, []badCase{
		{name: "result copied from another call's record", setup: edit(run("A", "B"),
			`UPDATE lockstep_ledger SET result = (SELECT result FROM lockstep_ledger WHERE key = ?1) WHERE key = ?2`, false), call: payB, check: check},
		{name: "record copied under another call's key", setup: edit(run("A"),
			`INSERT INTO lockstep_ledger (key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc)
			SELECT ?2, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc FROM lockstep_ledger WHERE key = ?1`, false),
			call: payB, check: check},
		{name: "result with a duplicate key", setup: edit(run("B"),
			`UPDATE lockstep_ledger SET result = replace(result, '{"id":', '{"id":"pay_forged","id":') WHERE key = ?2 AND ?1 <> ''`, true), call: payB, check: check},
		{name: "result with a lone surrogate escape", setup: edit(run("B"),
			`UPDATE lockstep_ledger SET result = replace(result, '"order":"B"', '"order":"\ud800"') WHERE key = ?2 AND ?1 <> ''`, true), call: payB, check: check},
	})
}
