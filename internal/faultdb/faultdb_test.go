package faultdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a minimal driver that records what reached it.
type fake struct {
	mu  sync.Mutex
	log []string
}

func (f *fake) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, s)
}

func (f *fake) Open(string) (driver.Conn, error) { return &fakeConn{f: f}, nil }

type fakeConn struct{ f *fake }

func (c *fakeConn) Prepare(q string) (driver.Stmt, error) { return &fakeStmt{f: c.f, q: q}, nil }
func (c *fakeConn) Close() error                          { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)             { c.f.record("BEGIN"); return &fakeTx{c.f}, nil }
func (c *fakeConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	c.f.record(q)
	return driver.RowsAffected(1), nil
}

type fakeTx struct{ f *fake }

func (t *fakeTx) Commit() error   { t.f.record("COMMIT"); return nil }
func (t *fakeTx) Rollback() error { t.f.record("ROLLBACK"); return nil }

type fakeStmt struct {
	f *fake
	q string
}

func (s *fakeStmt) Close() error  { return nil }
func (s *fakeStmt) NumInput() int { return -1 }
func (s *fakeStmt) Exec([]driver.Value) (driver.Result, error) {
	s.f.record(s.q)
	return driver.RowsAffected(1), nil
}
func (s *fakeStmt) Query([]driver.Value) (driver.Rows, error) {
	s.f.record(s.q)
	return &fakeRows{}, nil
}

type fakeRows struct{ done bool }

func (r *fakeRows) Columns() []string { return []string{"x"} }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = int64(1)
	return nil
}

var errInjected = errors.New("injected")

func open(t *testing.T) (*sql.DB, *Driver, *fake) {
	t.Helper()
	f := &fake{}
	d := New(f)
	c, err := d.OpenConnector("x")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db, d, f
}

// TestBeforeAndAfter: a fault before the operation keeps it from the base
// driver; a fault after lets it happen and still reports the error.
func TestBeforeAndAfter(t *testing.T) {
	for _, when := range []When{Before, After} {
		db, d, f := open(t)
		d.Arm(Fault{Op: OpExec, N: 2, When: when, Err: errInjected})
		if _, err := db.Exec("INSERT 1"); err != nil {
			t.Fatal(err)
		}
		_, err := db.Exec("INSERT 2")
		if !errors.Is(err, errInjected) {
			t.Fatalf("when=%d: second exec: %v", when, err)
		}
		reached := len(f.log) == 2
		if reached != (when == After) {
			t.Errorf("when=%d: base driver saw %v", when, f.log)
		}
		if _, err := db.Exec("INSERT 3"); err != nil {
			t.Errorf("transient fault fired again: %v", err)
		}
		if n := len(d.Events()); n != 1 {
			t.Errorf("events %d, want 1", n)
		}
	}
}

// TestPersistentAndMatch: a persistent fault keeps firing; Match narrows
// it to statements containing the text; SQL BEGIN/COMMIT count as Begin
// and Commit, as driver transactions do.
func TestPersistentAndMatch(t *testing.T) {
	db, d, _ := open(t)
	d.Arm(Fault{Op: OpExec, Match: "into writes", Mode: Persistent, Err: errInjected})
	d.Arm(Fault{Op: OpCommit, Err: errInjected})
	for i := 0; i < 3; i++ {
		if _, err := db.Exec("INSERT INTO writes VALUES (1)"); !errors.Is(err, errInjected) {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if _, err := db.Exec("INSERT INTO blobs VALUES (1)"); err != nil {
			t.Fatalf("unmatched statement failed: %v", err)
		}
	}
	if _, err := db.Exec("BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("COMMIT"); !errors.Is(err, errInjected) {
		t.Fatalf("COMMIT: %v", err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("transient commit fault fired twice: %v", err)
	}
	if d.Count(OpBegin) != 2 || d.Count(OpCommit) != 2 || d.Count(OpExec) != 6 {
		t.Errorf("counts: begin %d commit %d exec %d", d.Count(OpBegin), d.Count(OpCommit), d.Count(OpExec))
	}
	d.Reset()
	if _, err := db.Exec("INSERT INTO writes VALUES (1)"); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
}

// TestActionDelayAndRandom: an action and a delay run when a fault fires,
// and a seeded random schedule fails the same operations for the same
// seed.
func TestActionDelayAndRandom(t *testing.T) {
	db, d, _ := open(t)
	fired := false
	d.Arm(Fault{Op: OpQuery, Delay: 5 * time.Millisecond, Action: func() { fired = true }})
	start := time.Now()
	var x int
	if err := db.QueryRow("SELECT 1").Scan(&x); err != nil || !fired || time.Since(start) < 5*time.Millisecond {
		t.Fatalf("query: %v, action %v, %v", err, fired, time.Since(start))
	}
	pattern := func(seed uint64) []bool {
		d.Reset()
		d.ArmRandom(seed, 0.3, Before, []Op{OpExec}, errInjected)
		var out []bool
		for i := 0; i < 50; i++ {
			_, err := db.Exec("UPDATE x")
			out = append(out, err != nil)
		}
		return out
	}
	a, b := pattern(7), pattern(7)
	failures := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different faults")
		}
		if a[i] {
			failures++
		}
	}
	if failures == 0 || failures == 50 {
		t.Errorf("%d of 50 failed at rate 0.3", failures)
	}
}
