package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaVersion is the version of the ledger's tables that this code writes.
// It is stored in lockstep_ledger_meta; NewSQL refuses a newer one.
const SchemaVersion = 1

// The tables, created IF NOT EXISTS. Times are Unix nanoseconds; result and
// failure are JSON text, readable with the sqlite3 shell.
var schemaV1 = []string{
	`CREATE TABLE IF NOT EXISTS lockstep_ledger_meta (
		name    TEXT PRIMARY KEY,
		version INTEGER NOT NULL
	)`,
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
		completed_at INTEGER
	)`,
	`CREATE INDEX IF NOT EXISTS lockstep_ledger_created ON lockstep_ledger (created_at)`,
	`CREATE TABLE IF NOT EXISTS lockstep_messages (
		id         TEXT PRIMARY KEY,
		claimed_at INTEGER NOT NULL
	)`,
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

// NewSQL creates the ledger's tables in db if they do not exist and returns
// the ledger. It returns an error matching ErrSchemaVersion when db holds a
// newer schema, ErrInvalid for bad options, or the database's error.
func NewSQL(ctx context.Context, db *sql.DB, opts Options) (*SQL, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	l := &SQL{db: db, opts: o}
	err = l.tx(ctx, func(tx *sql.Tx) error {
		for _, s := range schemaV1 {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lockstep_ledger_meta (name, version) VALUES ('ledger', ?) ON CONFLICT (name) DO NOTHING`, SchemaVersion); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT version FROM lockstep_ledger_meta WHERE name = 'ledger'`).Scan(&v); err != nil {
			return err
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: the database has ledger schema version %d; this code knows up to %d", ErrSchemaVersion, v, SchemaVersion)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: create tables: %w", err)
	}
	return l, nil
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

const selectEntry = `SELECT key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at FROM lockstep_ledger WHERE key = ?`

func scanEntry(row *sql.Row) (Entry, error) {
	var (
		e               Entry
		state           string
		result, failure sql.NullString
		lease, created  int64
		completed       sql.NullInt64
	)
	if err := row.Scan(&e.Key, &e.Tool, &e.ArgsHash, &state, &result, &failure, &e.Owner, &lease, &created, &completed); err != nil {
		return Entry{}, err
	}
	e.State = State(state)
	e.LeaseUntil, e.CreatedAt = fromNanos(lease), fromNanos(created)
	if completed.Valid {
		e.CompletedAt = fromNanos(completed.Int64)
	}
	if result.Valid {
		e.Outcome.Result = json.RawMessage(result.String)
	}
	if failure.Valid {
		var f Failure
		if err := json.Unmarshal([]byte(failure.String), &f); err != nil {
			return Entry{}, fmt.Errorf("ledger: key %s: stored failure does not decode: %w", short(e.Key), err)
		}
		e.Outcome.Failure = &f
	}
	return e, nil
}

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

// Begin implements Ledger.
func (l *SQL) Begin(ctx context.Context, in Intent) (Entry, bool, error) {
	if err := checkIntent(&in); err != nil {
		return Entry{}, false, err
	}
	var (
		out     Entry
		started bool
	)
	err := l.tx(ctx, func(tx *sql.Tx) error {
		now := l.opts.Now()
		fresh := Entry{Key: in.Key, Tool: in.Tool, ArgsHash: in.ArgsHash, State: StatePending, Owner: in.Owner, LeaseUntil: now.Add(in.Lease), CreatedAt: now}
		res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_ledger (key, tool, args_hash, state, owner, lease_until, created_at) VALUES (?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
			in.Key, in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			out, started = fresh, true
			return nil
		}
		e, err := scanEntry(tx.QueryRowContext(ctx, selectEntry, in.Key))
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
			e.Owner, e.LeaseUntil = in.Owner, fresh.LeaseUntil
			_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger SET owner = ?, lease_until = ? WHERE key = ?`, e.Owner, nanos(e.LeaseUntil), in.Key)
			out, started = e, true
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger SET tool = ?, args_hash = ?, state = 'pending', result = NULL, failure = NULL, owner = ?, lease_until = ?, created_at = ?, completed_at = NULL WHERE key = ?`,
			in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now), in.Key)
		out, started = fresh, true
		return err
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
	)
	if errors.As(err, &kr) || errors.As(err, &ip) || errors.As(err, &ou) || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("ledger: %s key %s: %w", op, short(key), err)
}

// Complete implements Ledger.
func (l *SQL) Complete(ctx context.Context, key, owner string, o Outcome) error {
	result, failure, err := outcomeColumns(o)
	if err != nil {
		return err
	}
	err = l.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE lockstep_ledger SET state = 'done', result = ?, failure = ?, completed_at = ? WHERE key = ? AND state = 'pending' AND owner = ?`,
			result, failure, nanos(l.opts.Now()), key, owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
		}
		return nil
	})
	return l.wrap("complete", key, err)
}

