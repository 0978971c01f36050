package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	sqlite3 "github.com/mattn/go-sqlite3"

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
// statements: an error of one rolls everything back. The store's own
// answers (a missing approval, a lost intent, ErrNotJoinable) are
// returned as they are; a failure of SQLite itself, which a store on
// database/sql hands back as the driver's error, however wrapped, is
// returned as the saver's other failures are, a *StoreError naming the
// operation (matching ErrStoreBusy when SQLite was busy), as the Postgres
// saver's stores return theirs.
func (t *wtx) join(joins []checkpoint.Join) error {
	for _, j := range joins {
		if err := j(t.ctx, joinTx{t}); err != nil {
			if isDriverError(err) {
				return err // write wraps it in a *StoreError
			}
			return errRollback{err}
		}
	}
	return nil
}

// isDriverError reports whether err is a failure of the database rather
// than a store's answer: SQLite's error, or database/sql's for a
// connection or transaction it can no longer use, not already a
// *StoreError.
func isDriverError(err error) bool {
	var se *StoreError
	if errors.As(err, &se) {
		return false
	}
	var e sqlite3.Error
	var ep *sqlite3.Error
	return errors.As(err, &e) || errors.As(err, &ep) && ep != nil ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone)
}

// Fenced implements checkpoint.Joiner: in one IMMEDIATE transaction it
// reads the thread's lease row and runs j only while owner holds the
// lease at the epoch it took it (live, or lapsed with nobody having taken
// it since). It returns an error wrapping checkpoint.ErrInvalid for an
// empty thread or owner, a *checkpoint.BusyError when the lease is
// another owner's, was released since, or was never taken, j's error as
// it is (nothing of j is written), and a *StoreError when SQLite fails,
// in j's statements too.
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
