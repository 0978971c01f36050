package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// SchemaVersion is the version of the ledger's tables that this code writes.
// It is stored in lockstep_ledger_meta; NewSQL upgrades an older one in
// place and refuses a newer one.
//
// Versions:
//
//   - 1: lockstep_ledger, and lockstep_messages keyed by the message ID
//     alone.
//   - 2: lockstep_messages keyed by (scope, id), with the payload's
//     fingerprint (R44). The rows of version 1 are kept with an empty
//     scope and an empty fingerprint: such a row is a claim of its ID in
//     every scope, with an unknown payload, so a redelivery of a message
//     claimed before the upgrade is refused with ErrDuplicateMessage
//     (never ErrDuplicateMismatch) whatever its scope, until the row
//     expires after the retention. New claims never have an empty scope
//     or fingerprint.
//   - 3: lockstep_ledger records the graph run that holds an intent
//     (Intent.Thread and Intent.Run, as thread_id and run_id). Rows of
//     version 2 get empty ones: their intents are abandoned only when
//     their lease ends, as before.
//   - 4: every row of lockstep_ledger and lockstep_messages carries a
//     checksum (crc) over its key and all it holds, so that a row
//     damaged, or copied from another key, does not verify (see the
//     package documentation, "Stored rows"). The upgrade computes the
//     checksums of the rows of version 3 once, in its transaction.
const SchemaVersion = 4

// schemaMeta holds the version of the other tables.
const schemaMeta = `CREATE TABLE IF NOT EXISTS lockstep_ledger_meta (
	name    TEXT PRIMARY KEY,
	version INTEGER NOT NULL
)`

