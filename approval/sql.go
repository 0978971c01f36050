package approval

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// SchemaVersion is the version of the approval tables this build writes.
// OpenSQLStore upgrades older tables and refuses newer ones.
//
// Versions:
//
//   - 1: approval_decisions and approval_executions.
//   - 2: every row carries a checksum bound to its approval ID
//     (approval_decisions.crc over the decision and its request snapshot,
//     approval_decisions.resume_crc over the worker's progress,
//     approval_executions.crc over the outcome), so that a row damaged or
//     copied from another approval does not verify. The upgrade computes
//     the checksums of the rows of version 1 once, in its transaction.
//   - 3: approval_decisions.resume_claimant and resume_claim name the
//     worker and the claim that hold a resume (ResumeClaimer), so that a
//     worker takes back at once a claim a killed process of its name
//     left. Both are empty in the rows of version 2, whose checksums stay as
//     they are: the resume checksum covers them only when one is set.
//   - 4: approval_consumptions records the approvals consumed in the
//     transaction of the save that carries their decision into the thread
//     (SQLStore.Consumption, D16), one row each, with a checksum bound to
//     the approval ID. Approvals of version 3 have none: they were
//     resumed without it.
const SchemaVersion = 4

// migration upgrades the tables by one version: stmts, then data (rows
// rewritten in Go, where checksums are computed), in the transaction of
// OpenSQLStore that records the version.
type migration struct {
	stmts string
	data  func(ctx context.Context, tx *sql.Tx) error
}

// migrations[i] upgrades the tables from version i to i+1. They are never
// edited once released: a change is a new migration. The DDL is SQLite's;
// every column is TEXT or INTEGER, JSON is stored as TEXT and times as
// fixed-width UTC text (sqlTime), so the stock sqlite3 shell reads them
// and times sort as text.
var migrations = []migration{
	{stmts: `CREATE TABLE IF NOT EXISTS approval_decisions (
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
);`},
	// 1 -> 2: checksums bound to the approval ID. The default (-1) is one
	// no row verifies with; data sets every row's own.
	{stmts: `ALTER TABLE approval_decisions ADD COLUMN crc INTEGER NOT NULL DEFAULT -1;
ALTER TABLE approval_decisions ADD COLUMN resume_crc INTEGER NOT NULL DEFAULT -1;
ALTER TABLE approval_executions ADD COLUMN crc INTEGER NOT NULL DEFAULT -1;`,
		data: checksumRows},
	// 2 -> 3: the holder of a resume claim.
	{stmts: `ALTER TABLE approval_decisions ADD COLUMN resume_claimant TEXT NOT NULL DEFAULT '';
ALTER TABLE approval_decisions ADD COLUMN resume_claim TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS approval_decisions_claimant ON approval_decisions (resume_claimant) WHERE resumed_at IS NULL AND resume_claimant <> '';`},
	// 3 -> 4: consumptions, written with the save that carries them.
	{stmts: `CREATE TABLE IF NOT EXISTS approval_consumptions (
	approval_id TEXT PRIMARY KEY REFERENCES approval_decisions (id),
	consumed_at TEXT NOT NULL,
	crc         INTEGER NOT NULL
);`},
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
		if _, err := tx.ExecContext(ctx, migrations[i].stmts); err != nil {
			return nil, fmt.Errorf("approval: migrate to schema version %d: %w", i+1, err)
		}
		if data := migrations[i].data; data != nil {
			if err := data(ctx, tx); err != nil {
				return nil, fmt.Errorf("approval: migrate to schema version %d: %w", i+1, err)
			}
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

type rowScanner interface{ Scan(dest ...any) error }

// scanRecord reads and checks one approval_decisions row (recordColumns).
// A row that does not verify is a *CorruptError; sql.ErrNoRows is
// returned as it is.
func scanRecord(row rowScanner) (Record, error) {
	var r decisionRow
	if err := row.Scan(r.dest()...); err != nil {
		return Record{}, err
	}
	return r.record()
}

// read returns the verified record of approval id with its row as
// stored, or an *Error matching ErrNotFound, a *CorruptError, or the
// database's error.
func (s *SQLStore) read(ctx context.Context, id string) (decisionRow, Record, error) {
	var r decisionRow
	err := s.db.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM approval_decisions WHERE id = ?`, id).Scan(r.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return r, Record{}, newError(id, ErrNotFound, "no decision")
	}
	if err != nil {
		return r, Record{}, fmt.Errorf("approval: read approval %s: %w", quoteShort(id), err)
	}
	rec, err := r.record()
	return r, rec, err
}

// Decide implements Store. The decision is one INSERT ... ON CONFLICT DO
// NOTHING: the row that lands wins, and a loser reads the winner back. A
// winner whose row does not verify is a *CorruptError.
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
	req, err := encodeRequest(item.ID, item.Request)
	if err != nil {
		return Decision{}, err
	}
	row := decisionRow{id: item.ID, thread: item.Thread, checkpoint: item.Checkpoint, tool: item.Request.Tool, owner: item.Request.Owner,
		outcome: string(d.Outcome), reviewer: d.Reviewer, note: d.Note, argsHash: d.ArgsHash, decidedAt: sqlTime(d.DecidedAt), request: string(req),
		resume: resumeRowOf(item.ID, Resume{})}
	if d.Args != nil {
		row.args = sql.NullString{String: string(d.Args), Valid: true}
	}
	row.crc = row.sum()
	res, err := s.db.ExecContext(ctx, `INSERT INTO approval_decisions
		(id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request, crc, resume_crc)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		row.id, row.thread, row.checkpoint, row.tool, row.owner, row.outcome, row.reviewer, row.note,
		row.args, row.argsHash, row.decidedAt, row.request, row.crc, row.resume.crc)
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

// winner reads the decision on id, for the losers of a race: ok is false
// when there is none. A row that does not verify is a *CorruptError.
func (s *SQLStore) winner(ctx context.Context, id string) (Decision, bool, error) {
	_, rec, err := s.read(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Decision{}, false, nil
	}
	if err != nil {
		return Decision{}, false, err
	}
	return rec.Decision, true, nil
}

// Get implements Store. A row that does not verify is a *CorruptError
// (matching ErrCorrupt) naming the approval.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Get(ctx context.Context, id string) (_ Record, err error) {
	if err := s.live(id); err != nil {
		return Record{}, err
	}
	defer s.closedDB(id, &err)
	_, rec, err := s.read(ctx, id)
	return rec, err
}

// Decided implements Store. It reads and checks the rows it finds: one
// that does not verify is a *CorruptError naming its approval, rather
// than a decision that hides the request from the inbox.
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
		rows, err := s.db.QueryContext(ctx, `SELECT `+recordColumns+` FROM approval_decisions WHERE id IN (?`+strings.Repeat(", ?", len(part)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("approval: look up decisions: %w", err)
		}
		for rows.Next() {
			rec, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("approval: look up decisions: %w", err)
			}
			out[rec.ID] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("approval: look up decisions: %w", err)
		}
	}
	return out, nil
}

