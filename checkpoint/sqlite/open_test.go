package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestPragmasOnEveryPooledConnection (R09): WAL, the synchronous setting,
// busy_timeout, foreign keys and auto_vacuum are set on every pooled
// connection, not only on the first one: 8 distinct connections are held
// at once and each is asked.
func TestPragmasOnEveryPooledConnection(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		wantSync int
		wantBusy int
	}{
		{Config{MaxOpenConns: 10}, 2, 5000},
		{Config{Synchronous: SyncNormal, BusyTimeout: 1500 * time.Millisecond, MaxOpenConns: 10}, 1, 1500},
	} {
		t.Run(string(tc.cfg.Synchronous), func(t *testing.T) {
			s := openTemp(t, tc.cfg)
			ctx := t.Context()
			var conns []*sql.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for i := 0; i < 8; i++ {
				c, err := s.DB().Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			if n := s.DB().Stats().OpenConnections; n < 9 {
				t.Fatalf("open connections = %d, want 9 distinct (8 + the writer)", n)
			}
			type pragmas struct {
				Journal                string
				Sync, Busy, FK, Vacuum int
			}
			want := pragmas{Journal: "wal", Sync: tc.wantSync, Busy: tc.wantBusy, FK: 1, Vacuum: 2}
			for i, c := range conns {
				var got pragmas
				for _, q := range []struct {
					sql  string
					dest any
				}{
					{"PRAGMA journal_mode", &got.Journal}, {"PRAGMA synchronous", &got.Sync},
					{"PRAGMA busy_timeout", &got.Busy}, {"PRAGMA foreign_keys", &got.FK}, {"PRAGMA auto_vacuum", &got.Vacuum},
				} {
					if err := c.QueryRowContext(ctx, q.sql).Scan(q.dest); err != nil {
						t.Fatalf("conn %d: %s: %v", i, q.sql, err)
					}
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("conn %d pragmas (-want +got):\n%s", i, d)
				}
			}
			// Transactions begun through database/sql are IMMEDIATE: a
			// second one cannot start while the first holds the lock.
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var inTx bool
			conns[0].Raw(func(dc any) error {
				inTx = !dc.(interface{ AutoCommit() bool }).AutoCommit()
				return nil
			})
			if inTx {
				t.Fatal("conn 0 unexpectedly in a transaction")
			}
			if _, err := conns[0].ExecContext(ctx, "PRAGMA busy_timeout = 50"); err != nil {
				t.Fatal(err)
			}
			_, err = conns[0].ExecContext(ctx, "BEGIN IMMEDIATE")
			if !isBusy(err) {
				t.Fatalf("BEGIN IMMEDIATE while a BeginTx transaction is open: %v, want SQLITE_BUSY (BeginTx must take the write lock)", err)
			}
		})
	}
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSchemaTooNew (R14): a file whose user_version is newer than the code
// is refused with a *SchemaError matching ErrSchemaTooNew and naming both
// versions, and the file stays byte for byte as it was, whether it is in
// WAL or rollback-journal mode.
func TestSchemaTooNew(t *testing.T) {
	for _, mode := range []string{"wal", "delete"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "new.db")
			db, err := sql.Open("sqlite3", path+"?_journal_mode="+mode)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"CREATE TABLE future (x)", "INSERT INTO future VALUES (1)", "PRAGMA user_version = 99"} {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			before := fileBytes(t, path)
			s, err := Open(path, Config{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded on a newer schema")
			}
			var se *SchemaError
			if !errors.Is(err, ErrSchemaTooNew) || !errors.As(err, &se) || se.File != 99 || se.Code != schemaVersion {
				t.Fatalf("Open: %v (%#v), want *SchemaError{File: 99, Code: %d}", err, se, schemaVersion)
			}
			if after := fileBytes(t, path); !bytes.Equal(before, after) {
				t.Fatal("the file changed")
			}
			if _, err := os.Stat(path + "-wal"); err == nil && mode == "delete" {
				t.Error("a -wal file was created next to a rollback-journal database")
			}
		})
	}
}

// TestMigrationsIdempotent (R14): opening a file twice, or with two savers
// at once, applies the schema once; the second open writes nothing.
func TestMigrationsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s1 := openAt(t, path, Config{})
	ctx := t.Context()
	putLine(t, s1, "t", 3)
	s2 := openAt(t, path, Config{}) // second saver on the same file
	var v int
	if err := s2.DB().QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, schemaVersion)
	}
	closeChecked(t, s1)
	closeChecked(t, s2)
	before := fileBytes(t, path)
	s3 := openAt(t, path, Config{})
	closeChecked(t, s3)
	if after := fileBytes(t, path); !bytes.Equal(before, after) {
		for i := range min(len(before), len(after)) {
			if before[i] != after[i] {
				t.Logf("first difference at byte %d (page %d offset %d)", i, i/4096+1, i%4096)
				break
			}
		}
		t.Errorf("reopening a current file changed it (%d bytes before, %d after)", len(before), len(after))
	}
	s4 := openAt(t, path, Config{})
	if got := listIDs(t, s4, "t"); len(got) != 3 {
		t.Errorf("after reopen: %d checkpoints, want 3", len(got))
	}
	var n int
	if err := s4.DB().QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE name = 'checkpoints'").Scan(&n); err != nil || n != 1 {
		t.Errorf("checkpoints tables: %d, %v", n, err)
	}
}