// The tables of the current version, created IF NOT EXISTS. Times are Unix
// nanoseconds; result and failure are JSON text, readable with the sqlite3
// shell. TEXT compares with SQLite's BINARY collation: exact bytes.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS lockstep_ledger (
		key          TEXT PRIMARY KEY,
		tool         TEXT NOT NULL,
		args_hash    TEXT NOT NULL,
		state        TEXT NOT NULL CHECK (state IN ('pending', 'done')),
		result       TEXT,
		failure      TEXT,
		owner        TEXT NOT NULL,
		lease_until  INTEGER NOT NULL,
		created_at   INTEGER NOT NULL,
		completed_at INTEGER,
		thread_id    TEXT NOT NULL DEFAULT '',
		run_id       TEXT NOT NULL DEFAULT '',
		crc          INTEGER NOT NULL DEFAULT -1
	)`,
	`CREATE INDEX IF NOT EXISTS lockstep_ledger_created ON lockstep_ledger (created_at)`,
	`CREATE TABLE IF NOT EXISTS lockstep_messages (
		scope       TEXT NOT NULL,
		id          TEXT NOT NULL,
		fingerprint TEXT NOT NULL,
		claimed_at  INTEGER NOT NULL,
		crc         INTEGER NOT NULL DEFAULT -1,
		PRIMARY KEY (scope, id)
	)`,
}

// messagesV2 is the DDL of the messages table of version 2 (used by the
// upgrade from version 1, and never changed): table is its name, after
// "IF NOT EXISTS" or not.
func messagesV2(table string) string {
	return `CREATE TABLE ` + table + ` (
		scope       TEXT NOT NULL,
		id          TEXT NOT NULL,
		fingerprint TEXT NOT NULL,
		claimed_at  INTEGER NOT NULL,
		PRIMARY KEY (scope, id)
	)`
}

// migrations[v] upgrades the tables from version v to v+1, in the
// transaction of NewSQL: all of them commit, or none.
var migrations = map[int][]string{
	// 1 → 2: lockstep_messages gains a scope and a fingerprint, and its key
	// becomes (scope, id). SQLite cannot change a primary key in place, so
	// the table is rebuilt; the old rows keep their claim time and get an
	// empty scope and fingerprint (see SchemaVersion).
	1: {
		messagesV2("lockstep_messages_v2"),
		`INSERT INTO lockstep_messages_v2 (scope, id, fingerprint, claimed_at) SELECT '', id, '', claimed_at FROM lockstep_messages`,
		`DROP TABLE lockstep_messages`,
		`ALTER TABLE lockstep_messages_v2 RENAME TO lockstep_messages`,
	},
	// 2 → 3: the run holding an intent.
	2: {
		`ALTER TABLE lockstep_ledger ADD COLUMN thread_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE lockstep_ledger ADD COLUMN run_id TEXT NOT NULL DEFAULT ''`,
	},
	// 3 → 4: checksums bound to the key. The default (-1) is one no row
	// verifies with; migrationData[3] sets every row's own.
	3: {
		`ALTER TABLE lockstep_ledger ADD COLUMN crc INTEGER NOT NULL DEFAULT -1`,
		`ALTER TABLE lockstep_messages ADD COLUMN crc INTEGER NOT NULL DEFAULT -1`,
	},
}

// migrationData[v] rewrites rows in Go after the statements of
// migrations[v], in the same transaction.
var migrationData = map[int]func(ctx context.Context, tx *sql.Tx) error{
	3: checksumRows,
}

// SQL is a Ledger in SQL tables of a database/sql database: the SQLite file
// of the checkpoints (pass the SQLite saver's DB()). It imports no driver.
// Statements use SQLite's dialect ("?" placeholders, ON CONFLICT). Every
// write runs in its own transaction and begins with a write statement, so
// it takes the write lock at once even when the driver begins transactions
// DEFERRED; the saver's DSN begins them IMMEDIATE anyway. Several processes
// may share the file.
type SQL struct {
	db   *sql.DB
	opts Options
}

var _ Ledger = (*SQL)(nil)

// NewSQL creates the ledger's tables in db if they do not exist (or
// upgrades them), in one transaction, and returns the ledger. It returns
// an error matching ErrSchemaVersion, and changes nothing, when db holds a
// newer schema or a stored version no code writes (see storedVersion),
// ErrInvalid for bad options (and checkpoint.ErrNotJoinable as well for
// an Options.Fence that is not a saver on db), or the database's error.
func NewSQL(ctx context.Context, db *sql.DB, opts Options) (*SQL, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	if o.Fence != nil {
		if d, ok := o.Fence.(interface{ DB() *sql.DB }); !ok || d.DB() != db {
			return nil, fmt.Errorf("%w: %w: Options.Fence is not a saver on this database (open the ledger on the saver's DB(), and fence it with that saver)", ErrInvalid, checkpoint.ErrNotJoinable)
		}
	}
	l := &SQL{db: db, opts: o}
	err = l.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schemaMeta); err != nil {
			return err
		}
		v, err := storedVersion(ctx, tx)
		if err != nil {
			return err
		}
		from := v
		for ; v < SchemaVersion; v++ {
			for _, s := range migrations[v] {
				if _, err := tx.ExecContext(ctx, s); err != nil {
					return fmt.Errorf("upgrade from version %d: %w", v, err)
				}
			}
			if data := migrationData[v]; data != nil {
				if err := data(ctx, tx); err != nil {
					return fmt.Errorf("upgrade from version %d: %w", v, err)
				}
			}
		}
		for _, s := range schema {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		if from == SchemaVersion {
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger_meta SET version = ? WHERE name = 'ledger'`, SchemaVersion)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: create tables: %w", err)
	}
	return l, nil
}

