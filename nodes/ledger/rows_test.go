package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// rowsFixture is a SQL ledger holding one record of each kind a reader
// meets, for tests that edit their rows: "done" (a result), "failed" (a
// permanent failure), "pending" (an intent held by "a"), and the claim of
// message "evt-1" in scope "acme/orders". Every record is of the call
// intent(key, owner) makes: one tool, one fingerprint.
type rowsFixture struct {
	db    *sql.DB
	l     *ledger.SQL
	clock *fakeClock
}

func newRowsFixture(t *testing.T) *rowsFixture {
	t.Helper()
	ctx := context.Background()
	clock := newFakeClock()
	db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
	l, err := ledger.NewSQL(ctx, db, ledger.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"done", "failed", "pending"} {
		if _, _, err := l.Begin(ctx, intent(k, "a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Complete(ctx, "done", "a", ledger.Outcome{Result: json.RawMessage(`{"number":7}`)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, "failed", "a", ledger.Outcome{Failure: &ledger.Failure{Class: "permanent", Message: "card declined", Status: 402}}); err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimMessage(ctx, claim("acme/orders", "evt-1", `{"amount":5}`)); err != nil {
		t.Fatal(err)
	}
	return &rowsFixture{db: db, l: l, clock: clock}
}

// dumpLedger renders every row of the ledger's tables, in key order.
func dumpLedger(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT * FROM lockstep_ledger ORDER BY key`,
		`SELECT * FROM lockstep_messages ORDER BY id`,
		`SELECT name, version FROM lockstep_ledger_meta ORDER BY name`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if bs, ok := v.([]byte); ok {
					vals[i] = string(bs)
				}
			}
			fmt.Fprintf(&b, "%v\n", vals)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// ledgerOps are the calls of the ledger that read a row before they write,
// by name; key names the record (or, for ClaimMessage, the message ID in
// scope "acme/orders").
var ledgerOps = []struct {
	name string
	call func(ctx context.Context, f *rowsFixture, key string) error
}{
	{"Get", func(ctx context.Context, f *rowsFixture, key string) error { _, err := f.l.Get(ctx, key); return err }},
	{"Begin", func(ctx context.Context, f *rowsFixture, key string) error {
		_, _, err := f.l.Begin(ctx, intent(key, "z"))
		return err
	}},
	{"Begin by the holder", func(ctx context.Context, f *rowsFixture, key string) error {
		_, _, err := f.l.Begin(ctx, intent(key, "a"))
		return err
	}},
	{"Complete", func(ctx context.Context, f *rowsFixture, key string) error {
		return f.l.Complete(ctx, key, "a", ledger.Outcome{Result: json.RawMessage(`{"number":8}`)})
	}},
	{"Release", func(ctx context.Context, f *rowsFixture, key string) error { return f.l.Release(ctx, key, "a") }},
	{"Resolve", func(ctx context.Context, f *rowsFixture, key string) error {
		return f.l.Resolve(ctx, key, ledger.Outcome{Result: json.RawMessage(`{"number":9}`)})
	}},
	{"ClaimMessage", func(ctx context.Context, f *rowsFixture, key string) error {
		return f.l.ClaimMessage(ctx, claim("acme/orders", key, `{"amount":5}`))
	}},
	// Prune after the retention, last: it moves the clock.
	{"Prune", func(ctx context.Context, f *rowsFixture, key string) error {
		f.clock.Advance(25 * time.Hour)
		_, err := f.l.Prune(ctx)
		return err
	}},
}

var (
	recordOps  = []string{"Get", "Begin", "Begin by the holder", "Complete", "Release", "Resolve", "Prune"}
	pendingOps = []string{"Get", "Begin", "Begin by the holder", "Complete", "Release", "Resolve"}
	claimOps   = []string{"ClaimMessage", "Prune"}
)

// TestSQLCorruptRows (issue 16, item 3): ledger rows edited in the
// database are reported by every reader as a *ledger.CorruptError naming
// the key and the part, and nothing is written on them. The decoder cases
// recompute the checksums after the edit, so that only the strict decoding
// stands between the edit and the reader: a failure holding null, a
// duplicate, case-variant or unknown key, invalid UTF-8, a lone surrogate
// or a status that is not an integer; a result that is not JSON as
// json.Marshal writes it; columns that disagree (a pending intent with an
// outcome, a done record without its completion time). The binding cases
// copy rows, with their checksums, under another key: a done record copied
// to another key would otherwise replay another call's result for a call
// that never ran, and a message claim copied to another ID would drop that
// message as a redelivery.
func TestSQLCorruptRows(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key        string
		edits      []string
		rechecksum bool
		what       string
		ops        []string
	}{
		{name: "failure null", key: "failed", edits: []string{`UPDATE lockstep_ledger SET failure = 'null' WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure with a duplicate key", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = '{"class":"permanent","message":"card declined","message":"ok","status":402}' WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure with a case-variant key", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = replace(failure, '"message"', '"Message"') WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure with an unknown key", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = replace(failure, '{', '{"retry":true,') WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure with invalid UTF-8", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = replace(failure, 'declined', 'decl' || CAST(x'ff' AS TEXT) || 'ined') WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure with a lone surrogate escape", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = replace(failure, 'declined', '\ud800declined') WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "failure status not an integer", key: "failed",
			edits:      []string{`UPDATE lockstep_ledger SET failure = replace(failure, '402', '402.00000000000001') WHERE key = 'failed'`},
			rechecksum: true, what: "failure", ops: recordOps},
		{name: "result with a duplicate key", key: "done",
			edits:      []string{`UPDATE lockstep_ledger SET result = '{"number":7,"number":8}' WHERE key = 'done'`},
			rechecksum: true, what: "outcome", ops: recordOps},
		{name: "result with a lone surrogate escape", key: "done",
			edits:      []string{`UPDATE lockstep_ledger SET result = '{"number":"\udc00"}' WHERE key = 'done'`},
			rechecksum: true, what: "outcome", ops: recordOps},
		{name: "result with invalid UTF-8", key: "done",
			edits:      []string{`UPDATE lockstep_ledger SET result = '{"number":"' || CAST(x'c3' AS TEXT) || '"}' WHERE key = 'done'`},
			rechecksum: true, what: "outcome", ops: recordOps},
		{name: "result not JSON", key: "done",
			edits:      []string{`UPDATE lockstep_ledger SET result = 'number: 7' WHERE key = 'done'`},
			rechecksum: true, what: "outcome", ops: recordOps},
		{name: "a pending intent with a result", key: "pending",
			edits:      []string{`UPDATE lockstep_ledger SET result = '{"number":7}' WHERE key = 'pending'`},
			rechecksum: true, what: "record", ops: pendingOps},
		{name: "a done record without its completion time", key: "done",
			edits:      []string{`UPDATE lockstep_ledger SET completed_at = NULL WHERE key = 'done'`},
			rechecksum: true, what: "record", ops: recordOps},
		{name: "an intent without an owner", key: "pending",
			edits:      []string{`UPDATE lockstep_ledger SET owner = '' WHERE key = 'pending'`},
			rechecksum: true, what: "record", ops: pendingOps},
		{name: "a claim without a fingerprint", key: "evt-1",
			edits:      []string{`UPDATE lockstep_messages SET fingerprint = '' WHERE id = 'evt-1'`},
			rechecksum: true, what: "message claim", ops: claimOps},
		// Rows copied under another key, with their checksums, or damaged.
		{name: "a done record copied to another key", key: "copy",
			edits: []string{`INSERT INTO lockstep_ledger (key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc)
				SELECT 'copy', tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc FROM lockstep_ledger WHERE key = 'done'`},
			what: "record", ops: recordOps},
		{name: "an outcome copied onto a pending intent", key: "pending",
			edits: []string{`UPDATE lockstep_ledger SET (state, result, failure, completed_at, crc) =
				(SELECT state, result, failure, completed_at, crc FROM lockstep_ledger WHERE key = 'done') WHERE key = 'pending'`},
			what: "record", ops: recordOps},
		{name: "a claim copied to another message", key: "evt-2",
			edits: []string{`INSERT INTO lockstep_messages (scope, id, fingerprint, claimed_at, crc)
				SELECT scope, 'evt-2', fingerprint, claimed_at, crc FROM lockstep_messages WHERE id = 'evt-1'`},
			what: "message claim", ops: claimOps},
		{name: "a lease damaged", key: "pending",
			edits: []string{`UPDATE lockstep_ledger SET lease_until = lease_until + 1 WHERE key = 'pending'`},
			what:  "record", ops: pendingOps},
		{name: "a claim time damaged", key: "evt-1",
			edits: []string{`UPDATE lockstep_messages SET claimed_at = claimed_at - 1 WHERE id = 'evt-1'`},
			what:  "message claim", ops: claimOps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newRowsFixture(t)
			for _, q := range tc.edits {
				if _, err := f.db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if tc.rechecksum {
				if err := ledger.RechecksumRows(ctx, f.db); err != nil {
					t.Fatal(err)
				}
			}
			before := dumpLedger(t, f.db)
			for _, op := range ledgerOps {
				if !contains(tc.ops, op.name) {
					continue
				}
				err := callNoPanic(t, func() error { return op.call(ctx, f, tc.key) })
				var ce *ledger.CorruptError
				switch {
				case !errors.As(err, &ce):
					t.Errorf("%s: %v, want a *ledger.CorruptError", op.name, err)
				case ce.Key != tc.key || ce.What != tc.what:
					t.Errorf("%s: corrupt %s under %q, want %s under %q (%v)", op.name, ce.What, ce.Key, tc.what, tc.key, err)
				case !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), tc.key):
					t.Errorf("%s: %v does not match ErrCorrupt or does not name the key and say corrupt", op.name, err)
				}
			}
			if diff := cmp.Diff(before, dumpLedger(t, f.db)); diff != "" {
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

// TestSQLForgetRemovesCorruptRecord: Forget deletes a record that does not
// verify, without reading it, and the key then starts afresh.
func TestSQLForgetRemovesCorruptRecord(t *testing.T) {
	ctx := context.Background()
	f := newRowsFixture(t)
	if _, err := f.db.Exec(`UPDATE lockstep_ledger SET result = '{"number":8}' WHERE key = 'done'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Get(ctx, "done"); !errors.Is(err, ledger.ErrCorrupt) {
		t.Fatalf("Get = %v, want ErrCorrupt", err)
	}
	if err := f.l.Forget(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	if _, started, err := f.l.Begin(ctx, intent("done", "b")); err != nil || !started {
		t.Errorf("Begin after Forget = %v, %v; want started", started, err)
	}
}

// TestSQLRowsVerify: the rows the ledger writes verify through every
// change of a record's life, and the checksums stored are those
// RechecksumRows computes, so that TestSQLCorruptRows's decoder cases test
// the decoding alone.
func TestSQLRowsVerify(t *testing.T) {
	ctx := context.Background()
	f := newRowsFixture(t)
	f.clock.Advance(2 * time.Minute)
	// Taken over (the pending intent's lease ended), restarted after the
	// retention, resolved, released, claimed again after expiry.
	in := intent("pending", "b")
	in.TakeOver = true
	if _, started, err := f.l.Begin(ctx, in); err != nil || !started {
		t.Fatalf("take over: %v, %v", started, err)
	}
	if _, _, err := f.l.Begin(ctx, intent("resolved", "c")); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Resolve(ctx, "resolved", ledger.Outcome{Result: json.RawMessage(`"found"`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.l.Begin(ctx, intent("released", "c")); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Release(ctx, "released", "c"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(25 * time.Hour)
	if _, started, err := f.l.Begin(ctx, intent("done", "d")); err != nil || !started {
		t.Fatalf("restart after the retention: %v, %v", started, err)
	}
	if err := f.l.ClaimMessage(ctx, claim("acme/orders", "evt-1", `{"amount":6}`)); err != nil {
		t.Fatalf("claim after expiry: %v", err)
	}
	before := dumpLedger(t, f.db)
	if err := ledger.RechecksumRows(ctx, f.db); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dumpLedger(t, f.db)); diff != "" {
		t.Errorf("the stored checksums are not those of the rows (-stored +computed):\n%s", diff)
	}
	for _, k := range []string{"done", "failed", "pending", "resolved"} {
		if _, err := f.l.Get(ctx, k); err != nil {
			t.Errorf("Get(%s): %v", k, err)
		}
	}
	if _, err := f.l.Prune(ctx); err != nil {
		t.Errorf("Prune: %v", err)
	}
}

// TestOutcomeValidate: both ledgers refuse, with ErrInvalid and nothing
// written, an outcome whose result a reader would report corrupt (not JSON,
// a duplicate key, a lone surrogate escape, invalid UTF-8).
func TestOutcomeValidate(t *testing.T) {
	for name, newLedger := range implementations() {
		for _, res := range []string{`{"n":1,"n":2}`, `{"n":"\ud800"}`, "\"\xff\"", `n: 1`, ``} {
			t.Run(name+"/"+res, func(t *testing.T) {
				ctx := context.Background()
				l := newLedger(t, ledger.Options{})
				if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
					t.Fatal(err)
				}
				o := ledger.Outcome{Result: json.RawMessage(res)}
				if err := l.Complete(ctx, "k", "a", o); !errors.Is(err, ledger.ErrInvalid) {
					t.Errorf("Complete = %v, want ErrInvalid", err)
				}
				if err := l.Resolve(ctx, "k", o); !errors.Is(err, ledger.ErrInvalid) {
					t.Errorf("Resolve = %v, want ErrInvalid", err)
				}
				if e, err := l.Get(ctx, "k"); err != nil || e.State != ledger.StatePending {
					t.Errorf("after the refused outcome: %+v, %v; want the intent pending", e, err)
				}
			})
		}
	}
}

// TestSQLUpgradesEveryVersion (version 4): a database left by each older
// version is upgraded in one transaction: its rows get their checksums,
// read as they did, and verify; opening it again changes nothing. An
// upgrade whose checksum step fails leaves the tables as they were.
func TestSQLUpgradesEveryVersion(t *testing.T) {
	for _, from := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(from), func(t *testing.T) {
			ctx := context.Background()
			f := newRowsFixture(t)
			var want []ledger.Entry
			for _, k := range []string{"done", "failed", "pending"} {
				e, err := f.l.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, e)
			}
			downgrade(t, f.db, from)
			old := dumpLedger(t, f.db)
			if _, err := f.db.Exec(`CREATE TRIGGER boom BEFORE UPDATE ON lockstep_ledger BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
				t.Fatal(err)
			}
			if _, err := ledger.NewSQL(ctx, f.db, ledger.Options{Now: f.clock.Now}); err == nil {
				t.Fatal("NewSQL with an aborting UPDATE succeeded")
			}
			if diff := cmp.Diff(old, dumpLedger(t, f.db)); diff != "" {
				t.Errorf("the failed upgrade changed the tables:\n%s", diff)
			}
			if _, err := f.db.Exec(`DROP TRIGGER boom`); err != nil {
				t.Fatal(err)
			}
			l, err := ledger.NewSQL(ctx, f.db, ledger.Options{Now: f.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			var got []ledger.Entry
			for _, k := range []string{"done", "failed", "pending"} {
				e, err := l.Get(ctx, k)
				if err != nil {
					t.Fatalf("Get(%s) after the upgrade: %v", k, err)
				}
				got = append(got, e)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the upgraded records read differently (-before +after):\n%s", diff)
			}
			if n := count(t, f.db, `SELECT (SELECT count(*) FROM lockstep_ledger WHERE crc < 0) + (SELECT count(*) FROM lockstep_messages WHERE crc < 0)`); n != 0 {
				t.Errorf("%d rows without a checksum after the upgrade", n)
			}
			if err := l.ClaimMessage(ctx, claim("acme/orders", "evt-1", `{"amount":5}`)); !errors.Is(err, ledger.ErrDuplicateMessage) {
				t.Errorf("the upgraded claim: %v, want ErrDuplicateMessage", err)
			}
			after := dumpLedger(t, f.db)
			if _, err := ledger.NewSQL(ctx, f.db, ledger.Options{Now: f.clock.Now}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(after, dumpLedger(t, f.db)); diff != "" {
				t.Errorf("opening the upgraded tables again changed them:\n%s", diff)
			}
		})
	}
}

// downgrade turns the ledger's tables in db back into those of version
// from (1 to 3), rows kept as that version wrote them.
func downgrade(t *testing.T, db *sql.DB, from int) {
	t.Helper()
	stmts := []string{
		`ALTER TABLE lockstep_ledger DROP COLUMN crc`,
		`ALTER TABLE lockstep_messages DROP COLUMN crc`,
	}
	if from <= 2 {
		stmts = append(stmts, `ALTER TABLE lockstep_ledger DROP COLUMN thread_id`, `ALTER TABLE lockstep_ledger DROP COLUMN run_id`)
	}
	if from == 1 {
		stmts = append(stmts,
			`CREATE TABLE lockstep_messages_v1 (id TEXT PRIMARY KEY, claimed_at INTEGER NOT NULL)`,
			`INSERT INTO lockstep_messages_v1 (id, claimed_at) SELECT id, claimed_at FROM lockstep_messages`,
			`DROP TABLE lockstep_messages`,
			`ALTER TABLE lockstep_messages_v1 RENAME TO lockstep_messages`)
	}
	stmts = append(stmts, fmt.Sprintf(`UPDATE lockstep_ledger_meta SET version = %d WHERE name = 'ledger'`, from))
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
