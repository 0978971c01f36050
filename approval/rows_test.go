package approval_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
)

// rowsFixture is a SQL store holding one approval of each kind a reader
// meets, for tests that edit their rows:
//
//   - "approved": approved, its outcome recorded;
//   - "twin": approved, the same call as "approved" (tool and arguments)
//     in another thread, its outcome not recorded;
//   - "pending-twin": the same call again, waiting and undecided;
//   - "edited", "rejected": decided so;
//   - "expired": expired by the sweeper;
//   - "resumed": approved, and its thread resumed.
type rowsFixture struct {
	db    *sql.DB
	store *approval.SQLStore
	clock *fakeClock
	items map[string]approval.Item
}

func newRowsFixture(t *testing.T) *rowsFixture {
	t.Helper()
	ctx := context.Background()
	db, _ := tempDB(t)
	clock := newClock()
	f := &rowsFixture{db: db, store: openSQLStore(t, db, clock.Now), clock: clock, items: map[string]approval.Item{}}
	schema := refundSchema(t)
	same := newRequest(t, schema, clock.Now(), "o-1", 40)
	for _, id := range []string{"approved", "twin", "pending-twin", "edited", "rejected", "expired", "resumed"} {
		it := newItem(t, schema, clock.Now(), id)
		if strings.HasSuffix(id, "twin") || id == "approved" {
			it.Request = same
		}
		f.items[id] = it
	}
	decide := func(id string, v approval.Verdict) approval.Decision {
		t.Helper()
		d, err := f.store.Decide(ctx, f.items[id], v)
		if err != nil {
			t.Fatalf("decide %s: %v", id, err)
		}
		return d
	}
	ok := decide("approved", approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Note: "looks fine"})
	decide("twin", approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
	decide("edited", approval.Verdict{Outcome: approval.Edited, Reviewer: "bob", Args: json.RawMessage(`{"order":"order-edited","amount":30}`)})
	decide("rejected", approval.Verdict{Outcome: approval.Rejected, Reviewer: "carol", Note: "too much"})
	decide("resumed", approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
	if err := f.store.RecordOutcome(ctx, "approved", approval.Execution{IdempotencyKey: "k-1", ArgsHash: ok.ArgsHash, Result: json.RawMessage(`{"refund_id":"r-1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.FinishResume(ctx, "resumed", "resumed"); err != nil {
		t.Fatal(err)
	}
	clock.Add(ttl)
	decide("expired", approval.Verdict{Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer, Note: "nobody decided"})
	clock.Add(-ttl + time.Minute)
	return f
}

func (f *rowsFixture) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := f.db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// storeOps are the calls of a Store that read an approval's rows before
// they write, by name. Each returns the error the store gave.
var storeOps = []struct {
	name string
	call func(ctx context.Context, f *rowsFixture, id string) error
}{
	{"Get", func(ctx context.Context, f *rowsFixture, id string) error { _, err := f.store.Get(ctx, id); return err }},
	{"Audit", func(ctx context.Context, f *rowsFixture, id string) error {
		_, err := f.store.Audit(ctx, id)
		return err
	}},
	{"Decided", func(ctx context.Context, f *rowsFixture, id string) error {
		_, err := f.store.Decided(ctx, []string{"rejected", id})
		return err
	}},
	{"Unresumed", func(ctx context.Context, f *rowsFixture, id string) error {
		_, err := f.store.Unresumed(ctx, 0)
		return err
	}},
	{"Decide", func(ctx context.Context, f *rowsFixture, id string) error {
		_, err := f.store.Decide(ctx, f.items[id], approval.Verdict{Outcome: approval.Approved, Reviewer: "mallory"})
		return err
	}},
	{"ClaimResume", func(ctx context.Context, f *rowsFixture, id string) error {
		_, err := f.store.ClaimResume(ctx, id, time.Minute)
		return err
	}},
	{"FinishResume", func(ctx context.Context, f *rowsFixture, id string) error {
		return f.store.FinishResume(ctx, id, "resumed")
	}},
	{"RetryResume", func(ctx context.Context, f *rowsFixture, id string) error {
		return f.store.RetryResume(ctx, id, "busy", time.Second)
	}},
	{"RecordOutcome", func(ctx context.Context, f *rowsFixture, id string) error {
		return f.store.RecordOutcome(ctx, id, approval.Execution{IdempotencyKey: "k-other", ArgsHash: f.items[id].Request.ArgsHash, Result: json.RawMessage(`{"refund_id":"r-9"}`)})
	}},
	{"Worker", func(ctx context.Context, f *rowsFixture, id string) error {
		var resumed atomic.Int32
		w, err := approval.NewWorker(f.store, func(context.Context, approval.Record) error { resumed.Add(1); return nil }, approval.WorkerOptions{})
		if err != nil {
			return err
		}
		_, err = w.RunOnce(ctx)
		if n := resumed.Load(); n != 0 {
			return fmt.Errorf("the worker resumed %d threads (%v)", n, err)
		}
		return err
	}},
}

// decisionOps are the calls that read a decision row; resumedOps those
// that read it once it is resumed (Unresumed and the worker no longer
// list it); executionOps those that read an outcome row.
var (
	decisionOps  = []string{"Get", "Audit", "Decided", "Unresumed", "Decide", "ClaimResume", "FinishResume", "RetryResume", "RecordOutcome", "Worker"}
	resumedOps   = []string{"Get", "Audit", "Decided", "Decide", "ClaimResume", "FinishResume", "RetryResume", "RecordOutcome"}
	executionOps = []string{"Audit", "RecordOutcome"}
)

// TestSQLStoreCorruptRows (issue 16, item 3): approval rows edited in the
// database are reported by every reader as a *approval.CorruptError naming
// the approval and the row, and nothing is written on them. The decoder
// cases recompute the checksums after the edit, so that only the strict
// decoding stands between the edit and the reader: a request snapshot
// holding null, a duplicate, case-variant or unknown key, invalid UTF-8 or
// a lone surrogate; columns that disagree with the snapshot or with each
// other (an approval recorded after its expiry, by the expiry reviewer,
// with arguments it does not take). The binding cases copy rows, with
// their checksums, from another approval: a decision copied onto a
// waiting approval of the same call would otherwise approve a call nobody
// reviewed (the worker resumes its thread with it), progress copied from
// a resumed approval would leave a thread waiting for ever, and an outcome
// copied from another approval would be another call's.
func TestSQLStoreCorruptRows(t *testing.T) {
	for _, tc := range []struct {
		name       string
		id         string // the approval whose row is corrupt
		edits      []string
		rechecksum bool // recompute every checksum after the edits
		what       string
		ops        []string
	}{
		// The request snapshot, decoded strictly.
		{name: "request null", id: "approved", edits: []string{`UPDATE approval_decisions SET request = 'null' WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with a duplicate key", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET request = replace(request, '"tool":"refund"', '"tool":"refund","tool":"refund"') WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with a case-variant key", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET request = replace(request, '"rationale":', '"Rationale":') WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with an injected key", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET request = replace(request, '{"type":', '{"__type":"os/exec.Cmd","type":') WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with invalid UTF-8", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET request = replace(request, 'parcel', 'par' || CAST(x'ff' AS TEXT) || 'cel') WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with a lone surrogate escape", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET request = replace(request, 'parcel', '\ud800parcel') WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "request with a null time", id: "rejected",
			edits:      []string{`UPDATE approval_decisions SET request = json_set(request, '$.expires_at', json('null')) WHERE id = 'rejected'`},
			rechecksum: true, what: "request", ops: decisionOps},
		{name: "tool column not the request's", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET tool = 'delete_account' WHERE id = 'approved'`},
			rechecksum: true, what: "request", ops: decisionOps},
		// The decision's columns, checked against the request and each other.
		{name: "approved after the request expired", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET decided_at = '2026-03-02T10:00:00.000000000Z' WHERE id = 'approved'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "approved by the expiry reviewer", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET reviewer = 'system:expiry' WHERE id = 'approved'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "an expiry recorded by a human", id: "expired",
			edits:      []string{`UPDATE approval_decisions SET reviewer = 'mallory' WHERE id = 'expired'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "an approval with edited arguments", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET args = '{"amount":500,"order":"order-approved"}' WHERE id = 'approved'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "edited arguments respelled", id: "edited",
			edits:      []string{`UPDATE approval_decisions SET args = replace(args, ':', ': ') WHERE id = 'edited'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "edited arguments with a duplicate key", id: "edited",
			edits:      []string{`UPDATE approval_decisions SET args = replace(args, '{', '{"amount":500,') WHERE id = 'edited'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "args_hash not the request's", id: "rejected",
			edits:      []string{`UPDATE approval_decisions SET args_hash = (SELECT args_hash FROM approval_decisions WHERE id = 'approved') WHERE id = 'rejected'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		{name: "decided_at respelled", id: "rejected",
			edits:      []string{`UPDATE approval_decisions SET decided_at = replace(decided_at, 'Z', '+00:00') WHERE id = 'rejected'`},
			rechecksum: true, what: "decision", ops: decisionOps},
		// The worker's progress.
		{name: "negative resume attempts", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET resume_attempts = -1 WHERE id = 'approved'`},
			rechecksum: true, what: "resume", ops: decisionOps},
		{name: "resumed_at not a time", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET resumed_at = 'yesterday' WHERE id = 'approved'`},
			rechecksum: true, what: "resume", ops: resumedOps},
		{name: "a finished resume with a next attempt", id: "resumed",
			edits:      []string{`UPDATE approval_decisions SET resume_not_before = '2026-03-02T09:00:00.000000000Z' WHERE id = 'resumed'`},
			rechecksum: true, what: "resume", ops: resumedOps},
		{name: "a claimant without a claim", id: "approved",
			edits:      []string{`UPDATE approval_decisions SET resume_claimant = 'w1', resume_not_before = '2026-03-02T09:00:00.000000000Z' WHERE id = 'approved'`},
			rechecksum: true, what: "resume", ops: decisionOps},
		{name: "a claimant on a finished resume", id: "resumed",
			edits:      []string{`UPDATE approval_decisions SET resume_claimant = 'w1', resume_claim = 'c1' WHERE id = 'resumed'`},
			rechecksum: true, what: "resume", ops: resumedOps},
		{name: "a claim holder damaged", id: "approved",
			edits: []string{`UPDATE approval_decisions SET resume_claimant = 'w1', resume_claim = 'c1', resume_not_before = '2026-03-02T09:00:00.000000000Z' WHERE id = 'approved'`},
			what:  "resume", ops: decisionOps},
		// The outcome row.
		{name: "result with a duplicate key", id: "approved",
			edits:      []string{`UPDATE approval_executions SET result = '{"refund_id":"r-1","refund_id":"r-2"}' WHERE approval_id = 'approved'`},
			rechecksum: true, what: "execution", ops: executionOps},
		{name: "result with a lone surrogate escape", id: "approved",
			edits:      []string{`UPDATE approval_executions SET result = '{"refund_id":"\udc00"}' WHERE approval_id = 'approved'`},
			rechecksum: true, what: "execution", ops: executionOps},
		{name: "result respelled", id: "approved",
			edits:      []string{`UPDATE approval_executions SET result = '{ "refund_id": "r-1" }' WHERE approval_id = 'approved'`},
			rechecksum: true, what: "execution", ops: executionOps},
		{name: "outcome args_hash not the decision's", id: "approved",
			edits:      []string{`UPDATE approval_executions SET args_hash = 'sha256:0000' WHERE approval_id = 'approved'`},
			rechecksum: true, what: "execution", ops: executionOps},
		// Rows copied from another approval, with their checksums, or damaged.
		{name: "decision copied onto a waiting approval of the same call", id: "pending-twin",
			edits: []string{`INSERT INTO approval_decisions (id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
				resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc)
				SELECT 'pending-twin', 'thread-pending-twin', 'cp-pending-twin', tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
				resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc FROM approval_decisions WHERE id = 'approved'`},
			what: "decision", ops: decisionOps},
		{name: "resume progress copied from a resumed approval", id: "approved",
			edits: []string{`UPDATE approval_decisions SET (resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, resume_crc) =
				(SELECT resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, resume_crc FROM approval_decisions WHERE id = 'resumed')
				WHERE id = 'approved'`},
			what: "resume", ops: resumedOps},
		{name: "outcome copied onto another approval of the same call", id: "twin",
			edits: []string{`INSERT INTO approval_executions (approval_id, idempotency_key, args_hash, result, error, recorded_at, crc)
				SELECT 'twin', idempotency_key, args_hash, result, error, recorded_at, crc FROM approval_executions WHERE approval_id = 'approved'`},
			what: "execution", ops: executionOps},
		{name: "a note damaged", id: "approved",
			edits: []string{`UPDATE approval_decisions SET note = 'looks fine!' WHERE id = 'approved'`},
			what:  "decision", ops: decisionOps},
		{name: "an outcome damaged", id: "approved",
			edits: []string{`UPDATE approval_executions SET error = 'x' WHERE approval_id = 'approved'`},
			what:  "execution", ops: executionOps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newRowsFixture(t)
			for _, q := range tc.edits {
				f.exec(t, q)
			}
			if tc.rechecksum {
				if err := approval.RechecksumRows(ctx, f.db); err != nil {
					t.Fatal(err)
				}
			}
			before := dumpTables(t, f.db)
			for _, op := range storeOps {
				if !contains(tc.ops, op.name) {
					continue
				}
				err := callNoPanic(t, func() error { return op.call(ctx, f, tc.id) })
				var ce *approval.CorruptError
				switch {
				case !errors.As(err, &ce):
					t.Errorf("%s: %v, want a *approval.CorruptError", op.name, err)
				case ce.ID != tc.id || ce.What != tc.what:
					t.Errorf("%s: corrupt %s of %q, want %s of %q (%v)", op.name, ce.What, ce.ID, tc.what, tc.id, err)
				case !errors.Is(err, approval.ErrCorrupt) || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), tc.id):
					t.Errorf("%s: %v does not match ErrCorrupt or does not name the approval and say corrupt", op.name, err)
				}
			}
			if diff := cmp.Diff(before, dumpTables(t, f.db)); diff != "" {
				t.Errorf("reading the corrupt row wrote (-before +after):\n%s", diff)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func callNoPanic(t *testing.T, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panic: %v", p)
		}
	}()
	return fn()
}

// TestSQLStoreRowsVerify: the rows a store writes all verify, through
// every change of a record's life (decided, claimed, retried, finished,
// its outcome recorded), and the checksums of TestSQLStoreCorruptRows's
// fixture are what RechecksumRows computes, so that its decoder cases
// test the decoding alone.
func TestSQLStoreRowsVerify(t *testing.T) {
	ctx := context.Background()
	f := newRowsFixture(t)
	if ok, err := f.store.ClaimResume(ctx, "twin", time.Minute); err != nil || !ok {
		t.Fatalf("ClaimResume = %v, %v", ok, err)
	}
	if err := f.store.RetryResume(ctx, "twin", "busy", 0); err != nil {
		t.Fatal(err)
	}
	before := dumpTables(t, f.db)
	if err := approval.RechecksumRows(ctx, f.db); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dumpTables(t, f.db)); diff != "" {
		t.Errorf("the stored checksums are not those of the rows (-stored +computed):\n%s", diff)
	}
	for id := range f.items {
		tr, err := f.store.Audit(ctx, id)
		switch {
		case id == "pending-twin":
			if !errors.Is(err, approval.ErrNotFound) {
				t.Errorf("Audit(%s) = %v, want ErrNotFound", id, err)
			}
		case err != nil:
			t.Errorf("Audit(%s): %v", id, err)
		case tr.Verify() != nil:
			t.Errorf("Audit(%s).Verify(): %v", id, tr.Verify())
		}
	}
	if _, err := f.store.Unresumed(ctx, 0); err != nil {
		t.Errorf("Unresumed: %v", err)
	}
}

// TestParseRequestStrict: an interrupt value that says it is an approval
// request but is not what json.Marshal writes for one is a malformed
// request (which the inbox never lists and the sweeper rejects), not a
// request read leniently into another one.
func TestParseRequestStrict(t *testing.T) {
	good := mustJSON(t, newRequest(t, nil, epoch, "o-1", 40))
	if _, ok, err := approval.ParseRequest(good); !ok || err != nil {
		t.Fatalf("ParseRequest(the request json.Marshal writes) = %v, %v", ok, err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"duplicate key", `"tool":"refund"`, `"tool":"refund","tool":"refund"`},
		{"case-variant key", `"tool":`, `"Tool":`},
		{"case-variant type key", `"type":`, `"TYPE":`},
		{"unknown key", `"tool":`, `"__type":"os/exec.Cmd","tool":`},
		{"null tool", `"tool":"refund"`, `"tool":null`},
		{"null time", `"expires_at":"2026-03-02T10:00:00Z"`, `"expires_at":null`},
		{"invalid UTF-8", `parcel`, "par\xffcel"},
		{"lone surrogate", `parcel`, `\ud800parcel`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := strings.Replace(string(good), tc.old, tc.new, 1)
			if v == string(good) {
				t.Fatalf("%q is not in %s", tc.old, good)
			}
			if _, ok, err := approval.ParseRequest(json.RawMessage(v)); !ok || err == nil {
				t.Errorf("ParseRequest(%s) = ok %v, err %v; want ok and an error", v, ok, err)
			}
		})
	}
	for _, v := range []string{`null`, `{"type":"other"}`, `[1]`, `"approval_request"`} {
		if _, ok, err := approval.ParseRequest(json.RawMessage(v)); ok || err != nil {
			t.Errorf("ParseRequest(%s) = ok %v, err %v; want not a request", v, ok, err)
		}
	}
}

// TestDecideRefusesRequestsThatWouldNotReadBack: both stores refuse, with
// ErrInvalidRequest and nothing recorded, an item whose request snapshot
// would not read back as itself (its Context holds a duplicate key or a
// lone surrogate escape, which json.Marshal passes through), rather than
// record a decision that a SQLStore would later report corrupt.
func TestDecideRefusesRequestsThatWouldNotReadBack(t *testing.T) {
	for _, k := range storeKinds {
		for _, ctxJSON := range []string{`{"a":1,"a":2}`, `{"a":"\ud800"}`} {
			t.Run(k.name+"/"+ctxJSON, func(t *testing.T) {
				ctx := context.Background()
				clock := newClock()
				s, dump := k.open(t, clock.Now)
				it := newItem(t, refundSchema(t), clock.Now(), "bad-context")
				it.Request.Context = json.RawMessage(ctxJSON)
				before := dump(it.ID)
				_, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
				if !errors.Is(err, approval.ErrInvalidRequest) {
					t.Errorf("Decide = %v, want ErrInvalidRequest", err)
				}
				if diff := cmp.Diff(before, dump(it.ID)); diff != "" {
					t.Errorf("the refused decision changed the store:\n%s", diff)
				}
			})
		}
	}
}

// TestSQLStoreMigratesVersion1 (schema 2): a database written by schema
// version 1 (no checksums) is upgraded once, in one transaction: every
// row gets the checksums of what it holds, reads the same afterwards,
// and verifies; opening again changes nothing. A migration that fails
// leaves the tables as they were.
func TestSQLStoreMigratesVersion1(t *testing.T) {
	ctx := context.Background()
	f := newRowsFixture(t)
	ids := []string{"approved", "twin", "edited", "rejected", "expired", "resumed"}
	want := dumpAudits(t, f.store, ids)
	toVersion1(t, f.db)
	v1 := dumpTables(t, f.db)

	// A failing migration (the UPDATE of the checksums aborts) changes nothing.
	f.exec(t, `CREATE TRIGGER boom BEFORE UPDATE ON approval_decisions BEGIN SELECT RAISE(ABORT, 'boom'); END`)
	if _, err := approval.OpenSQLStore(ctx, f.db, f.clock.Now); err == nil {
		t.Fatal("OpenSQLStore with an aborting UPDATE succeeded")
	}
	if diff := cmp.Diff(v1, dumpTables(t, f.db)); diff != "" {
		t.Errorf("the failed migration changed the tables:\n%s", diff)
	}
	f.exec(t, `DROP TRIGGER boom`)

	s := openSQLStore(t, f.db, f.clock.Now)
	if diff := cmp.Diff(want, dumpAudits(t, s, ids)); diff != "" {
		t.Errorf("the upgraded rows read differently (-before +after):\n%s", diff)
	}
	var version, unsummed int
	if err := f.db.QueryRow(`SELECT max(version) FROM approval_schema`).Scan(&version); err != nil || version != approval.SchemaVersion {
		t.Errorf("schema version %d (%v), want %d", version, err, approval.SchemaVersion)
	}
	if err := f.db.QueryRow(`SELECT (SELECT count(*) FROM approval_decisions WHERE crc < 0 OR resume_crc < 0) + (SELECT count(*) FROM approval_executions WHERE crc < 0)`).Scan(&unsummed); err != nil || unsummed != 0 {
		t.Errorf("%d rows without a checksum (%v)", unsummed, err)
	}
	after := dumpTables(t, f.db)
	openSQLStore(t, f.db, f.clock.Now)
	if diff := cmp.Diff(after, dumpTables(t, f.db)); diff != "" {
		t.Errorf("opening the upgraded tables again changed them:\n%s", diff)
	}
	// The upgraded store works on: a new decision verifies.
	if _, err := s.Decide(ctx, f.items["pending-twin"], approval.Verdict{Outcome: approval.Rejected, Reviewer: "dave"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Audit(ctx, "pending-twin"); err != nil {
		t.Error(err)
	}
}

// toVersion1 turns the approval tables of db back into schema version 1,
// rows kept: the checksum columns dropped, and approval_schema saying 1.
func toVersion1(t *testing.T, db *sql.DB) {
	t.Helper()
	toVersion2(t, db)
	for _, q := range []string{
		`ALTER TABLE approval_decisions DROP COLUMN crc`,
		`ALTER TABLE approval_decisions DROP COLUMN resume_crc`,
		`ALTER TABLE approval_executions DROP COLUMN crc`,
		`DELETE FROM approval_schema WHERE version > 1`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// toVersion2 turns the approval tables of db back into schema version 2,
// rows kept: the claim holder's columns dropped, and approval_schema
// saying 2.
func toVersion2(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{
		`DROP INDEX approval_decisions_claimant`,
		`ALTER TABLE approval_decisions DROP COLUMN resume_claimant`,
		`ALTER TABLE approval_decisions DROP COLUMN resume_claim`,
		`DELETE FROM approval_schema WHERE version > 2`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestSQLStoreMigratesVersion2 (schema 3): a database of schema version 2
// gains the claim holder's columns, empty, and its rows keep their
// checksums and read the same; a claim recorded afterwards names its
// holder and verifies.
func TestSQLStoreMigratesVersion2(t *testing.T) {
	ctx := context.Background()
	f := newRowsFixture(t)
	ids := []string{"approved", "twin", "edited", "rejected", "expired", "resumed"}
	want := dumpAudits(t, f.store, ids)
	toVersion2(t, f.db)
	v2 := dumpTables(t, f.db)
	s := openSQLStore(t, f.db, f.clock.Now)
	if diff := cmp.Diff(want, dumpAudits(t, s, ids)); diff != "" {
		t.Errorf("the upgraded rows read differently (-before +after):\n%s", diff)
	}
	toVersion2(t, f.db)
	if diff := cmp.Diff(v2, dumpTables(t, f.db)); diff != "" {
		t.Errorf("the upgrade changed the rows of version 2 besides adding columns:\n%s", diff)
	}
	s = openSQLStore(t, f.db, f.clock.Now)
	if ok, err := s.ClaimResumeAs(ctx, "approved", approval.Claim{Worker: "w1", ID: "c1", Lease: time.Minute}); err != nil || !ok {
		t.Fatalf("ClaimResumeAs = %v, %v", ok, err)
	}
	rec, err := s.Get(ctx, "approved")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Resume.Claimant != "w1" || rec.Resume.Claim != "c1" {
		t.Errorf("after the claim: %+v, want it held by w1's claim c1", rec.Resume)
	}
}