// storedVersion reads the version of the ledger's tables in the set-up
// transaction. A fresh database gets the current version; one written by
// version 1 keeps its row (every version writes it with its tables, in
// one transaction) and is upgraded by the caller. A version no code
// writes (below 1, above SchemaVersion, not an integer), or the ledger's
// tables without a version row, is an error matching ErrSchemaVersion,
// and the caller's transaction is rolled back: nothing is changed.
func storedVersion(ctx context.Context, tx *sql.Tx) (int, error) {
	var kind string
	var stored any
	err := tx.QueryRowContext(ctx, `SELECT typeof(version), version FROM lockstep_ledger_meta WHERE name = 'ledger'`).Scan(&kind, &stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var tables int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('lockstep_ledger', 'lockstep_messages')`).Scan(&tables); err != nil {
			return 0, err
		}
		if tables > 0 {
			return 0, fmt.Errorf("%w: the database has the ledger's tables and no schema version for them in lockstep_ledger_meta: it was edited or damaged (nothing was changed)", ErrSchemaVersion)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lockstep_ledger_meta (name, version) VALUES ('ledger', ?)`, SchemaVersion); err != nil {
			return 0, err
		}
		return SchemaVersion, nil
	case err != nil:
		return 0, err
	}
	v, ok := stored.(int64)
	if kind != "integer" || !ok {
		return 0, fmt.Errorf("%w: the database's ledger schema version is %v, a %s value; versions are the integers 1 to %d: it was edited or damaged (nothing was changed)", ErrSchemaVersion, stored, kind, SchemaVersion)
	}
	if v > SchemaVersion || v < 1 {
		return 0, fmt.Errorf("%w: the database has ledger schema version %d; this code knows 1 to %d (nothing was changed)", ErrSchemaVersion, v, SchemaVersion)
	}
	return int(v), nil
}

// sqlExec is what the ledger's statements run on: its own *sql.Tx, or
// the transaction of a saver (checkpoint.SQLTx) it is fenced by or joins.
type sqlExec interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// saverTx is checkpoint.SQLTx: the transaction a saver on database/sql
// hands the work it runs.
type saverTx interface {
	sqlExec
	DB() *sql.DB
}

// errNotJoinable is the error of work run in a transaction that is not
// on the ledger's database: checkpoint.ErrNotJoinable, as checkpoint.Join
// asks of a store that cannot use the saver's transaction, and
// ErrInvalid, since the ledger was used with a saver it is not opened on.
func errNotJoinable(key string) error {
	return fmt.Errorf("%w: key %s: the saver's transaction is not on the ledger's database (fence the ledger with the saver it is opened on): %w", checkpoint.ErrNotJoinable, short(key), ErrInvalid)
}

// write runs fn in one write transaction: fenced by the lease of run on
// thread (Options.Fence) when the ledger has a fence and both are set,
// otherwise in a transaction of its own.
func (l *SQL) write(ctx context.Context, key, thread, run string, fn func(q sqlExec) error) error {
	if l.opts.Fence == nil || thread == "" || run == "" {
		return l.tx(ctx, func(tx *sql.Tx) error { return fn(tx) })
	}
	return l.opts.Fence.Fenced(ctx, thread, run, func(ctx context.Context, tx any) error {
		st, ok := tx.(saverTx)
		if !ok || st.DB() != l.db {
			return errNotJoinable(key)
		}
		return fn(st)
	})
}

// tx runs fn in a transaction and commits it when fn returns nil.
func (l *SQL) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n) }

// outcomeColumns are the result and failure columns of o.
func outcomeColumns(o Outcome) (result, failure sql.NullString, err error) {
	if o.Result != nil {
		result = sql.NullString{String: string(o.Result), Valid: true}
	}
	if o.Failure != nil {
		b, err := json.Marshal(o.Failure)
		if err != nil {
			return result, failure, err
		}
		failure = sql.NullString{String: string(b), Valid: true}
	}
	return result, failure, nil
}

// lockTables is the first statement of a transaction that reads before it
// writes: a write statement that changes nothing, so that the transaction
// takes SQLite's write lock at once even when the driver begins it
// DEFERRED (a read first would make its later write fail with
// SQLITE_BUSY when another writer committed in between).
const lockTables = `DELETE FROM lockstep_ledger WHERE 0`

