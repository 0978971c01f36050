package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var _ checkpoint.Joiner = (*Saver)(nil)

// joinTx is the checkpoint.SQLTx a Join gets: the saver's write
// transaction on its writer connection, valid only while the Join runs.
type joinTx struct{ t *wtx }

var _ checkpoint.SQLTx = joinTx{}

// DB returns the saver's pool (Saver.DB): a store opened on it shares
// the saver's file and may run its statements in this transaction.
func (j joinTx) DB() *sql.DB { return j.t.s.db }

// ExecContext runs a statement in the saver's transaction.
func (j joinTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return j.t.s.wconn.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the saver's transaction.
func (j joinTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return j.t.s.wconn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query of one row in the saver's transaction.
func (j joinTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return j.t.s.wconn.QueryRowContext(ctx, query, args...)
}

// join runs the request's joins in the open transaction, after its own
// statements: an error of one rolls everything back and is returned as
// it is.
func (t *wtx) join(joins []checkpoint.Join) error {
	for _, j := range joins {
		if err := j(t.ctx, joinTx{t}); err != nil {
			return errRollback{err}
		}
	}
	return nil
}

// Fenced implements checkpoint.Joiner: in one IMMEDIATE transaction it
// reads the thread's lease row and runs j only while owner holds the
// lease at the epoch it took it (live, or lapsed with nobody having taken
// it since). It returns an error wrapping checkpoint.ErrInvalid for an
// empty thread or owner, a *checkpoint.BusyError when the lease is
// another owner's, was released since, or was never taken, j's error as
// it is (nothing of j is written), and a *StoreError when SQLite fails.
func (s *Saver) Fenced(ctx context.Context, thread, owner string, j checkpoint.Join) error {
	if err := validThread(thread); err != nil {
		return err
	}
	if owner == "" || j == nil {
		return fmt.Errorf("%w: a fenced write needs an owner and work to run", checkpoint.ErrInvalid)
	}
	op := opInfo{op: "fenced write", thread: thread}
	return s.write(ctx, op, "sqlite.fenced", func(t *wtx) error {
		th, err := t.thread(thread)
		if err != nil {
			return err
		}
		if th.owner != owner {
			return errRollback{th.busyError(thread, "", checkpoint.Lease{Owner: owner, Held: true})}
		}
		return t.join([]checkpoint.Join{j})
	})
}