// Unresumed implements Store. A row that does not verify is a
// *CorruptError naming its approval.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Unresumed(ctx context.Context, limit int) (_ []Record, err error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	defer s.closedDB("", &err)
	return s.list(ctx, "list unresumed decisions", `resume_not_before <= ?`, limit, sqlTime(s.now()))
}

// list returns up to limit unresumed records (limit <= 0: all) that also
// match where, with args, oldest decision first; what names the listing
// in errors.
func (s *SQLStore) list(ctx context.Context, what, where string, limit int, args ...any) ([]Record, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+recordColumns+` FROM approval_decisions
		WHERE resumed_at IS NULL AND `+where+` ORDER BY decided_at, id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("approval: %s: %w", what, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("approval: %s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("approval: %s: %w", what, err)
	}
	return out, nil
}

// maxSwaps bounds the attempts of changeResume: each failed swap means
// another worker changed the row meanwhile, which a handful of workers do
// a handful of times.
const maxSwaps = 64

// changeResume applies step to the resume progress of approval id: it
// reads and checks the row, lets step change the progress (false: no
// change), and writes the result with its checksum only if the row still
// holds what was read, reading again otherwise. It reports whether it
// wrote. A row that does not verify is a *CorruptError, and nothing is
// written on it.
func (s *SQLStore) changeResume(ctx context.Context, id, what string, step func(r *Resume) bool) (bool, error) {
	for range maxSwaps {
		row, rec, err := s.read(ctx, id)
		if err != nil {
			return false, err
		}
		next := rec.Resume
		if !step(&next) {
			return false, nil
		}
		old, nr := row.resume, resumeRowOf(id, next)
		res, err := s.db.ExecContext(ctx, `UPDATE approval_decisions
			SET resumed_at = ?, resume_note = ?, resume_attempts = ?, resume_error = ?, resume_not_before = ?, resume_claimant = ?, resume_claim = ?, resume_crc = ?
			WHERE id = ? AND resumed_at IS ? AND resume_note = ? AND resume_attempts = ? AND resume_error = ? AND resume_not_before = ?
				AND resume_claimant = ? AND resume_claim = ? AND resume_crc = ?`,
			nr.resumedAt, nr.note, nr.attempts, nr.lastError, nr.notBefore, nr.claimant, nr.claim, nr.crc,
			id, old.resumedAt, old.note, old.attempts, old.lastError, old.notBefore, old.claimant, old.claim, old.crc)
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
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("approval: %s approval %s: the row changed under %d attempts in a row; try again", what, quoteShort(id), maxSwaps)
}

// ClaimResume implements Store. A row that does not verify is a
// *CorruptError naming the approval, and is not claimed.
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
	return s.changeResume(ctx, id, "claim", func(r *Resume) bool { return r.claim(Claim{Lease: lease}, s.now()) })
}

var _ ResumeClaimer = (*SQLStore)(nil)

// ClaimResumeAs implements ResumeClaimer: the claim is taken in one
// write that holds only if the row is still as it was read (so a claim
// taken back is the one read, and still holds the approval). A row that
// does not verify is a *CorruptError naming the approval, and is not
// claimed.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) ClaimResumeAs(ctx context.Context, id string, c Claim) (_ bool, err error) {
	if err := s.live(id); err != nil {
		return false, err
	}
	if err := checkClaim(id, c); err != nil {
		return false, err
	}
	defer s.closedDB(id, &err)
	return s.changeResume(ctx, id, "claim", func(r *Resume) bool { return r.claim(c, s.now()) })
}

// Claims implements ResumeClaimer. A row that does not verify is a
// *CorruptError naming its approval.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) Claims(ctx context.Context, worker string, limit int) (_ []Record, err error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	if err := checkWorkerName("", worker); err != nil {
		return nil, err
	}
	defer s.closedDB("", &err)
	return s.list(ctx, "list the claims of worker "+quoteShort(worker), `resume_claimant = ? AND resume_not_before > ?`, limit, worker, sqlTime(s.now()))
}

// FinishResume implements Store. A row that does not verify is a
// *CorruptError naming the approval, and is left as it is.
//
// After Close, or once the database was closed, it fails with an *Error
// matching ErrClosed.
func (s *SQLStore) FinishResume(ctx context.Context, id, note string) (err error) {
	if err := s.live(id); err != nil {
		return err
	}
	defer s.closedDB(id, &err)
	_, err = s.changeResume(ctx, id, "finish resuming", func(r *Resume) bool {
		if !r.At.IsZero() {
			return false
		}
		r.At, r.Note, r.NotBefore = s.now().UTC(), truncate(note, maxErrorBytes), time.Time{}
		r.Claimant, r.Claim = "", ""
		return true
	})
	return err
}

// RetryResume implements Store. A row that does not verify is a
// *CorruptError naming the approval, and is left as it is.
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
	_, err = s.changeResume(ctx, id, "defer resuming", func(r *Resume) bool {
		if !r.At.IsZero() {
			return false
		}
		r.Attempts++
		r.LastError, r.NotBefore = truncate(reason, maxErrorBytes), s.now().Add(after).UTC()
		r.Claimant, r.Claim = "", ""
		return true
	})
	return err
}

// Now implements Store: it reads the clock the store was opened with.
func (s *SQLStore) Now() time.Time { return s.now() }

// RecordOutcome implements OutcomeRecorder. A decision or outcome row that
// does not verify is a *CorruptError naming the approval, and nothing is
// written.
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
	row := executionRow{id: id, key: e.IdempotencyKey, argsHash: e.ArgsHash, errText: e.Error, at: sqlTime(e.At)}
	if e.Result != nil {
		row.result = sql.NullString{String: string(e.Result), Valid: true}
	}
	row.crc = row.sum()
	res, err := s.db.ExecContext(ctx, `INSERT INTO approval_executions (approval_id, idempotency_key, args_hash, result, error, recorded_at, crc)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (approval_id) DO NOTHING`,
		row.id, row.key, row.argsHash, row.result, row.errText, row.at, row.crc)
	if err != nil {
		return fmt.Errorf("approval: record outcome of approval %s: %w", quoteShort(id), err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("approval: record outcome of approval %s: %w", quoteShort(id), err)
	} else if n == 1 {
		return nil
	}
	old, err := s.execution(ctx, rec)
	if err != nil {
		return err
	}
	if old != nil && sameExecution(*old, e) {
		return nil
	}
	return newError(id, ErrOutcomeRecorded, "")
}

// execution reads and checks the outcome recorded for rec, or returns nil
// when there is none. A row that does not verify, or does not belong to
// rec's decision, is a *CorruptError.
func (s *SQLStore) execution(ctx context.Context, rec Record) (*Execution, error) {
	var r executionRow
	err := s.db.QueryRowContext(ctx, `SELECT `+executionColumns+` FROM approval_executions WHERE approval_id = ?`, rec.ID).Scan(r.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("approval: read outcome of approval %s: %w", quoteShort(rec.ID), err)
	}
	e, err := r.execution()
	if err != nil {
		return nil, err
	}
	if err := (Trail{Record: rec, Execution: e}).Verify(); err != nil {
		return nil, err
	}
	return e, nil
}

// Audit implements Store. A decision or outcome row that does not verify
// is a *CorruptError naming the approval.
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
	e, err := s.execution(ctx, rec)
	if err != nil {
		return Trail{}, err
	}
	consumed, err := s.consumed(ctx, rec.ID)
	if err != nil {
		return Trail{}, err
	}
	return Trail{Record: rec, Execution: e, Consumed: consumed}, nil
}
