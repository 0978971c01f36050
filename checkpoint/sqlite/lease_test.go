package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestMigrateSchema2Leases: a file of schema 2 (no lease runner or epoch)
// is migrated to schema 3 in place: its live lease is kept, reported with
// epoch 0 and no runner, still refuses another runner, and the next claim
// after it ends is epoch 1 with the claimant's runner. The thread_heads
// view shows both new columns.
func TestMigrateSchema2Leases(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "schema2.db")
	clock := newFakeClock()
	until := clock.Now().Add(time.Minute)
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations {
		if m.version > 2 {
			break
		}
		if err := applyMigration(ctx, conn, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA user_version = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO threads (thread_id, checkpoint_ns, lease_owner, lease_until, updated_at) VALUES ('t', '', 'old-run', ?, '2025-06-01T12:00:00.000000000Z')`,
		until.UnixNano()); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()

	s := openAt(t, path, Config{Now: clock.Now})
	var v int
	if err := s.DB().QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, schemaVersion)
	}
	got, err := s.Lease(ctx, "t", "")
	want := checkpoint.LeaseInfo{Thread: "t", Owner: "old-run", Until: until.UTC()}
	if err != nil || !cmp.Equal(got, want) {
		t.Fatalf("Lease after the migration = %+v, %v; want %+v", got, err, want)
	}
	err = s.Claim(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.Lease{Owner: "new-run", Runner: "r", TTL: time.Minute, TakeBack: "old-run"})
	var be *checkpoint.BusyError
	if !errors.As(err, &be) || be.Owner != "old-run" || be.Epoch != 0 || be.SameRunner {
		t.Fatalf("Claim under the migrated lease: %v, want a *BusyError naming old-run, epoch 0", err)
	}
	clock.Advance(2 * time.Minute)
	if err := s.Claim(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.Lease{Owner: "new-run", Runner: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Lease(ctx, "t", "")
	if got.Owner != "new-run" || got.Runner != "r" || got.Epoch != 1 {
		t.Errorf("Lease after the next claim = %+v, want new-run of runner r, epoch 1", got)
	}
	l := newLine("t")
	req := l.next()
	req.Lease = checkpoint.Lease{Owner: "new-run", Runner: "r", TTL: time.Minute}
	if err := s.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	var runner string
	var epoch int
	if err := s.DB().QueryRow(`SELECT lease_runner, lease_epoch FROM thread_heads WHERE thread_id = 't'`).Scan(&runner, &epoch); err != nil || runner != "r" || epoch != 1 {
		t.Errorf("thread_heads: runner %q epoch %d (%v), want r and 1", runner, epoch, err)
	}
}

// TestLeaseOtherSaver: Lease reads what another saver on the file wrote
// (the CLI opens the file with OpenExisting beside the application), and
// after Close fails with ErrClosed.
func TestLeaseOtherSaver(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ro.db")
	clock := newFakeClock()
	s := openAt(t, path, Config{Now: clock.Now})
	l := newLine("t")
	req := l.next()
	req.Lease = checkpoint.Lease{Owner: "run-1", Runner: "worker-1", TTL: time.Minute}
	if err := s.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenExisting(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ro.Lease(ctx, "t", "")
	want := checkpoint.LeaseInfo{Thread: "t", Owner: "run-1", Runner: "worker-1", Epoch: 1, Until: clock.Now().Add(time.Minute).UTC()}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("Lease from another saver = %+v, %v; want %+v", got, err, want)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Lease(ctx, "t", ""); !errors.Is(err, checkpoint.ErrClosed) {
		t.Errorf("Lease after Close: %v, want ErrClosed", err)
	}
}
