package approval

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// SchemaVersion is the version of the approval tables this build writes.
// OpenSQLStore upgrades older tables and refuses newer ones.
const SchemaVersion = 1

// migrations[i] upgrades the tables from version i to i+1. The DDL is
// SQLite's; every column is TEXT or INTEGER, JSON is stored as TEXT and
// times as fixed-width UTC text (sqlTime), so the stock sqlite3 shell reads
// them and times sort as text.
var migrations = []string{
	`CREATE TABLE IF NOT EXISTS approval_decisions (
	id                TEXT PRIMARY KEY,          -- approval ID = interrupt ID
	thread            TEXT NOT NULL,
	checkpoint        TEXT NOT NULL,             -- the checkpoint the thread waited at
	tool              TEXT NOT NULL,
	owner             TEXT NOT NULL,
	outcome           TEXT NOT NULL CHECK (outcome IN ('approved', 'rejected', 'edited', 'expired')),
	reviewer          TEXT NOT NULL CHECK (reviewer <> ''),
	note              TEXT NOT NULL,
	args              TEXT CHECK (args IS NULL OR json_valid(args)), -- edited arguments
	args_hash         TEXT NOT NULL,             -- hash of the arguments the decision covers
	decided_at        TEXT NOT NULL,
	request           TEXT NOT NULL CHECK (json_valid(request)), -- the request as shown
	resumed_at        TEXT,                      -- NULL until the thread was resumed
	resume_note       TEXT NOT NULL DEFAULT '',
	resume_attempts   INTEGER NOT NULL DEFAULT 0,
	resume_error      TEXT NOT NULL DEFAULT '',  -- the last failed attempt's error
	resume_not_before TEXT NOT NULL DEFAULT ''   -- no attempt before this time ('' = now)
);
CREATE INDEX IF NOT EXISTS approval_decisions_unresumed ON approval_decisions (decided_at, id) WHERE resumed_at IS NULL;
CREATE INDEX IF NOT EXISTS approval_decisions_thread ON approval_decisions (thread);
CREATE TABLE IF NOT EXISTS approval_executions (
	approval_id     TEXT PRIMARY KEY REFERENCES approval_decisions (id),
	idempotency_key TEXT NOT NULL,
	args_hash       TEXT NOT NULL,
	result          TEXT CHECK (result IS NULL OR json_valid(result)),
	error           TEXT NOT NULL DEFAULT '',
	recorded_at     TEXT NOT NULL
);`,
}

// sqlTimeLayout writes times in UTC with nine fractional digits, so that
// stored times of years 1970-9999 compare correctly as text.
const sqlTimeLayout = "2006-01-02T15:04:05.000000000Z"

func sqlTime(t time.Time) string { return t.UTC().Format(sqlTimeLayout) }

func parseSQLTime(s string) (time.Time, error) { return time.Parse(sqlTimeLayout, s) }

// SQLStore is a Store over a SQLite database, normally the checkpoint
// saver's own (its DB method), so that decisions live in the same file as
// the paused threads. It writes with single statements, each of which is
// atomic on its own: first-wins is the primary key of approval_decisions.
// It is safe for concurrent use by several goroutines and processes.
//
// After Close, or once its database was closed by its owner (the saver's
// Close), every method fails with an *Error matching ErrClosed.
type SQLStore struct {
	db     *sql.DB
	now    func() time.Time
	closed atomic.Bool
	// dbClosed is database/sql's error for a closed pool (see
	// dbClosedError), matched by identity.
	dbClosed error
}

var _ Store = (*SQLStore)(nil)

