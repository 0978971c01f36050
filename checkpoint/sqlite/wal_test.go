package sqlite

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWALRestartsAfterAPinningReader: a reader that holds an old snapshot
// while the writer commits 40 MiB keeps SQLite from copying the WAL back,
// and the file grows past walRestartBytes. The writer's forced checkpoints
// fail while the reader holds on (and the commits go on), and the first
// one after the reader is gone truncates the file. With the keeper
// switched off the file stays at its high-water mark: that is the
// growth the keeper bounds.
func TestWALRestartsAfterAPinningReader(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("writes 40 MiB (and races nothing: it runs without the race detector)")
	}
	for _, keep := range []bool{true, false} {
		name := "keeper"
		if !keep {
			name = "no keeper"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wal.db")
			s := openAt(t, path, Config{Synchronous: SyncNormal})
			if !keep {
				s.wal.skip = 1 << 30
			}
			ctx := t.Context()
			l := newLine("t")
			put := func(big bool) {
				t.Helper()
				req := l.next()
				if big {
					req.Checkpoint.Channels["N"][0].Data = json.RawMessage(`"` + strings.Repeat("x", 256<<10) + `"`)
				}
				if err := s.Put(ctx, req); err != nil {
					t.Fatal(err)
				}
				l.committed(req)
			}
			walSize := func() int64 {
				t.Helper()
				fi, err := os.Stat(path + "-wal")
				if err != nil {
					t.Fatal(err)
				}
				return fi.Size()
			}
			put(false)

			// A reader on its own connection holds a snapshot.
			db, err := sql.Open(driverName, path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM checkpoints`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			for range 160 {
				put(true)
			}
			if got := walSize(); got < walRestartBytes {
				t.Fatalf("with a reader pinning the WAL, the file is %d MiB, want over %d", got>>20, walRestartBytes>>20)
			}
			if s.wal.restarts != 0 {
				t.Fatalf("%d forced checkpoints finished while a reader held an old snapshot", s.wal.restarts)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}

			for range (walRetryLooks + 2) * walCheckEvery {
				put(false)
			}
			got := walSize()
			if keep && (s.wal.restarts == 0 || got >= walRestartBytes) {
				t.Errorf("after the reader left: %d forced checkpoints finished, WAL file %d KiB, want at least one and under %d MiB", s.wal.restarts, got>>10, walRestartBytes>>20)
			}
			if !keep && got < walRestartBytes {
				t.Errorf("without the keeper the WAL file shrank to %d KiB: the test no longer shows what the keeper does", got>>10)
			}
			// Nothing was lost on the way.
			ids := listIDs(t, s, "t")
			if len(ids) != l.step {
				t.Errorf("%d checkpoints listed, want %d", len(ids), l.step)
			}
		})
	}
}

// TestWALRestartWaitsOutAnotherCheckpoint: SQLite refuses a checkpoint at
// once, without calling the busy handler, while another connection runs
// one (as the automatic checkpoint after every commit of another process
// does on a busy file). The forced checkpoint that finds the lock taken
// waited for nothing: it tries again within its wait, and truncates the
// file once the other one is done. Before, it gave up at the first
// refusal and waited 1,024 commits, and on a loaded machine, where those
// checkpoints last longer, the WAL grew past 64 MiB.
func TestWALRestartWaitsOutAnotherCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := newLine("t")
	put := func() {
		t.Helper()
		req := l.next()
		if err := s.Put(ctx, req); err != nil {
			t.Fatal(err)
		}
		l.committed(req)
	}
	conn := func() *sql.Conn {
		t.Helper()
		db, err := sql.Open(driverName, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	put()

	// A reader holds a snapshot, and a commit moves past it.
	reader := conn()
	tx, err := reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM checkpoints`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	put()

	// Another connection's checkpoint holds SQLite's checkpoint lock while
	// it waits for the reader.
	other := conn()
	if _, err := other.ExecContext(ctx, "PRAGMA busy_timeout = 60000"); err != nil {
		t.Fatal(err)
	}
	otherDone := make(chan error, 1)
	go func() {
		// Refused at once while the probe below holds the lock for a
		// moment: try again until it runs (and waits for the reader).
		for {
			var busy, frames, done int
			err := other.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &done)
			if err != nil || frames != -1 {
				otherDone <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	probe := conn()
	for start := time.Now(); ; {
		var busy, frames, done int
		if err := probe.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done); err != nil {
			t.Fatal(err)
		}
		if frames == -1 {
			break // it could not start: the other one holds the lock, waiting for the reader
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the other connection's checkpoint never took the checkpoint lock")
		}
		time.Sleep(time.Millisecond)
	}

	// The reader leaves once the forced checkpoint was refused.
	collisions := 0
	s.wal.wait = time.Minute // generous: nothing here depends on the machine's speed
	s.wal.collided = func() {
		if collisions++; collisions == 1 {
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		}
	}
	got := s.restartWAL(ctx, walRestartWait)
	if collisions == 0 {
		_ = tx.Rollback() // let the other checkpoint finish
		t.Error("the forced checkpoint did not report the refusal and try again")
	}
	if got != walRestarted {
		t.Errorf("the forced checkpoint came to %d after %d refusals, want %d (walRestarted)", got, collisions, walRestarted)
	}
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() != 0 {
		t.Errorf("after the forced checkpoint the -wal is %v (%v), want empty", fi.Size(), err)
	}
	put() // the writer goes on
}

// TestRestartPlan: the nearer the WAL file is to the 64 MiB bound, the
// longer a forced checkpoint waits for readers and the sooner the keeper
// tries again after one a reader held. With the plain plan near the
// bound, a reader slower than 100 ms on a loaded machine let the file
// grow by 1,024 commits before the next try, past the bound.
func TestRestartPlan(t *testing.T) {
	for _, c := range []struct {
		size     int64
		wait     time.Duration
		skip     int
		whatItIs string
	}{
		{walRestartBytes, walRestartWait, walRetryLooks, "at the restart size"},
		{40<<20 - 1, walRestartWait, walRetryLooks, "just under 40 MiB"},
		{40 << 20, 2 * walRestartWait, walRetryLooks / 4, "at 40 MiB"},
		{walUrgentBytes - 1, 2 * walRestartWait, walRetryLooks / 4, "just under the urgent size"},
		{walUrgentBytes, 5 * walRestartWait, 0, "at the urgent size"},
		{1 << 30, 5 * walRestartWait, 0, "far past the bound"},
	} {
		wait, skip := restartPlan(c.size)
		if wait != c.wait || skip != c.skip {
			t.Errorf("restartPlan(%d) (%s) = %v, %d looks; want %v, %d", c.size, c.whatItIs, wait, skip, c.wait, c.skip)
		}
	}
}
