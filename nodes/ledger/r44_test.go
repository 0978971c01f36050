package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/ledger/ledgertest"
)

// claimStep is one claim of a scenario, after advancing the clock by
// advance; want is nil, ErrDuplicateMessage, ErrDuplicateMismatch or
// ErrInvalid.
type claimStep struct {
	advance time.Duration
	c       ledger.Claim
	want    error
}

// checkClaimErr is the store suite's check of a claim's error.
var checkClaimErr = ledgertest.CheckClaimErr

// r44Consumer handles one delivery: it claims the message and, when the
// claim wins, records the effect. It reports whether it recorded one.
// When crash(), called after a winning claim, is true, it dies after the
// claim and before the effect (R44's afterDedupInsertBeforeEffect), where
// the implementation can.
type r44Consumer func(ctx context.Context, c ledger.Claim, payload string, inFlight func(), crash func() bool) (effect bool, err error)

// TestMessageDedupLoadR44 is R44's load: 1,000 messages, each delivered 3
// times, shuffled, to 8 concurrent consumers; some deliveries arrive while
// another copy of the message is in flight (a third of the messages come
// as a burst of their 3 copies, and the winner holds its claim open for a
// moment). Exactly 1,000 effects are recorded, one per message. On SQL the
// effect is written in the transaction of the claim (ClaimMessageTx), and
// the first winning copy of every tenth message crashes between the claim
// and the effect (its transaction rolls back): the redelivery is then
// processed cleanly.
func TestMessageDedupLoadR44(t *testing.T) {
	const messages, copies, consumers = 1000, 3, 8
	scope := ledger.MessageScope("tenant-a", "orders")
	t.Run("memory", func(t *testing.T) {
		l, err := ledger.NewMemory(ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		effects := map[string]string{}
		consume := func(ctx context.Context, c ledger.Claim, payload string, inFlight func(), _ func() bool) (bool, error) {
			if err := l.ClaimMessage(ctx, c); err != nil {
				return false, err
			}
			inFlight()
			mu.Lock()
			defer mu.Unlock()
			if _, ok := effects[c.ID]; ok {
				return false, fmt.Errorf("second effect of %s", c.ID)
			}
			effects[c.ID] = payload
			return true, nil
		}
		runR44Load(t, scope, messages, copies, consumers, consume)
		if len(effects) != messages {
			t.Errorf("effects recorded = %d, want %d", len(effects), messages)
		}
	})
	t.Run("sql", func(t *testing.T) {
		ctx := context.Background()
		db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
		l, err := ledger.NewSQL(ctx, db, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE r44_effects (id TEXT NOT NULL, payload TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		var crashes atomic.Int64
		consume := func(ctx context.Context, c ledger.Claim, payload string, inFlight func(), crash func() bool) (bool, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return false, err
			}
			defer tx.Rollback()
			if err := l.ClaimMessageTx(ctx, tx, c); err != nil {
				return false, err
			}
			inFlight()
			if crash() {
				crashes.Add(1)
				return false, nil // dies here: the deferred rollback drops the claim
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO r44_effects (id, payload) VALUES (?, ?)`, c.ID, payload); err != nil {
				return false, err
			}
			return true, tx.Commit()
		}
		runR44Load(t, scope, messages, copies, consumers, consume)
		if got := count(t, db, `SELECT COUNT(*) FROM r44_effects`); got != messages {
			t.Errorf("effect rows = %d, want %d", got, messages)
		}
		if got := count(t, db, `SELECT COUNT(DISTINCT id) FROM r44_effects`); got != messages {
			t.Errorf("messages with an effect = %d, want %d", got, messages)
		}
		if got := count(t, db, `SELECT COUNT(*) FROM lockstep_messages WHERE scope = ?`, scope); got != messages {
			t.Errorf("claims stored = %d, want %d", got, messages)
		}
		if crashes.Load() != messages/10 {
			t.Errorf("crashes after the claim = %d, want %d", crashes.Load(), messages/10)
		}
	})
}

// runR44Load delivers the messages and checks that each had one effect,
// that the losers were duplicates, and that some deliveries overlapped a
// copy in flight.
func runR44Load(t *testing.T, scope string, messages, copies, consumers int, consume r44Consumer) {
	t.Helper()
	ctx := context.Background()
	type delivery struct{ n int }
	// Units: a burst holds the copies of one message back to back.
	var units [][]delivery
	for n := range messages {
		if n%3 == 0 {
			var burst []delivery
			for range copies {
				burst = append(burst, delivery{n})
			}
			units = append(units, burst)
			continue
		}
		for range copies {
			units = append(units, []delivery{{n}})
		}
	}
	r := rand.New(rand.NewPCG(44, 44))
	r.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
	queue := make(chan delivery, messages*copies)
	for _, u := range units {
		for _, d := range u {
			queue <- d
		}
	}
	close(queue)

	active := make([]atomic.Int32, messages) // deliveries of message n under way
	crashed := make([]atomic.Bool, messages)
	var effects, duplicates, overlapped atomic.Int64
	perMessage := make([]atomic.Int32, messages)
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			for d := range queue {
				if active[d.n].Add(1) > 1 {
					overlapped.Add(1) // another copy is in flight
				}
				payload := fmt.Sprintf(`{"order":%d,"amount":%d}`, d.n, d.n*7)
				c := ledger.Claim{Scope: scope, ID: fmt.Sprintf("evt_%04d", d.n), Fingerprint: ledger.MessageFingerprint([]byte(payload))}
				hold := func() {
					if d.n%3 == 0 {
						time.Sleep(2 * time.Millisecond) // keep the claim in flight
					}
				}
				crash := func() bool { return d.n%10 == 0 && crashed[d.n].CompareAndSwap(false, true) }
				effect, err := consume(ctx, c, payload, hold, crash)
				switch {
				case errors.Is(err, ledger.ErrDuplicateMessage):
					duplicates.Add(1)
				case err != nil:
					t.Errorf("delivery of %s: %v", c.ID, err)
				case effect:
					effects.Add(1)
					perMessage[d.n].Add(1)
				}
				active[d.n].Add(-1)
			}
		})
	}
	wg.Wait()
	if effects.Load() != int64(messages) {
		t.Errorf("effects = %d, want %d", effects.Load(), messages)
	}
	for n := range perMessage {
		if got := perMessage[n].Load(); got != 1 {
			t.Errorf("message %d had %d effects, want 1", n, got)
		}
	}
	if overlapped.Load() == 0 {
		t.Errorf("no delivery overlapped a copy in flight: the load did not test concurrency")
	}
	t.Logf("effects %d, duplicates %d, deliveries that overlapped a copy in flight %d", effects.Load(), duplicates.Load(), overlapped.Load())
}

// schemaV1 is the ledger's DDL of schema version 1, verbatim, for the
// migration test.
var schemaV1 = []string{
	`CREATE TABLE IF NOT EXISTS lockstep_ledger_meta (
		name    TEXT PRIMARY KEY,
		version INTEGER NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS lockstep_ledger (
		key          TEXT PRIMARY KEY,
		tool         TEXT NOT NULL,
		args_hash    TEXT NOT NULL,
		state        TEXT NOT NULL CHECK (state IN ('pending', 'done')),
		result       TEXT,
		failure      TEXT,
		owner        TEXT NOT NULL,
		lease_until  INTEGER NOT NULL,
		created_at   INTEGER NOT NULL,
		completed_at INTEGER
	)`,
	`CREATE INDEX IF NOT EXISTS lockstep_ledger_created ON lockstep_ledger (created_at)`,
	`CREATE TABLE IF NOT EXISTS lockstep_messages (
		id         TEXT PRIMARY KEY,
		claimed_at INTEGER NOT NULL
	)`,
	`INSERT INTO lockstep_ledger_meta (name, version) VALUES ('ledger', 1)`,
}

// v1Database writes a database as schema version 1 left it: a done record
// under "k", a message claimed an hour before now ("old-live") and one
// claimed 25 hours before ("old-expired").
func v1Database(t *testing.T, now time.Time) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v1.db")
	db := openDB(t, path)
	for _, s := range schemaV1 {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	created := now.Add(-2 * time.Hour).UnixNano()
	if _, err := db.Exec(`INSERT INTO lockstep_ledger (key, tool, args_hash, state, result, owner, lease_until, created_at, completed_at) VALUES ('k', 'create_issue', 'h1', 'done', '{"n":1}', 'a', ?, ?, ?)`,
		created, created, created); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO lockstep_messages (id, claimed_at) VALUES ('old-live', ?), ('old-expired', ?)`,
		now.Add(-time.Hour).UnixNano(), now.Add(-25*time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	return db, path
}

// TestSQLMigrationV1R44: NewSQL upgrades a database of schema version 1 to
// the current version in place. Its records are read as before; its message claims
// keep their time and, having no scope or fingerprint, refuse their ID in
// every scope as a duplicate (never a mismatch) until they expire; after
// that the ID is claimed per scope like any other.
func TestSQLMigrationV1R44(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	db, path := v1Database(t, clk.Now())
	opts := ledger.Options{Now: clk.Now, Retention: 24 * time.Hour}
	l, err := ledger.NewSQL(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if v := count(t, db, `SELECT version FROM lockstep_ledger_meta WHERE name = 'ledger'`); v != ledger.SchemaVersion {
		t.Fatalf("schema version after the upgrade = %d, want %d", v, ledger.SchemaVersion)
	}
	if e, err := l.Get(ctx, "k"); err != nil || e.State != ledger.StateDone || string(e.Outcome.Result) != `{"n":1}` {
		t.Errorf("record of version 1 after the upgrade = %+v, %v", e, err)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM lockstep_messages WHERE scope = '' AND fingerprint = ''`); n != 2 {
		t.Errorf("claims of version 1 kept = %d, want 2", n)
	}
	steps := []claimStep{
		{c: claim("acme/orders", "old-live", "p1"), want: ledger.ErrDuplicateMessage},
		{c: claim("globex/orders", "old-live", "p2"), want: ledger.ErrDuplicateMessage},
		{c: claim("acme/orders", "old-expired", "p1")},
		{c: claim("acme/orders", "new", "p1")},
		{c: claim("globex/orders", "new", "p1")},
		{c: claim("globex/orders", "new", "p2"), want: ledger.ErrDuplicateMismatch},
		// The old claim expires 24 h after it was made (an hour before the
		// upgrade): then the ID is claimed per scope.
		{advance: 23*time.Hour - time.Nanosecond, c: claim("acme/orders", "old-live", "p1"), want: ledger.ErrDuplicateMessage},
		{advance: time.Nanosecond, c: claim("acme/orders", "old-live", "p1")},
		{c: claim("globex/orders", "old-live", "p2")},
		{c: claim("acme/orders", "old-live", "p2"), want: ledger.ErrDuplicateMismatch},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		err := l.ClaimMessage(ctx, st.c)
		checkClaimErr(t, fmt.Sprintf("step %d (scope %q, ID %q)", i, st.c.Scope, st.c.ID), st.c, err, st.want)
		if i == 1 { // refused claims of a migrated ID wrote nothing
			if n := count(t, db, `SELECT COUNT(*) FROM lockstep_messages WHERE id = 'old-live'`); n != 1 {
				t.Errorf("rows of old-live after refused claims = %d, want 1", n)
			}
		}
	}
	if n, err := l.Prune(ctx); err != nil || n < 1 {
		t.Errorf("Prune = %d, %v; want the expired claims of version 1 deleted", n, err)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM lockstep_messages WHERE scope = ''`); n != 0 {
		t.Errorf("claims of version 1 left after Prune = %d, want 0", n)
	}
	// Opening the upgraded file again changes nothing.
	db.Close()
	db2 := openDB(t, path)
	l2, err := ledger.NewSQL(ctx, db2, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.ClaimMessage(ctx, claim("acme/orders", "new", "p1")); !errors.Is(err, ledger.ErrDuplicateMessage) {
		t.Errorf("claim after reopening = %v, want ErrDuplicateMessage", err)
	}
}

// TestSQLMigrationAtomicR44: an upgrade that fails leaves the database of
// version 1 as it was (the upgrade is one transaction), and succeeds once
// the obstacle is gone.
func TestSQLMigrationAtomicR44(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	db, _ := v1Database(t, clk.Now())
	if _, err := db.Exec(`CREATE TABLE lockstep_messages_v2 (leftover TEXT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.NewSQL(ctx, db, ledger.Options{Now: clk.Now}); err == nil {
		t.Fatal("NewSQL over an obstructed upgrade succeeded")
	}
	if v := count(t, db, `SELECT version FROM lockstep_ledger_meta WHERE name = 'ledger'`); v != 1 {
		t.Errorf("version after a failed upgrade = %d, want 1", v)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM lockstep_messages WHERE id IN ('old-live', 'old-expired')`); n != 2 {
		t.Errorf("claims of version 1 after a failed upgrade = %d, want 2", n)
	}
	if _, err := db.Exec(`DROP TABLE lockstep_messages_v2`); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.NewSQL(ctx, db, ledger.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimMessage(ctx, claim("acme/orders", "old-live", "p")); !errors.Is(err, ledger.ErrDuplicateMessage) {
		t.Errorf("claim of a version 1 ID after the upgrade = %v, want ErrDuplicateMessage", err)
	}
}