// insert writes e under a new key and reports whether it did (false: the
// key has a row).
func insert(ctx context.Context, tx sqlExec, e Entry) (bool, error) {
	r, err := rowOf(e)
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_ledger (`+entryColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`, r.dest()...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// update replaces the row under e.Key, read and checked in the same
// transaction, by e.
func update(ctx context.Context, tx sqlExec, e Entry) error {
	r, err := rowOf(e)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger SET tool = ?, args_hash = ?, state = ?, result = ?, failure = ?, owner = ?,
		lease_until = ?, created_at = ?, completed_at = ?, thread_id = ?, run_id = ?, crc = ? WHERE key = ?`,
		r.tool, r.argsHash, r.state, r.result, r.failure, r.owner, r.lease, r.created, r.completed, r.thread, r.run, r.crc, r.key)
	return err
}

// Begin implements Ledger. It returns an error matching ErrInvalid for an
// empty or oversized key or owner or a negative lease, a *KeyReuseError,
// *InProgressError or *OutcomeUnknownError as Ledger.Begin says, a
// *CorruptError when the record under the key does not verify (nothing is
// written), an error matching checkpoint.ErrThreadBusy when the ledger is
// fenced (Options.Fence) and in.Run no longer holds in.Thread's lease
// (nothing is written), and the database's error, wrapped with the
// operation and key, when the transaction fails.
func (l *SQL) Begin(ctx context.Context, in Intent) (Entry, bool, error) {
	if err := checkIntent(&in); err != nil {
		return Entry{}, false, err
	}
	var (
		out     Entry
		started bool
	)
	err := l.write(ctx, in.Key, in.Thread, in.Run, func(tx sqlExec) error {
		now := l.opts.Now()
		fresh := Entry{Key: in.Key, Tool: in.Tool, ArgsHash: in.ArgsHash, State: StatePending, Owner: in.Owner, LeaseUntil: now.Add(in.Lease), CreatedAt: now,
			Thread: in.Thread, Run: in.Run}
		// The insert comes first: it takes the write lock at once.
		if ok, err := insert(ctx, tx, fresh); err != nil {
			return err
		} else if ok {
			out, started = fresh, true
			return nil
		}
		e, err := readEntry(ctx, tx, in.Key)
		if err != nil {
			return err
		}
		restart, err := decide(e, in, now, l.opts.Retention)
		if err != nil {
			return err
		}
		if !restart {
			out = e
			return nil
		}
		if e.State == StatePending { // taken over: keep its age
			e.Owner, e.LeaseUntil, e.Thread, e.Run = in.Owner, fresh.LeaseUntil, in.Thread, in.Run
			out, started = e, true
			return update(ctx, tx, e)
		}
		out, started = fresh, true
		return update(ctx, tx, fresh)
	})
	if err != nil {
		return Entry{}, false, l.wrap("begin", in.Key, err)
	}
	return out, started, nil
}

// wrap adds context to storage errors and leaves the ledger's own typed
// errors as they are.
func (l *SQL) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var (
		kr *KeyReuseError
		ip *InProgressError
		ou *OutcomeUnknownError
		ce *CorruptError
	)
	if errors.As(err, &kr) || errors.As(err, &ip) || errors.As(err, &ou) || errors.As(err, &ce) ||
		errors.Is(err, ErrNotHeld) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("ledger: %s key %s: %w", op, short(key), err)
}

// held reads the record under key in tx and returns it when owner holds
// its pending intent: an error matching ErrNotHeld otherwise, and a
// *CorruptError when it does not verify.
func held(ctx context.Context, tx sqlExec, key, owner string) (Entry, error) {
	e, err := readEntry(ctx, tx, key)
	if errors.Is(err, ErrNotFound) || err == nil && (e.State != StatePending || e.Owner != owner) {
		return Entry{}, fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
	}
	return e, err
}

// Complete implements Ledger. It returns an error matching ErrInvalid for
// an outcome that fails Outcome.Validate, one matching ErrNotHeld when
// owner does not hold a pending intent under key, a *CorruptError when the
// record does not verify (nothing is written), an error matching
// checkpoint.ErrThreadBusy when the ledger is fenced and the run that
// recorded the intent no longer holds its thread's lease (nothing is
// written), and the database's error, wrapped with the operation and key,
// when the transaction fails.
func (l *SQL) Complete(ctx context.Context, key, owner string, o Outcome) error {
	if err := o.Validate(); err != nil {
		return err
	}
	err := l.heldWrite(ctx, key, owner, func(tx sqlExec) error {
		if _, err := tx.ExecContext(ctx, lockTables); err != nil {
			return err
		}
		e, err := held(ctx, tx, key, owner)
		if err != nil {
			return err
		}
		e.State, e.Outcome, e.CompletedAt = StateDone, o, l.opts.Now()
		return update(ctx, tx, e)
	})
	return l.wrap("complete", key, err)
}

// heldWrite runs fn on the intent under key that owner holds: fenced by
// the lease of the graph run that recorded it (Entry.Thread and Run) when
// the ledger has a fence, otherwise in a transaction of its own. fn reads
// the record again in the transaction.
func (l *SQL) heldWrite(ctx context.Context, key, owner string, fn func(q sqlExec) error) error {
	if l.opts.Fence == nil {
		return l.tx(ctx, func(tx *sql.Tx) error { return fn(tx) })
	}
	e, err := readEntry(ctx, l.db, key)
	if errors.Is(err, ErrNotFound) || err == nil && (e.State != StatePending || e.Owner != owner) {
		return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
	}
	if err != nil {
		return err
	}
	return l.write(ctx, key, e.Thread, e.Run, func(q sqlExec) error {
		// The record is read again under the fence: the intent that
		// owner holds is still the one of that run.
		now, err := readEntry(ctx, q, key)
		if err == nil && (now.Thread != e.Thread || now.Run != e.Run) {
			return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
		}
		return fn(q)
	})
}

var _ Joiner = (*SQL)(nil)

// Fenced implements Joiner: it reports whether the ledger was opened
// with Options.Fence.
func (l *SQL) Fenced() bool { return l.opts.Fence != nil }

// CompleteJoin returns the work of Complete(key, owner, o), to run in the
// transaction of the saver the ledger is fenced by (graph.JoinWrite), so
// that the outcome commits with the write that saves the call's result
// (D16), and is fenced with it. It returns nil when the ledger has no
// Options.Fence (it shares no saver's transaction). The work fails as
// Complete does, except that an intent already completed (by a late
// result of an abandoned attempt) is left as it is, and with an error
// matching checkpoint.ErrNotJoinable (and ErrInvalid) when run in a
// transaction on another database.
func (l *SQL) CompleteJoin(key, owner string, o Outcome) func(ctx context.Context, tx any) error {
	if l.opts.Fence == nil {
		return nil
	}
	return func(ctx context.Context, tx any) error {
		st, ok := tx.(saverTx)
		if !ok || st.DB() != l.db {
			return errNotJoinable(key)
		}
		if err := o.Validate(); err != nil {
			return err
		}
		e, err := readEntry(ctx, st, key)
		if err == nil && e.State == StateDone {
			return nil // a late result was recorded first: it stays
		}
		e, err = held(ctx, st, key, owner)
		if err != nil {
			return l.wrap("complete", key, err)
		}
		e.State, e.Outcome, e.CompletedAt = StateDone, o, l.opts.Now()
		return l.wrap("complete", key, update(ctx, st, e))
	}
}

// Release implements Ledger. It fails as Complete does.
func (l *SQL) Release(ctx context.Context, key, owner string) error {
	err := l.heldWrite(ctx, key, owner, func(tx sqlExec) error {
		if _, err := tx.ExecContext(ctx, lockTables); err != nil {
			return err
		}
		if _, err := held(ctx, tx, key, owner); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM lockstep_ledger WHERE key = ?`, key)
		return err
	})
	return l.wrap("release", key, err)
}

