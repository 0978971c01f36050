package checkpoint

import (
	"context"
	"database/sql"
)

// Join is work of another store on the saver's own database that must
// commit in the saver's transaction or not at all (D16): an approval
// consumed with the save that carries its answer, a ledger outcome with
// the write that records the result. A Joiner runs it inside its
// transaction once the request's own checks (head, lease, fence) have
// passed and before it commits, so that the work is fenced exactly as the
// request is (D17), and lands exactly when the request does.
//
// tx is the saver's transaction: an SQLTx for savers on database/sql
// (package checkpoint/sqlite); package postgres documents its own. Work
// that cannot use tx (another database, another backend) returns an error
// matching ErrNotJoinable. Any error rolls the whole transaction back and
// is returned to the caller as it is, except a failure of the database
// itself (the driver's error, however the store wrapped it), which the
// saver returns as it returns its own (the SQLite and Postgres savers: a
// *StoreError; SQLite's matches its ErrStoreBusy when the file was
// busy). Join is an alias of a plain func
// type, so that a store implements it without importing this package.
type Join = func(ctx context.Context, tx any) error

// SQLTx is the transaction a saver on database/sql hands a Join: its
// statements run in the saver's write transaction. DB is the pool the
// saver was opened on; a store opened on another pool (another file, or
// another handle on the same file) must refuse to run in it, with an
// error matching ErrNotJoinable, since its own statements would not be in
// this transaction.
type SQLTx interface {
	DB() *sql.DB
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Joiner is implemented by savers that run other stores' work in their
// transactions (D16): the Joins of a PutRequest or WritesRequest, and
// work fenced by a thread's lease on its own (Fenced). The SQLite and
// Postgres savers implement it; MemorySaver does not (it has no
// transaction another store could share), and package graph refuses to
// set Joins on a saver that is not one, with an error matching
// ErrNotJoinable, rather than save without them.
type Joiner interface {
	// Fenced runs j in one write transaction of the saver, after checking
	// in it that owner still holds the thread's lease at the epoch it took
	// it (live, or lapsed with nobody having taken it since: the rule of
	// Lease.Held), so that j commits only while the lease holds (D17). It
	// returns a *BusyError (ErrThreadBusy) and runs nothing when another
	// owner holds the lease or has released it since, or when the thread
	// has no lease at all; an error wrapping ErrInvalid for an empty
	// thread or owner; and j's error as it is, with nothing of j written.
	Fenced(ctx context.Context, thread, owner string, j Join) error
}