// OpenSQLStore creates the approval tables in db if they do not exist (or
// upgrades them; tables already current are only read, so opening never
// waits for a writer) and returns a store that reads time from now (nil means
// time.Now). db stays the caller's: the store never closes it. Open it with
// WAL and a busy timeout, as the SQLite saver does. It returns an error
// matching ErrSchemaVersion, and writes nothing, when the stored schema
// version is newer than SchemaVersion or one no build writes (0, negative,
// a gap in approval_schema).
func OpenSQLStore(ctx context.Context, db *sql.DB, now func() time.Time) (*SQLStore, error) {
	// A current store needs no write: read its version without the write
	// transaction, so that opening (a CLI listing approvals) never waits
	// for a writer. Any error here (no table yet) goes the long way; a
	// version this build cannot use is refused before any write.
	if v, err := storedSchema(ctx, db); err == nil {
		if err := v.check(); err != nil {
			return nil, err
		}
		if v.max.Int64 == SchemaVersion {
			return newSQLStore(db, now), nil
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("approval: open store: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS approval_schema (version INTEGER PRIMARY KEY)`); err != nil {
		return nil, fmt.Errorf("approval: open store: %w", err)
	}
	v, err := storedSchema(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("approval: open store: %w", err)
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	for i := int(v.max.Int64); i < SchemaVersion; i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return nil, fmt.Errorf("approval: migrate to schema version %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO approval_schema (version) VALUES (?)`, i+1); err != nil {
			return nil, fmt.Errorf("approval: migrate to schema version %d: %w", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("approval: open store: %w", err)
	}
	return newSQLStore(db, now), nil
}

// schemaRows is what approval_schema holds: one row per version applied,
// 1 to the current one (none yet in a new database).
type schemaRows struct {
	min, max sql.NullInt64
	n        int64
}

// storedSchema reads approval_schema through q (a *sql.DB or *sql.Tx).
func storedSchema(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (schemaRows, error) {
	var v schemaRows
	err := q.QueryRowContext(ctx, `SELECT min(version), max(version), count(*) FROM approval_schema`).Scan(&v.min, &v.max, &v.n)
	return v, err
}

// check returns an error matching ErrSchemaVersion unless the rows are
// those some build of this package wrote: versions 1 to at most
// SchemaVersion, each once (or none yet). Anything else (a version newer
// than this build's, 0, a negative one, a gap) is refused, and nothing is
// written.
func (v schemaRows) check() error {
	switch {
	case !v.max.Valid:
		return nil
	case v.max.Int64 > SchemaVersion:
		return fmt.Errorf("%w: the database has approval schema version %d; this build knows up to %d: use a newer build (nothing was changed)", ErrSchemaVersion, v.max.Int64, SchemaVersion)
	case v.min.Int64 < 1 || v.n != v.max.Int64:
		return fmt.Errorf("%w: the database's approval_schema table holds versions %d to %d in %d rows, and no build writes that (versions 1 to %d, one row each): it was edited or damaged (nothing was changed)",
			ErrSchemaVersion, v.min.Int64, v.max.Int64, v.n, SchemaVersion)
	}
	return nil
}

func newSQLStore(db *sql.DB, now func() time.Time) *SQLStore {
	return &SQLStore{db: db, now: clockOrNow(now), dbClosed: dbClosedError()}
}

// dbClosedError returns the error database/sql gives for every use of a
// closed *sql.DB. The package does not export it and messages are never
// matched, so it is taken from a pool that is closed before it ever
// connects, and matched with errors.Is.
func dbClosedError() error {
	probe := sql.OpenDB(noConnector{})
	probe.Close()
	return probe.PingContext(context.Background())
}

// noConnector is the connector of dbClosedError's pool, which never
// connects.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("approval: the probe pool does not connect")
}

func (noConnector) Driver() driver.Driver { return nil }

// Close closes the store: every later call of a method fails with an
// *Error matching ErrClosed, and calls already running finish. It does not
// close the database, which stays the caller's; once the caller closes it,
// the methods fail with ErrClosed as well. Closing a closed store does
// nothing; Close always returns nil.
func (s *SQLStore) Close() error {
	s.closed.Store(true)
	return nil
}

// live returns the error of a call on approval id ("" for none) after
// Close, or nil while the store is open.
func (s *SQLStore) live(id string) error {
	if s.closed.Load() {
		return newError(id, ErrClosed, "")
	}
	return nil
}

// closedDB replaces *err by an *Error matching ErrClosed when it says that
// the database was closed under the store.
func (s *SQLStore) closedDB(id string, err *error) {
	if *err != nil && s.dbClosed != nil && errors.Is(*err, s.dbClosed) {
		*err = newError(id, ErrClosed, "the database is closed")
	}
}

// decisionColumns and recordColumns are read by decisionRow and scanRecord.
const (
	decisionColumns = `id, outcome, reviewer, note, args, args_hash, decided_at`
	recordColumns   = `thread, checkpoint, request, ` + decisionColumns + `,
	resumed_at, resume_note, resume_attempts, resume_error, resume_not_before`
)

type rowScanner interface{ Scan(dest ...any) error }

// decisionRow receives the decisionColumns of a row.
type decisionRow struct {
	id, outcome, reviewer, note, argsHash, decided string
	args                                           sql.NullString
}

func (d *decisionRow) dest() []any {
	return []any{&d.id, &d.outcome, &d.reviewer, &d.note, &d.args, &d.argsHash, &d.decided}
}

func (d *decisionRow) decision() (Decision, error) {
	at, err := parseSQLTime(d.decided)
	if err != nil {
		return Decision{}, fmt.Errorf("decided_at: %w", err)
	}
	out := Decision{ID: d.id, Outcome: Outcome(d.outcome), Reviewer: d.reviewer, Note: d.note, ArgsHash: d.argsHash, DecidedAt: at}
	if d.args.Valid {
		out.Args = json.RawMessage(d.args.String)
	}
	return out, nil
}

func scanRecord(row rowScanner) (Record, error) {
	var (
		r                       Record
		dr                      decisionRow
		request, notBefore      string
		resumed                 sql.NullString
		resumeNote, resumeError string
		attempts                int
	)
	dest := append([]any{&r.Thread, &r.Checkpoint, &request}, dr.dest()...)
	dest = append(dest, &resumed, &resumeNote, &attempts, &resumeError, &notBefore)
	if err := row.Scan(dest...); err != nil {
		return Record{}, err
	}
	r.ID = dr.id
	corrupt := func(err error) (Record, error) {
		return Record{}, fmt.Errorf("approval: stored approval %s does not decode: %w", quoteShort(r.ID), err)
	}
	var err error
	if r.Decision, err = dr.decision(); err != nil {
		return corrupt(err)
	}
	if err := json.Unmarshal([]byte(request), &r.Request); err != nil {
		return corrupt(fmt.Errorf("request: %w", err))
	}
	if resumed.Valid {
		if r.Resume.At, err = parseSQLTime(resumed.String); err != nil {
			return corrupt(fmt.Errorf("resumed_at: %w", err))
		}
	}
	if notBefore != "" {
		if r.Resume.NotBefore, err = parseSQLTime(notBefore); err != nil {
			return corrupt(fmt.Errorf("resume_not_before: %w", err))
		}
	}
	r.Resume.Note, r.Resume.Attempts, r.Resume.LastError = resumeNote, attempts, resumeError
	return r, nil
}

// Decide implements Store. The decision is one INSERT ... ON CONFLICT DO
// NOTHING: the row that lands wins, and a loser reads the winner back.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Decide(ctx context.Context, item Item, v Verdict) (_ Decision, err error) {
	if err := s.live(item.ID); err != nil {
		return Decision{}, err
	}
	defer s.closedDB(item.ID, &err)
	if err := checkVerdict(item.ID, v); err != nil {
		return Decision{}, err
	}
	if err := checkItem(item); err != nil {
		return Decision{}, err
	}
	// A read first: in WAL mode it takes no lock, so the losers that come
	// after the winner committed never queue for the write lock.
	if w, ok, err := s.winner(ctx, item.ID); err != nil {
		return Decision{}, err
	} else if ok {
		return Decision{}, &AlreadyDecidedError{ID: item.ID, Winner: w}
	}
	d, late, derr := decide(item, v, s.now())
	if derr != nil {
		return Decision{}, derr
	}
	req, err := json.Marshal(item.Request)
	if err != nil {
		return Decision{}, newError(item.ID, ErrInvalidRequest, "does not encode: %v", err)
	}
	var args any
	if d.Args != nil {
		args = string(d.Args)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO approval_decisions
		(id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		item.ID, item.Thread, item.Checkpoint, item.Request.Tool, item.Request.Owner, string(d.Outcome), d.Reviewer, d.Note,
		args, d.ArgsHash, sqlTime(d.DecidedAt), string(req))
	if err != nil {
		return Decision{}, fmt.Errorf("approval: record decision on approval %s: %w", quoteShort(item.ID), err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Decision{}, fmt.Errorf("approval: record decision on approval %s: %w", quoteShort(item.ID), err)
	} else if n == 1 {
		if late != nil {
			return Decision{}, late // the expiry that the late verdict observed is recorded
		}
		return d, nil
	}
	w, ok, err := s.winner(ctx, item.ID)
	if err == nil && !ok {
		err = errors.New("the conflicting row is gone")
	}
	if err != nil {
		return Decision{}, fmt.Errorf("approval: read the winning decision on approval %s: %w", quoteShort(item.ID), err)
	}
	return Decision{}, &AlreadyDecidedError{ID: item.ID, Winner: w}
}

// winner reads the decision on id alone (not the request snapshot), for
// the losers of a race.
func (s *SQLStore) winner(ctx context.Context, id string) (Decision, bool, error) {
	var dr decisionRow
	err := s.db.QueryRowContext(ctx, `SELECT `+decisionColumns+` FROM approval_decisions WHERE id = ?`, id).Scan(dr.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return Decision{}, false, nil
	}
	if err != nil {
		return Decision{}, false, fmt.Errorf("approval: read approval %s: %w", quoteShort(id), err)
	}
	d, err := dr.decision()
	if err != nil {
		return Decision{}, false, fmt.Errorf("approval: stored approval %s does not decode: %w", quoteShort(id), err)
	}
	return d, true, nil
}

// Get implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Get(ctx context.Context, id string) (_ Record, err error) {
	if err := s.live(id); err != nil {
		return Record{}, err
	}
	defer s.closedDB(id, &err)
	row := s.db.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM approval_decisions WHERE id = ?`, id)
	r, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, newError(id, ErrNotFound, "no decision")
	}
	if err != nil {
		return Record{}, fmt.Errorf("approval: read approval %s: %w", quoteShort(id), err)
	}
	return r, nil
}

// Decided implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Decided(ctx context.Context, ids []string) (_ map[string]bool, err error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	defer s.closedDB("", &err)
	out := map[string]bool{}
	const chunk = 500
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		part := ids[:n]
		ids = ids[n:]
		args := make([]any, len(part))
		for i, id := range part {
			args[i] = id
		}
		rows, err := s.db.QueryContext(ctx, `SELECT id FROM approval_decisions WHERE id IN (?`+strings.Repeat(", ?", len(part)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("approval: look up decisions: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("approval: look up decisions: %w", err)
			}
			out[id] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("approval: look up decisions: %w", err)
		}
	}
	return out, nil
}

// Unresumed implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Unresumed(ctx context.Context, limit int) (_ []Record, err error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	defer s.closedDB("", &err)
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+recordColumns+` FROM approval_decisions
		WHERE resumed_at IS NULL AND resume_not_before <= ? ORDER BY decided_at, id LIMIT ?`, sqlTime(s.now()), limit)
	if err != nil {
		return nil, fmt.Errorf("approval: list unresumed decisions: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("approval: list unresumed decisions: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("approval: list unresumed decisions: %w", err)
	}
	return out, nil
}

// update runs a conditional UPDATE on one approval and reports whether it
// changed the row; when it did not, it tells a missing ID (ErrNotFound)
// from a condition that did not hold.
func (s *SQLStore) update(ctx context.Context, id, what, query string, args ...any) (bool, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("approval: %s approval %s: %w", what, quoteShort(id), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("approval: %s approval %s: %w", what, quoteShort(id), err)
	}
	if n == 1 {
		return true, nil
	}
	var one int
	err = s.db.QueryRowContext(ctx, `SELECT 1 FROM approval_decisions WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, newError(id, ErrNotFound, "no decision")
	}
	if err != nil {
		return false, fmt.Errorf("approval: %s approval %s: %w", what, quoteShort(id), err)
	}
	return false, nil
}

// ClaimResume implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) ClaimResume(ctx context.Context, id string, lease time.Duration) (_ bool, err error) {
	if err := s.live(id); err != nil {
		return false, err
	}
	if err := checkLease(id, lease); err != nil {
		return false, err
	}
	defer s.closedDB(id, &err)
	now := s.now()
	return s.update(ctx, id, "claim", `UPDATE approval_decisions SET resume_not_before = ?
		WHERE id = ? AND resumed_at IS NULL AND resume_not_before <= ?`, sqlTime(now.Add(lease)), id, sqlTime(now))
}

// FinishResume implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) FinishResume(ctx context.Context, id, note string) (err error) {
	if err := s.live(id); err != nil {
		return err
	}
	defer s.closedDB(id, &err)
	_, err = s.update(ctx, id, "finish resuming", `UPDATE approval_decisions SET resumed_at = ?, resume_note = ?, resume_not_before = ''
		WHERE id = ? AND resumed_at IS NULL`, sqlTime(s.now()), truncate(note, maxErrorBytes), id)
	return err
}

// RetryResume implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) RetryResume(ctx context.Context, id, reason string, after time.Duration) (err error) {
	if err := s.live(id); err != nil {
		return err
	}
	if err := checkDelay(id, after); err != nil {
		return err
	}
	defer s.closedDB(id, &err)
	_, err = s.update(ctx, id, "defer resuming", `UPDATE approval_decisions
		SET resume_attempts = resume_attempts + 1, resume_error = ?, resume_not_before = ?
		WHERE id = ? AND resumed_at IS NULL`, truncate(reason, maxErrorBytes), sqlTime(s.now().Add(after)), id)
	return err
}

// Now implements Store: it reads the clock the store was opened with.
func (s *SQLStore) Now() time.Time { return s.now() }

// RecordOutcome implements OutcomeRecorder.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) RecordOutcome(ctx context.Context, id string, e Execution) (err error) {
	if err := s.live(id); err != nil {
		return err
	}
	defer s.closedDB(id, &err)
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	e, err = checkExecution(rec, e, s.now())
	if err != nil {
		return err
	}
	var result any
	if e.Result != nil {
		result = string(e.Result)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO approval_executions (approval_id, idempotency_key, args_hash, result, error, recorded_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (approval_id) DO NOTHING`,
		id, e.IdempotencyKey, e.ArgsHash, result, e.Error, sqlTime(e.At))
	if err != nil {
		return fmt.Errorf("approval: record outcome of approval %s: %w", quoteShort(id), err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("approval: record outcome of approval %s: %w", quoteShort(id), err)
	} else if n == 1 {
		return nil
	}
	old, err := s.execution(ctx, id)
	if err != nil {
		return err
	}
	if old != nil && sameExecution(*old, e) {
		return nil
	}
	return newError(id, ErrOutcomeRecorded, "")
}

func (s *SQLStore) execution(ctx context.Context, id string) (*Execution, error) {
	var (
		e      Execution
		result sql.NullString
		at     string
	)
	err := s.db.QueryRowContext(ctx, `SELECT idempotency_key, args_hash, result, error, recorded_at FROM approval_executions WHERE approval_id = ?`, id).
		Scan(&e.IdempotencyKey, &e.ArgsHash, &result, &e.Error, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("approval: read outcome of approval %s: %w", quoteShort(id), err)
	}
	if result.Valid {
		e.Result = json.RawMessage(result.String)
	}
	if e.At, err = parseSQLTime(at); err != nil {
		return nil, fmt.Errorf("approval: stored recorded_at of approval %s does not decode: %w", quoteShort(id), err)
	}
	return &e, nil
}

// Audit implements Store.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Audit(ctx context.Context, id string) (_ Trail, err error) {
	if err := s.live(id); err != nil {
		return Trail{}, err
	}
	defer s.closedDB(id, &err)
	rec, err := s.Get(ctx, id)
	if err != nil {
		return Trail{}, err
	}
	e, err := s.execution(ctx, id)
	if err != nil {
		return Trail{}, err
	}
	return Trail{Record: rec, Execution: e}, nil
}
