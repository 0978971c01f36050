package ledger_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// runIntent is intent of a graph run: thread and run ID.
func runIntent(key, owner, thread, run string) ledger.Intent {
	in := intent(key, owner)
	in.Thread, in.Run = thread, run
	return in
}

// TestSQLMigrationRuns: a database of an older ledger schema (1, upgraded
// through 2) is upgraded in place: its pending intent keeps its lease rule
// (no run recorded, so another run waits for the lease), and new intents
// record their run.
func TestSQLMigrationRuns(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	db := openDB(t, filepath.Join(t.TempDir(), "old.db"))
	for _, s := range schemaV1 {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO lockstep_ledger (key, tool, args_hash, state, owner, lease_until, created_at) VALUES ('old', 'create_issue', 'h1', 'pending', 'a', ?, ?)`,
		clk.Now().Add(time.Minute).UnixNano(), clk.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.NewSQL(ctx, db, ledger.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if v := count(t, db, `SELECT version FROM lockstep_ledger_meta WHERE name = 'ledger'`); v != ledger.SchemaVersion {
		t.Fatalf("schema version %d, want %d", v, ledger.SchemaVersion)
	}
	if _, _, err := l.Begin(ctx, runIntent("old", "b", "thread-7", "run-2")); !errors.Is(err, ledger.ErrInProgress) {
		t.Errorf("Begin on an intent of an older schema: %v, want ErrInProgress until its lease ends", err)
	}
	if _, _, err := l.Begin(ctx, runIntent("new", "b", "thread-7", "run-2")); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM lockstep_ledger WHERE key = 'new' AND thread_id = 'thread-7' AND run_id = 'run-2'`); n != 1 {
		t.Errorf("the new intent's run is not stored in thread_id and run_id")
	}
}