// TestOpenRefusesNotADatabase: a file that is not SQLite gives an error
// wrapping the driver's, and is not modified.
func TestOpenRefusesNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	junk := bytes.Repeat([]byte("this is not a database "), 300)
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Config{})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded on junk")
	}
	if !bytes.Equal(fileBytes(t, path), junk) {
		t.Error("the junk file was modified")
	}
}

// TestConfigValidation: zero values mean defaults; invalid fields give a
// *ConfigError naming the field and matching ErrInvalidConfig.
func TestConfigValidation(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path  string
		cfg   Config
		field string
	}{
		{"", Config{}, "path"},
		{":memory:", Config{}, "path"},
		{"file:x.db", Config{}, "path"},
		{filepath.Join(dir, "a?b.db"), Config{}, "path"},
		{filepath.Join(dir, "x.db"), Config{Synchronous: "OFF"}, "Synchronous"},
		{filepath.Join(dir, "x.db"), Config{BusyTimeout: -time.Second}, "BusyTimeout"},
		{filepath.Join(dir, "x.db"), Config{BusyTimeout: 2 * time.Hour}, "BusyTimeout"},
		{filepath.Join(dir, "x.db"), Config{MaxOpenConns: 1}, "MaxOpenConns"},
	} {
		s, err := Open(tc.path, tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q, %+v) succeeded", tc.path, tc.cfg)
			continue
		}
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("Open(%q, %+v) = %v, want a *ConfigError on %s", tc.path, tc.cfg, err, tc.field)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Error("an invalid Config created the file")
	}
	s := openTemp(t, Config{Synchronous: "normal"})
	if s.cfg.sync != SyncNormal || s.cfg.busyMillis != 5000 || s.cfg.maxOpenConns != DefaultMaxOpenConns {
		t.Errorf("defaults: %+v", s.cfg)
	}
}

// TestClosedSaver: every operation after Close fails with ErrClosed, Close
// is idempotent, and no connection stays open (R49).
func TestClosedSaver(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "c.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	putLine(t, s, "t", 2)
	closeChecked(t, s)
	closeChecked(t, s)
	ctx := context.Background()
	ref := checkpoint.Ref{Thread: "t"}
	lease := checkpoint.Lease{Owner: "o", TTL: time.Second}
	for name, err := range map[string]error{
		"get":    func() error { _, err := s.Get(ctx, ref, checkpoint.GetOptions{}); return err }(),
		"list":   func() error { _, err := s.List(ctx, "t", checkpoint.ListOptions{}); return err }(),
		"claim":  s.Claim(ctx, ref, lease),
		"delete": s.DeleteThread(ctx, "t"),
		"vacuum": s.Vacuum(ctx, 0),
		"writes": s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: "x"}, Lease: lease}),
	} {
		if !errors.Is(err, checkpoint.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// openNoPanic calls Open and turns a panic into a test failure naming the
// case.
func openNoPanic(t *testing.T, name, path string) (s *Saver, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s: Open(%q) panicked: %v", name, path, p)
		}
	}()
	return Open(path, Config{})
}

// typedOpenFailure reports whether err is one of the typed failures a
// damaged file may give: a driver error with code SQLITE_NOTADB or
// SQLITE_CORRUPT, a *StoreError, or a *checkpoint.CorruptError. what names
// the kind found, for the log.
func typedOpenFailure(err error) (what string, ok bool) {
	var de sqlite3.Error
	if errors.As(err, &de) && (de.Code == sqlite3.ErrNotADB || de.Code == sqlite3.ErrCorrupt) {
		what = "sqlite3.Error code " + de.Code.Error()
		ok = true
	}
	var se *StoreError
	if errors.As(err, &se) {
		what += " in a *StoreError"
		ok = true
	}
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) {
		what += " in a *checkpoint.CorruptError"
		ok = true
	}
	return what, ok
}

