package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// fakeFence is a saver on database/sql as the SQL ledger sees it: DB()
// names the pool it is opened on, and Fenced runs the work in a
// transaction on tx's pool (its own, unless the test says otherwise),
// committed when the work succeeds.
type fakeFence struct {
	db, tx *sql.DB
}

func (f fakeFence) DB() *sql.DB { return f.db }

func (f fakeFence) Fenced(ctx context.Context, thread, owner string, work func(ctx context.Context, tx any) error) error {
	pool := f.tx
	if pool == nil {
		pool = f.db
	}
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := work(ctx, sqlTx{tx, pool}); err != nil {
		return err
	}
	return tx.Commit()
}

// sqlTx is checkpoint.SQLTx over a *sql.Tx of pool.
type sqlTx struct {
	*sql.Tx
	pool *sql.DB
}

func (t sqlTx) DB() *sql.DB { return t.pool }

// fencerOnly is a Fence that is not on database/sql at all.
type fencerOnly struct{}

func (fencerOnly) Fenced(context.Context, string, string, func(context.Context, any) error) error {
	return nil
}

// TestSQLForeignDatabase: a SQL ledger used with a saver on another
// database, whether found when it is opened (Options.Fence) or when its
// work runs in another database's transaction (a fenced Begin, the work
// of CompleteJoin), fails with an error matching checkpoint.ErrNotJoinable,
// as checkpoint.Join asks of a store that cannot use the saver's
// transaction (and as the Postgres ledger's does), and ErrInvalid, as the
// ledger documents; and nothing is written.
func TestSQLForeignDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, other := openDB(t, filepath.Join(dir, "l.db")), openDB(t, filepath.Join(dir, "other.db"))
	// Both databases have the ledger's tables, so that a write that went
	// to either would land.
	for _, pool := range []*sql.DB{db, other} {
		if _, err := ledger.NewSQL(ctx, pool, ledger.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	in := ledger.Intent{Key: "k-1", Tool: "pay", ArgsHash: "h", Owner: "run-1/a", Thread: "t", Run: "run-1", Lease: time.Minute}
	done := ledger.Outcome{Result: json.RawMessage(`{"id":"p-1"}`)}
	open := func(fence ledger.Fencer) func() error {
		return func() error { _, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: fence}); return err }
	}
	// fenced is a ledger on db whose Fence runs the work in a
	// transaction on tx's pool.
	fenced := func(t *testing.T, tx *sql.DB) *ledger.SQL {
		l, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: fakeFence{db: db, tx: tx}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name string
		call func(t *testing.T) error
	}{
		{"opened with a saver on another database", func(*testing.T) error { return open(fakeFence{db: other})() }},
		{"opened with a saver not on database/sql", func(*testing.T) error { return open(fencerOnly{})() }},
		{"a fenced Begin in another database's transaction", func(t *testing.T) error {
			_, _, err := fenced(t, other).Begin(ctx, in)
			return err
		}},
		{"CompleteJoin in another database's transaction", func(t *testing.T) error {
			return fakeFence{db: other}.Fenced(ctx, "t", "run-1", fenced(t, nil).CompleteJoin(in.Key, in.Owner, done))
		}},
		{"CompleteJoin in a transaction not on database/sql", func(t *testing.T) error {
			return fenced(t, nil).CompleteJoin(in.Key, in.Owner, done)(ctx, struct{}{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(t)
			if !errors.Is(err, checkpoint.ErrNotJoinable) || !errors.Is(err, ledger.ErrInvalid) {
				t.Errorf("%v: want an error matching checkpoint.ErrNotJoinable and ledger.ErrInvalid", err)
			}
			for name, pool := range map[string]*sql.DB{"the ledger's": db, "the other": other} {
				var n int
				if err := pool.QueryRowContext(ctx, `SELECT count(*) FROM lockstep_ledger`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Errorf("%s database holds %d ledger rows, want none", name, n)
				}
			}
		})
	}
}
