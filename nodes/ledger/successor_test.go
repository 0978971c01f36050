package ledger_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
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

// TestEarlierRunIsAbandoned (D17, issue 15 item 1): a pending intent that
// an earlier run of the same thread recorded counts as abandoned at once,
// well inside its lease: Begin by the thread's current run returns an
// *OutcomeUnknownError with EarlierRun set (naming that run), or, with
// TakeOver, hands the intent over, recording the new run. An intent of a
// run of another thread, of the same run (another execution), or of a
// holder outside a graph run (no run recorded) is still in progress while
// its lease lasts, with an *InProgressError naming the holder and when to
// retry.
func TestEarlierRunIsAbandoned(t *testing.T) {
	for name, newLedger := range implementations() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			l := newLedger(t, ledger.Options{Now: clk.Now})
			if _, started, err := l.Begin(ctx, runIntent("k", "exec-1", "thread-7", "run-1")); err != nil || !started {
				t.Fatalf("Begin: %v, %v", started, err)
			}
			clk.Advance(3 * time.Second) // well inside the minute's lease

			for _, tc := range []struct {
				name string
				in   ledger.Intent
			}{
				{"another thread", runIntent("k", "exec-2", "thread-8", "run-9")},
				{"the same run", runIntent("k", "exec-2", "thread-7", "run-1")},
				{"outside a graph run", intent("k", "exec-2")},
			} {
				_, _, err := l.Begin(ctx, tc.in)
				var ip *ledger.InProgressError
				if !errors.As(err, &ip) || ip.Thread != "thread-7" || ip.Run != "run-1" {
					t.Errorf("%s: %v, want an *InProgressError naming run-1 of thread-7", tc.name, err)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, "in run run-1 of thread \"thread-7\"") || !strings.Contains(msg, "retry after") {
					t.Errorf("%s: message %q does not name the holder and when to retry", tc.name, msg)
				}
			}

			_, started, err := l.Begin(ctx, runIntent("k", "exec-2", "thread-7", "run-2"))
			var ou *ledger.OutcomeUnknownError
			if started || !errors.As(err, &ou) || !ou.EarlierRun || ou.Run != "run-1" || ou.Thread != "thread-7" {
				t.Fatalf("Begin by the thread's next run: started %v, %v; want an *OutcomeUnknownError of the earlier run", started, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "earlier run (run-1)") || !strings.Contains(msg, "may or may not have taken effect") {
				t.Errorf("message %q does not say an earlier run left it, outcome unknown", msg)
			}
			if e, err := l.Get(ctx, "k"); err != nil || e.State != ledger.StatePending || e.Owner != "exec-1" {
				t.Fatalf("the refused Begin changed the record: %+v, %v", e, err)
			}

			take := runIntent("k", "exec-3", "thread-7", "run-2")
			take.TakeOver = true
			e, started, err := l.Begin(ctx, take)
			if err != nil || !started || e.Owner != "exec-3" || e.Run != "run-2" || e.Thread != "thread-7" {
				t.Fatalf("TakeOver by the next run: %+v, started %v, %v", e, started, err)
			}
			if got, _ := l.Get(ctx, "k"); got.Run != "run-2" || got.Owner != "exec-3" {
				t.Errorf("stored after the takeover: %+v", got)
			}
			// The new holder is live: the run after it waits for nothing
			// either; another thread's call still does.
			if _, _, err := l.Begin(ctx, runIntent("k", "exec-4", "thread-8", "run-9")); !errors.Is(err, ledger.ErrInProgress) {
				t.Errorf("another thread after the takeover: %v, want ErrInProgress", err)
			}
			if _, _, err := l.Begin(ctx, runIntent("k", "exec-4", "thread-7", "run-3")); !errors.Is(err, ledger.ErrOutcomeUnknown) {
				t.Errorf("the thread's run after that: %v, want ErrOutcomeUnknown", err)
			}
		})
	}
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
