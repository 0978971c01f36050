package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestMigrateToDueWork: a file of schema 4 or 5 (no due columns, no
// queue) is migrated in place: a thread whose runner died (its lease
// expired, never released) is due at once, a released one is not, and
// input can be queued. The work tables are readable with the sqlite3
// shell's SQL.
func TestMigrateToDueWork(t *testing.T) {
	for _, version := range []int{4, 5} {
		t.Run(fmt.Sprintf("from schema %d", version), func(t *testing.T) {
			ctx := t.Context()
			path := schemaFile(t, version)
			clock := newFakeClock()
			old, err := OpenExisting(path, Config{Now: clock.Now})
			if err != nil {
				t.Fatalf("OpenExisting of a schema-%d file: %v", version, err)
			}
			for _, th := range []string{"dead", "done"} {
				req := newLine(th).next()
				req.Lease = checkpoint.Lease{Owner: "run-" + th, TTL: time.Second}
				req.Release = th == "done"
				if err := old.Put(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			closeChecked(t, old)

			clock.Advance(2 * time.Second)
			s := openAt(t, path, Config{Now: clock.Now})
			if v := userVersion(t, s.DB()); v != schemaVersion {
				t.Fatalf("user_version = %d after Open, want %d", v, schemaVersion)
			}
			b, err := s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"w-1", "w-2"}, Runner: "pool", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Threads) != 1 || b.Threads[0].Thread != "dead" || b.Threads[0].Reason != checkpoint.DueExpired || b.Threads[0].Epoch != 2 {
				t.Fatalf("due after the migration: %+v, want the dead run's thread (expired, epoch 2)", b.Threads)
			}
			in, added, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "done", Key: "k", Input: json.RawMessage(`{"n":1}`)})
			if err != nil || !added {
				t.Fatalf("Enqueue after the migration: %v, %v", added, err)
			}
			var key, input string
			var dueAt int64
			if err := s.DB().QueryRow(`SELECT q.run_key, q.input, t.due_at FROM queued_inputs q JOIN threads t USING (thread_id) WHERE q.input_id = ?`, in.ID).Scan(&key, &input, &dueAt); err != nil {
				t.Fatal(err)
			}
			if key != "k" || input != `{"n":1}` || dueAt != clock.Now().UnixNano() {
				t.Errorf("the queued row: key %q input %s due_at %d; want k, {\"n\":1}, %d", key, input, dueAt, clock.Now().UnixNano())
			}
			integrityOK(t, s.DB())
		})
	}
}

// TestOpenExistingBeforeDueWork: OpenExisting opens a schema-4 or
// schema-5 file (which predate due work) as it is: checkpoints are
// written, released and deleted as before, Queued finds nothing, and
// ClaimDue, Hold, Settle and Enqueue are refused with a *SchemaError
// matching ErrSchemaTooOld, writing nothing; the file stays at its
// schema.
func TestOpenExistingBeforeDueWork(t *testing.T) {
	for _, version := range []int{4, 5} {
		t.Run(fmt.Sprintf("schema %d", version), func(t *testing.T) {
			ctx := t.Context()
			path := schemaFile(t, version)
			s, err := OpenExisting(path, Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer closeChecked(t, s)
			req := newLine("t").next()
			req.Lease = checkpoint.Lease{Owner: "run", TTL: time.Minute}
			if err := s.Put(ctx, req); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if err := s.Release(ctx, "t", "", "run"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := s.Claim(ctx, checkpoint.Ref{Thread: "claimed"}, checkpoint.Lease{Owner: "c", TTL: time.Minute}); err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if err := s.Release(ctx, "claimed", "", "c"); err != nil {
				t.Fatalf("Release of a thread only claimed: %v", err)
			}
			if q, err := s.Queued(ctx, "t", 0); err != nil || len(q) != 0 {
				t.Errorf("Queued = %v, %v; want none", q, err)
			}
			lease := checkpoint.Lease{Owner: "w", TTL: time.Minute}
			refused := map[string]error{}
			_, refused["ClaimDue"] = s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"w"}, TTL: time.Minute})
			_, refused["Hold"] = s.Hold(ctx, "t", lease)
			refused["Settle"] = s.Settle(ctx, checkpoint.Settlement{Thread: "t", Owner: "w", Next: checkpoint.DueNone})
			_, _, refused["Enqueue"] = s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "t", Key: "k", Input: json.RawMessage(`{}`)})
			for name, err := range refused {
				var se *SchemaError
				if !errors.As(err, &se) || !errors.Is(err, ErrSchemaTooOld) || se.File != version {
					t.Errorf("%s on schema %d: %v, want a *SchemaError of file version %d matching ErrSchemaTooOld", name, version, err, version)
				}
			}
			if err := s.DeleteThread(ctx, "t"); err != nil {
				t.Fatalf("DeleteThread: %v", err)
			}
			var rows int
			if err := s.DB().QueryRow(`SELECT count(*) FROM threads`).Scan(&rows); err != nil || rows != 0 {
				t.Errorf("%d threads rows left (%v), want 0", rows, err)
			}
			if v := userVersion(t, s.DB()); v != version {
				t.Errorf("user_version = %d, want %d", v, version)
			}
		})
	}
}

// TestQueuedInputCorrupt: a queued input whose row was changed outside
// lockstep reads as a *checkpoint.CorruptError, from Queued and from an
// Enqueue under its key, never as other input.
func TestQueuedInputCorrupt(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "q.db"), Config{})
	in, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "t", Key: "k", Input: json.RawMessage(`{"amount":10}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`UPDATE queued_inputs SET input = '{"amount":1000}' WHERE input_id = ?`, in.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.Queued(ctx, "t", 0)
	var ce *checkpoint.CorruptError
	if !errors.As(err, &ce) || ce.Thread != "t" {
		t.Errorf("Queued of a changed row: %v, want a *checkpoint.CorruptError naming thread t", err)
	}
	_, _, err = s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "t", Key: "k", Input: json.RawMessage(`{"amount":10}`)})
	if !errors.As(err, &ce) {
		t.Errorf("Enqueue under the changed row's key: %v, want a *checkpoint.CorruptError", err)
	}
	if _, err := s.DB().Exec(`UPDATE queued_inputs SET thread_id = 'other' WHERE input_id = ?`, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Queued(ctx, "other", 0); !errors.As(err, &ce) {
		t.Errorf("Queued of a row moved to another thread: %v, want a *checkpoint.CorruptError", err)
	}
}