// TestOpenZeroedHeader (R12 c): a database the saver wrote, closed, then
// its header (and, in a second case, the first byte of page 1's b-tree
// header too) overwritten with zeros. Open does not panic, fails with an
// error wrapping the driver's SQLITE_NOTADB or SQLITE_CORRUPT, and leaves
// the file byte for byte as it was: it does not try to repair it.
func TestOpenZeroedHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // bytes zeroed from offset 0
	}{
		{"header bytes 0-99", 100},
		{"header and first b-tree byte 0-100", 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "zeroed.db")
			s, err := Open(path, Config{})
			if err != nil {
				t.Fatal(err)
			}
			putLine(t, s, "t", 3)
			putLine(t, s, "u", 2)
			closeChecked(t, s)
			if _, err := os.Stat(path + "-wal"); err == nil {
				t.Fatalf("%s: a -wal file is left after Close: the zeroed main file would not be all there is", tc.name)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, tc.n), 0); err != nil {
				f.Close()
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			before := fileBytes(t, path)
			s2, err := openNoPanic(t, tc.name, path)
			if err == nil {
				// Should a driver ever open it, reading must fail, typed.
				_, gerr := s2.Get(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				closeChecked(t, s2)
				if _, ok := typedOpenFailure(gerr); !ok {
					t.Errorf("%s: Open succeeded and Get = %v (%T), want a typed failure", tc.name, gerr, gerr)
				}
			} else if what, ok := typedOpenFailure(err); !ok {
				t.Errorf("%s: Open = %v (%T), want an error wrapping SQLITE_NOTADB or SQLITE_CORRUPT", tc.name, err, err)
			} else {
				t.Logf("%s: Open refused the file: %s", tc.name, what)
			}
			if !bytes.Equal(before, fileBytes(t, path)) {
				t.Errorf("%s: Open changed the damaged file", tc.name)
			}
		})
	}
}

// foreignDB writes a SQLite file another program could have made: one
// table of its own and the given user_version (its migration counter).
func foreignDB(t *testing.T, version int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)", "INSERT INTO orders (item) VALUES ('tea')",
		"PRAGMA user_version = " + strconv.Itoa(version)} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestOpenExistingChangesNothing: OpenExisting opens only a lockstep
// database at the current schema. Any other file (missing, empty,
// another program's database, an older or newer lockstep's) is refused
// with its typed error and left byte for byte as it was, and no file is
// created; Open refuses another program's database that has a schema
// version of its own, and migrates the rest.
func TestOpenExistingChangesNothing(t *testing.T) {
	current := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "l.db")
		s := openAt(t, path, Config{})
		putLine(t, s, "t", 2)
		closeChecked(t, s)
		return path
	}
	for _, tc := range []struct {
		name     string
		file     func(t *testing.T) string // "" content: no file
		existing []error                   // what OpenExisting's error matches; nil: it opens
		open     []error                   // what Open's error matches; nil: it opens
	}{
		{name: "missing", file: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.db") },
			existing: []error{ErrNotLockstep, fs.ErrNotExist}},
		{name: "empty", file: func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "empty.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, existing: []error{ErrNotLockstep, fs.ErrNotExist}},
		{name: "app database", file: func(t *testing.T) string { return foreignDB(t, 0) }, existing: []error{ErrNotLockstep}},
		{name: "app database with a schema version", file: func(t *testing.T) string { return foreignDB(t, 1) },
			existing: []error{ErrNotLockstep}, open: []error{ErrNotLockstep}},
		{name: "newer", file: func(t *testing.T) string { return foreignDB(t, schemaVersion+5) },
			existing: []error{ErrSchemaTooNew}, open: []error{ErrSchemaTooNew}},
		{name: "schema 1", file: copySchema1, existing: []error{ErrSchemaTooOld}},
		{name: "current", file: current},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			before, statErr := os.ReadFile(path)
			s, err := OpenExisting(path, Config{})
			if tc.existing == nil {
				if err != nil {
					t.Fatalf("OpenExisting: %v", err)
				}
				if _, err := s.Get(t.Context(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); err != nil {
					t.Errorf("Get: %v", err)
				}
				closeChecked(t, s)
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("OpenExisting succeeded")
			}
			for _, want := range tc.existing {
				if !errors.Is(err, want) {
					t.Errorf("OpenExisting: %v, want it to match %v", err, want)
				}
			}
			if after, err := os.ReadFile(path); (statErr == nil) != (err == nil) || !bytes.Equal(before, after) {
				t.Fatal("OpenExisting changed or created the file")
			}
			for _, suffix := range []string{"-wal", "-journal"} {
				if _, err := os.Stat(path + suffix); err == nil && tc.name != "schema 1" {
					t.Errorf("OpenExisting left a %s file", suffix)
				}
			}
			if statErr != nil || len(before) == 0 {
				return // Open creates those: TestOpen covers it
			}
			s, err = Open(path, Config{})
			if tc.open == nil {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				closeChecked(t, s)
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			for _, want := range tc.open {
				if !errors.Is(err, want) {
					t.Errorf("Open: %v, want it to match %v", err, want)
				}
			}
			if after := fileBytes(t, path); !bytes.Equal(before, after) {
				t.Fatal("Open changed the file it refused")
			}
		})
	}
}

// TestOpenSharesAnAppDatabase: Open adds lockstep's tables to a database
// of another program that has no schema version, beside its own tables.
func TestOpenSharesAnAppDatabase(t *testing.T) {
	path := foreignDB(t, 0)
	s := openAt(t, path, Config{})
	putLine(t, s, "t", 2)
	var item string
	if err := s.DB().QueryRowContext(t.Context(), "SELECT item FROM orders").Scan(&item); err != nil || item != "tea" {
		t.Errorf("the app's row: %q, %v", item, err)
	}
	closeChecked(t, s)
}
