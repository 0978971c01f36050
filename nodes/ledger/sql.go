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
const SchemaVersion = 3

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
		run_id       TEXT NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX IF NOT EXISTS lockstep_ledger_created ON lockstep_ledger (created_at)`,
	messagesV2("IF NOT EXISTS lockstep_messages"),
}

// messagesV2 is the DDL of the messages table of version 2: table is its
// name, after "IF NOT EXISTS" or not.
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
// ErrInvalid for bad options, or the database's error.
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

const selectEntry = `SELECT key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id FROM lockstep_ledger WHERE key = ?`

func scanEntry(row *sql.Row) (Entry, error) {
	var (
		e               Entry
		state           string
		result, failure sql.NullString
		lease, created  int64
		completed       sql.NullInt64
	)
	if err := row.Scan(&e.Key, &e.Tool, &e.ArgsHash, &state, &result, &failure, &e.Owner, &lease, &created, &completed, &e.Thread, &e.Run); err != nil {
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

// Begin implements Ledger. It returns an error matching ErrInvalid for an
// empty or oversized key or owner or a negative lease, a *KeyReuseError, *InProgressError or
// *OutcomeUnknownError as Ledger.Begin says, and the database's error,
// wrapped with the operation and key, when the transaction fails.
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
		fresh := Entry{Key: in.Key, Tool: in.Tool, ArgsHash: in.ArgsHash, State: StatePending, Owner: in.Owner, LeaseUntil: now.Add(in.Lease), CreatedAt: now,
			Thread: in.Thread, Run: in.Run}
		res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_ledger (key, tool, args_hash, state, owner, lease_until, created_at, thread_id, run_id) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
			in.Key, in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now), in.Thread, in.Run)
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
			e.Owner, e.LeaseUntil, e.Thread, e.Run = in.Owner, fresh.LeaseUntil, in.Thread, in.Run
			_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger SET owner = ?, lease_until = ?, thread_id = ?, run_id = ? WHERE key = ?`, e.Owner, nanos(e.LeaseUntil), e.Thread, e.Run, in.Key)
			out, started = e, true
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE lockstep_ledger SET tool = ?, args_hash = ?, state = 'pending', result = NULL, failure = NULL, owner = ?, lease_until = ?, created_at = ?, completed_at = NULL, thread_id = ?, run_id = ? WHERE key = ?`,
			in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now), in.Thread, in.Run, in.Key)
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

// Complete implements Ledger. It returns an error matching ErrNotHeld when
// owner does not hold a pending intent under key, and the database's
// error, wrapped with the operation and key, when the transaction fails.
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

// Release implements Ledger. It fails as Complete does.
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

// Resolve implements Ledger. It returns an error matching ErrNotFound
// when there is no record under key, one matching ErrNotHeld when the
// record is already done, and the database's error, wrapped, when the
// transaction fails.
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

// Forget implements Ledger. It fails only with the database's error,
// wrapped with the operation and key.
func (l *SQL) Forget(ctx context.Context, key string) error {
	err := l.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM lockstep_ledger WHERE key = ?`, key)
		return err
	})
	return l.wrap("forget", key, err)
}

// Get implements Ledger. It returns an error matching ErrNotFound when
// there is no record under key, and the database's error, wrapped, when
// the row cannot be read.
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

// Prune implements Ledger. It deletes in one transaction and fails only
// with the database's error (prefixed "ledger: prune"), deleting nothing.
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

// ClaimMessage implements Ledger. The claim commits on its own; to commit
// it with the effect it guards, use ClaimMessageTx. It returns an error
// matching ErrInvalid for a bad claim, one matching ErrDuplicateMessage or
// a *DuplicateMismatchError for a claim already made within the retention,
// and the database's error (prefixed "ledger: claim message") otherwise.
func (l *SQL) ClaimMessage(ctx context.Context, c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	err := l.tx(ctx, func(tx *sql.Tx) error { return l.claimIn(ctx, tx, c) })
	if err != nil && !errors.Is(err, ErrDuplicateMessage) && !errors.Is(err, ErrDuplicateMismatch) {
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
// (ErrDuplicateMismatch) or ErrInvalid, having written nothing in tx; or
// the database's error, after which the caller must roll tx back.
func (l *SQL) ClaimMessageTx(ctx context.Context, tx *sql.Tx, c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	return l.claimIn(ctx, tx, c)
}

// claimIn inserts the claim, or replaces an expired one, unless a live
// claim of the ID exists in the scope or was migrated from version 1
// (an empty scope). The write comes first, so that the transaction takes the
// write lock at once; when it writes nothing, the live claim decides the
// error.
func (l *SQL) claimIn(ctx context.Context, tx *sql.Tx, c Claim) error {
	now := l.opts.Now()
	cut := nanos(now.Add(-l.opts.Retention))
	res, err := tx.ExecContext(ctx, `INSERT INTO lockstep_messages (scope, id, fingerprint, claimed_at)
		SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM lockstep_messages WHERE scope = '' AND id = ? AND claimed_at > ?)
		ON CONFLICT (scope, id) DO UPDATE SET fingerprint = excluded.fingerprint, claimed_at = excluded.claimed_at
		WHERE lockstep_messages.claimed_at <= ?`,
		c.Scope, c.ID, c.Fingerprint, nanos(now), c.ID, cut, cut)
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
	var (
		fp string
		at int64
	)
	// The claim in the scope itself first (scope '' sorts first).
	err = tx.QueryRowContext(ctx, `SELECT fingerprint, claimed_at FROM lockstep_messages WHERE id = ? AND (scope = ? OR scope = '') AND claimed_at > ? ORDER BY scope DESC LIMIT 1`,
		c.ID, c.Scope, cut).Scan(&fp, &at)
	if err != nil {
		return fmt.Errorf("read the claim of message %q: %w", quoteID(c.ID), err)
	}
	return duplicate(c, fp, fromNanos(at))
}
