package sqlite

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// copySchema1 copies testdata/schema1.sqlite (a file written by the
// schema-1 code, see schema1History) into a temporary directory.
func copySchema1(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "schema1.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "schema1.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMigrateSchema1 (R14): a file written by the schema-1 code opens with
// this code, is migrated to schema 2 in one transaction (blobs folded into
// the rows of the checkpoints that wrote them, the blobs of pruned
// checkpoints into pruned rows, pending writes kept, leases kept), and
// every read returns what MemorySaver returns after the same history:
// List and Get of every checkpoint, with and without Have, Threads,
// PendingInterrupts and the leases; writes go on after the migration; a
// row whose schema-1 checksum failed is still reported corrupt.
func TestMigrateSchema1(t *testing.T) {
	ctx := t.Context()
	path := copySchema1(t)
	memClock := newFakeClock()
	memClock.now = schema1Start
	mem := checkpoint.NewMemorySaver(memClock.Now)
	if err := schema1History(ctx, mem, memClock); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	clock.now = memClock.Now()
	s := openAt(t, path, Config{Synchronous: SyncNormal, Now: clock.Now})
	var v, blobs, pruned int
	db := s.DB()
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, schemaVersion)
	}
	db.QueryRow("SELECT count(*) FROM sqlite_schema WHERE name = 'blobs'").Scan(&blobs)
	db.QueryRow("SELECT count(*) FROM checkpoints WHERE thread_id = 'pruned' AND pruned = 1").Scan(&pruned)
	if blobs != 0 || pruned != 6 {
		t.Errorf("after the migration: blobs tables %d, pruned rows of thread pruned %d; want 0, 6", blobs, pruned)
	}
	integrityOK(t, db)

	compare := func(what string, interrupts int) {
		t.Helper()
		for _, th := range schema1Threads {
			if th == "corrupt" {
				continue
			}
			want, err := mem.List(ctx, th, checkpoint.ListOptions{AllNamespaces: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.List(ctx, th, checkpoint.ListOptions{AllNamespaces: true})
			if err != nil {
				t.Fatalf("%s: list %s: %v", what, th, err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s: list %s (-memory +sqlite):\n%s", what, th, d)
			}
			for i, tp := range want {
				ref := tp.Ref()
				for _, have := range []map[string]string{nil, {}, tp.Checkpoint.Versions, want[min(i+1, len(want)-1)].Checkpoint.Versions} {
					a, errA := mem.Get(ctx, ref, checkpoint.GetOptions{Have: have})
					b, errB := s.Get(ctx, ref, checkpoint.GetOptions{Have: have})
					if errA != nil || errB != nil {
						t.Fatalf("%s: get %s: memory %v, sqlite %v", what, ref, errA, errB)
					}
					if d := cmp.Diff(a, b); d != "" {
						t.Errorf("%s: get %s have %v (-memory +sqlite):\n%s", what, ref, have, d)
					}
				}
			}
		}
		a, errA := mem.Threads(ctx, 0, 0)
		b, errB := s.Threads(ctx, 0, 0)
		if errA != nil || errB != nil {
			t.Fatalf("%s: threads: %v, %v", what, errA, errB)
		}
		if d := cmp.Diff(a, b, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: threads (-memory +sqlite):\n%s", what, d)
		}
		pa, _, errA := mem.PendingInterrupts(ctx, checkpoint.InterruptQuery{})
		pb, _, errB := s.PendingInterrupts(ctx, checkpoint.InterruptQuery{})
		if errA != nil || errB != nil || len(pa) != interrupts {
			t.Fatalf("%s: pending interrupts: %d, %v, %v", what, len(pa), errA, errB)
		}
		if d := cmp.Diff(pa, pb, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: pending interrupts (-memory +sqlite):\n%s", what, d)
		}
	}
	compare("after the migration", 1)

	// The corrupt blob is still corrupt.
	var ce *checkpoint.CorruptError
	if _, err := s.List(ctx, "corrupt", checkpoint.ListOptions{}); !errors.As(err, &ce) || ce.Thread != "corrupt" {
		t.Errorf("list of the tampered thread: %v, want a *checkpoint.CorruptError", err)
	}
	if _, err := s.Get(ctx, checkpoint.Ref{Thread: "corrupt"}, checkpoint.GetOptions{}); !errors.As(err, &ce) {
		t.Errorf("get of the tampered thread: %v, want a *checkpoint.CorruptError", err)
	}

	// Leases that mean the same in both schemas: renewed by a Claim,
	// released, claimed without a checkpoint.
	both := func(what string, f func(checkpoint.Saver) error) {
		t.Helper()
		if a, b := errClass(f(mem)), errClass(f(s)); a != b {
			t.Errorf("%s: memory %s, sqlite %s", what, a, b)
		}
	}
	head := func(th string) string {
		tp, err := mem.Get(ctx, checkpoint.Ref{Thread: th}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tp.Checkpoint.ID
	}
	other := checkpoint.Lease{Owner: "runner-x", TTL: time.Minute}
	both("claim of the renewed lease", func(sv checkpoint.Saver) error {
		return sv.Claim(ctx, checkpoint.Ref{Thread: "leased", ID: head("leased")}, other)
	})
	both("claim of the claimed thread", func(sv checkpoint.Saver) error { return sv.Claim(ctx, checkpoint.Ref{Thread: "claimed"}, other) })
	both("claim of the released thread", func(sv checkpoint.Saver) error {
		return sv.Claim(ctx, checkpoint.Ref{Thread: "released", ID: head("released")}, other)
	})

	// Writing goes on: the same history continues on both, with a prune.
	memClock.Advance(time.Second)
	clock.Advance(time.Second)
	// Same IDs on both: one generator, requests built once.
	gen := checkpoint.NewIDGenerator(clock.Now, nil)
	for _, th := range []string{"linear", "pruned", "forked"} {
		tp, err := mem.Get(ctx, checkpoint.Ref{Thread: th}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owner := tp.Checkpoint.Metadata.RunID
		id := gen.Next(tp.Checkpoint.ID)
		cp := checkpoint.Checkpoint{ID: id, ParentID: tp.Checkpoint.ID, CreatedAt: clock.Now(),
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: tp.Checkpoint.Metadata.Step + 1, Parents: map[string]string{}, RunID: owner},
			Versions: tp.Checkpoint.Versions, Channels: map[string][]checkpoint.Blob{}}
		cp.Versions = map[string]string{}
		for ch, v := range tp.Checkpoint.Versions {
			cp.Versions[ch] = v
		}
		cp.Versions["After"] = id
		cp.Channels["After"] = []checkpoint.Blob{{Version: id, Data: []byte(`"migrated"`)}}
		req := checkpoint.PutRequest{Thread: th, Checkpoint: cp, Lease: checkpoint.Lease{Owner: owner, TTL: time.Minute},
			ParentWrites: []checkpoint.TaskWrites{{TaskID: "task-after", Node: "after", Path: "pull", Writes: []checkpoint.Write{{Channel: "After", Value: []byte(`"migrated"`)}}}}}
		both("put after the migration on "+th, func(sv checkpoint.Saver) error { return sv.Put(ctx, req) })
	}
	both("prune after the migration", func(sv checkpoint.Saver) error {
		n, err := sv.(checkpoint.Pruner).Prune(ctx, "pruned", "", 1)
		if err == nil && n != 2 {
			t.Errorf("%T: pruned %d, want 2", sv, n)
		}
		return err
	})
	compare("after more writes", 0) // the interrupt's checkpoint is no longer the head
	integrityOK(t, db)
}

// TestMigrateRefusesForkedHead (R14): a schema-1 thread whose head is not
// its newest checkpoint cannot be represented in schema 2: Open fails with
// ErrCannotMigrate naming the thread, and the file stays on schema 1 with
// its tables.
func TestMigrateRefusesForkedHead(t *testing.T) {
	path := copySchema1(t)
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE threads SET head_checkpoint_id = (SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = 'forked') WHERE thread_id = 'forked'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path, Config{})
	if err == nil {
		s.Close()
		t.Fatal("Open migrated a thread whose head is not its newest checkpoint")
	}
	if !errors.Is(err, ErrCannotMigrate) || !strings.Contains(err.Error(), `"forked"`) {
		t.Fatalf("Open: %v, want ErrCannotMigrate naming thread forked", err)
	}
	db, err = sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v, n int
	db.QueryRow("PRAGMA user_version").Scan(&v)
	db.QueryRow("SELECT count(*) FROM blobs").Scan(&n)
	if v != 1 || n == 0 {
		t.Errorf("after the refused migration: user_version %d, %d blobs; want 1 and the blobs", v, n)
	}
}