// Resolve implements Ledger. It returns an error matching ErrInvalid for
// an outcome that fails Outcome.Validate, one matching ErrNotFound when
// there is no record under key, one matching ErrNotHeld when the record
// is already done, a *CorruptError when it does not verify (nothing is
// written), and the database's error, wrapped, when the transaction fails.
func (l *SQL) Resolve(ctx context.Context, key string, o Outcome) error {
	if err := o.Validate(); err != nil {
		return err
	}
	err := l.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, lockTables); err != nil {
			return err
		}
		e, err := readEntry(ctx, tx, key)
		if err != nil {
			return err
		}
		if e.State != StatePending {
			return fmt.Errorf("%w: key %s already has an outcome", ErrNotHeld, short(key))
		}
		e.State, e.Outcome, e.CompletedAt = StateDone, o, l.opts.Now()
		return update(ctx, tx, e)
	})
	return l.wrap("resolve", key, err)
}

// Forget implements Ledger. It deletes the record without reading it, so
// that it also removes a record that does not verify (the remedy of a
// *CorruptError, once someone has looked at it). It fails only with the
// database's error, wrapped with the operation and key.
func (l *SQL) Forget(ctx context.Context, key string) error {
	err := l.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM lockstep_ledger WHERE key = ?`, key)
		return err
	})
	return l.wrap("forget", key, err)
}

// Get implements Ledger. It returns an error matching ErrNotFound when
// there is no record under key, a *CorruptError when the record does not
// verify, and the database's error, wrapped, when the row cannot be read.
func (l *SQL) Get(ctx context.Context, key string) (Entry, error) {
	e, err := readEntry(ctx, l.db, key)
	if err != nil {
		return Entry{}, l.wrap("get", key, err)
	}
	return e, nil
}

// Prune implements Ledger. It reads and checks every row it would delete,
// then deletes them in one transaction. It returns a *CorruptError, and
// deletes nothing, when one of them does not verify (a corrupt record
// whose state or age says it expired must not be dropped unseen), and
// otherwise fails only with the database's error (prefixed "ledger:
// prune"), deleting nothing.
func (l *SQL) Prune(ctx context.Context) (int, error) {
	cut := nanos(l.opts.Now().Add(-l.opts.Retention))
	var n int64
	err := l.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, lockTables); err != nil {
			return err
		}
		if err := checkRows(ctx, tx, `SELECT `+entryColumns+` FROM lockstep_ledger WHERE state = 'done' AND created_at <= ?`, cut, func(sc rowScanner) error {
			var r entryRow
			if err := sc.Scan(r.dest()...); err != nil {
				return err
			}
			_, err := r.entry()
			return err
		}); err != nil {
			return err
		}
		if err := checkRows(ctx, tx, `SELECT `+claimColumns+` FROM lockstep_messages WHERE claimed_at <= ?`, cut, func(sc rowScanner) error {
			var r claimRow
			if err := sc.Scan(r.dest()...); err != nil {
				return err
			}
			return r.verify()
		}); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM lockstep_ledger WHERE state = 'done' AND created_at <= ?`,
			`DELETE FROM lockstep_messages WHERE claimed_at <= ?`,
		} {
			res, err := tx.ExecContext(ctx, q, cut)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	var ce *CorruptError
	if errors.As(err, &ce) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: prune: %w", err)
	}
	return int(n), nil
}