// Release implements Ledger.
func (l *SQL) Release(ctx context.Context, key, owner string) error {
	err := l.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM lockstep_ledger WHERE key = ? AND state = 'pending' AND owner = ?`, key, owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
		}
		return nil
	})
	return l.wrap("release", key, err)
}

// Resolve implements Ledger.
func (l *SQL) Resolve(ctx context.Context, key string, o Outcome) error {
	result, failure, err := outcomeColumns(o)
	if err != nil {
		return err
	}
	err = l.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE lockstep_ledger SET state = 'done', result = ?, failure = ?, completed_at = ? WHERE key = ? AND state = 'pending'`,
			result, failure, nanos(l.opts.Now()), key)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		var one int
		switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM lockstep_ledger WHERE key = ?`, key).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w (key %s)", ErrNotFound, short(key))
		case err != nil:
			return err
		}
		return fmt.Errorf("%w: key %s already has an outcome", ErrNotHeld, short(key))
	})
	return l.wrap("resolve", key, err)
}

// Forget implements Ledger.
func (l *SQL) Forget(ctx context.Context, key string) error {
	err := l.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM lockstep_ledger WHERE key = ?`, key)
		return err
	})
	return l.wrap("forget", key, err)
}

// Get implements Ledger.
func (l *SQL) Get(ctx context.Context, key string) (Entry, error) {
	e, err := scanEntry(l.db.QueryRowContext(ctx, selectEntry, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, fmt.Errorf("%w (key %s)", ErrNotFound, short(key))
	}
	if err != nil {
		return Entry{}, l.wrap("get", key, err)
	}
	return e, nil
}

// Prune implements Ledger.
func (l *SQL) Prune(ctx context.Context) (int, error) {
	cut := nanos(l.opts.Now().Add(-l.opts.Retention))
	var n int64
	err := l.tx(ctx, func(tx *sql.Tx) error {
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
	if err != nil {
		return 0, fmt.Errorf("ledger: prune: %w", err)
	}
	return int(n), nil
}

// ClaimMessage implements Ledger.
func (l *SQL) ClaimMessage(ctx context.Context, id string) error {
	if err := checkID("message ID", id); err != nil {
		return err
	}
	err := l.tx(ctx, func(tx *sql.Tx) error { return l.claimIn(ctx, tx, id) })
	if err != nil && !errors.Is(err, ErrDuplicateMessage) {
		return fmt.Errorf("ledger: claim message: %w", err)
	}
	return err
}

// ClaimMessageTx claims a message ID inside the caller's transaction, so
// that the claim commits or rolls back with the effect it guards (the
// dedup row and the effect in one transaction). It returns what
// ClaimMessage returns; the caller must roll back on ErrDuplicateMessage.
func (l *SQL) ClaimMessageTx(ctx context.Context, tx *sql.Tx, id string) error {
	if err := checkID("message ID", id); err != nil {
		return err
	}
	return l.claimIn(ctx, tx, id)
}

func (l *SQL) claimIn(ctx context.Context, tx *sql.Tx, id string) error {
	now := l.opts.Now()
	res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_messages (id, claimed_at) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET claimed_at = excluded.claimed_at WHERE lockstep_messages.claimed_at <= ?`,
		id, nanos(now), nanos(now.Add(-l.opts.Retention)))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w (message %q)", ErrDuplicateMessage, quoteID(id))
	}
	return nil
}
