package sqlite

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWALRestartsAfterAPinningReader: a reader that holds an old snapshot
// while the writer commits 40 MiB keeps SQLite from copying the WAL back,
// and the file grows past walRestartBytes. The writer's forced checkpoints
// fail while the reader holds on (and the commits go on), and the first
// one after the reader is gone truncates the file. With the keeper
// switched off the file stays at its high-water mark: that is the
// growth the keeper bounds.
func TestWALRestartsAfterAPinningReader(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB")
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