type rowScanner interface{ Scan(dest ...any) error }

// checkRows runs query with arg in tx and calls check on each row, until
// one fails.
func checkRows(ctx context.Context, tx *sql.Tx, query string, arg any, check func(rowScanner) error) error {
	rows, err := tx.QueryContext(ctx, query, arg)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := check(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ClaimMessage implements Ledger. The claim commits on its own; to commit
// it with the effect it guards, use ClaimMessageTx. It returns an error
// matching ErrInvalid for a bad claim, one matching ErrDuplicateMessage or
// a *DuplicateMismatchError for a claim already made within the retention,
// a *CorruptError when a stored claim of the ID does not verify (nothing
// is written), and the database's error (prefixed "ledger: claim message")
// otherwise.
func (l *SQL) ClaimMessage(ctx context.Context, c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	err := l.tx(ctx, func(tx *sql.Tx) error { return l.claimIn(ctx, tx, c) })
	var ce *CorruptError
	if err != nil && !errors.Is(err, ErrDuplicateMessage) && !errors.Is(err, ErrDuplicateMismatch) && !errors.As(err, &ce) {
		return fmt.Errorf("ledger: claim message: %w", err)
	}
	return err
}

// ClaimMessageTx claims a message inside the caller's transaction tx (on
// the ledger's database), so that the claim commits or rolls back with the
// effect it guards: the dedup row and the effect in one transaction. A
// crash before the commit leaves neither, and the redelivery is processed.
// It returns what ClaimMessage returns: nil when the claim wins; an error
// matching ErrDuplicateMessage, a *DuplicateMismatchError
// (ErrDuplicateMismatch), a *CorruptError or ErrInvalid, having written
// nothing in tx; or the database's error, after which the caller must roll
// tx back.
func (l *SQL) ClaimMessageTx(ctx context.Context, tx *sql.Tx, c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	return l.claimIn(ctx, tx, c)
}

// claimIn inserts the claim unless the ID has a claim in the scope, or one
// migrated from version 1 (an empty scope) that is live. The write comes
// first, so that the transaction takes the write lock at once; when it
// writes nothing, the stored claims of the ID are read and checked: a live
// one decides the error, and an expired one in the scope is replaced.
func (l *SQL) claimIn(ctx context.Context, tx *sql.Tx, c Claim) error {
	now := l.opts.Now()
	cut := nanos(now.Add(-l.opts.Retention))
	fresh := claimRow{scope: c.Scope, id: c.ID, fingerprint: c.Fingerprint, at: nanos(now)}
	fresh.crc = fresh.sum()
	res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_messages (`+claimColumns+`)
		SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM lockstep_messages WHERE scope = '' AND id = ? AND claimed_at > ?)
		ON CONFLICT (scope, id) DO NOTHING`,
		fresh.scope, fresh.id, fresh.fingerprint, fresh.at, fresh.crc, c.ID, cut)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	// The claim in the scope itself first (scope '' sorts last).
	rows, err := tx.QueryContext(ctx, `SELECT `+claimColumns+` FROM lockstep_messages WHERE id = ? AND (scope = ? OR scope = '') ORDER BY scope DESC`, c.ID, c.Scope)
	if err != nil {
		return fmt.Errorf("read the claim of message %q: %w", quoteID(c.ID), err)
	}
	var stored []claimRow
	for rows.Next() {
		var r claimRow
		if err := rows.Scan(r.dest()...); err != nil {
			rows.Close()
			return fmt.Errorf("read the claim of message %q: %w", quoteID(c.ID), err)
		}
		stored = append(stored, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the claim of message %q: %w", quoteID(c.ID), err)
	}
	own := false
	for _, r := range stored {
		if err := r.verify(); err != nil {
			return err
		}
		if r.at > cut {
			return duplicate(c, r.fingerprint, r.time())
		}
		own = own || r.scope == c.Scope
	}
	if !own {
		return fmt.Errorf("the claim of message %q in scope %q that stopped the insert is gone", quoteID(c.ID), quoteID(c.Scope))
	}
	// The claim in the scope expired: this one replaces it.
	_, err = tx.ExecContext(ctx, `UPDATE lockstep_messages SET fingerprint = ?, claimed_at = ?, crc = ? WHERE scope = ? AND id = ?`,
		fresh.fingerprint, fresh.at, fresh.crc, fresh.scope, fresh.id)
	return err
}
