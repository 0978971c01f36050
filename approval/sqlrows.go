package approval

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/internal/rowsum"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// The rows of SQLStore, as stored, and how they are checked when read.
// Every row carries a checksum (package rowsum) over its approval ID and
// every column it holds, in a fixed order: a row damaged, or copied under
// another approval ID, does not verify. A row that verifies is then
// decoded as strictly as it was written (times in sqlTime's one spelling,
// JSON as json.Marshal and package canon write it) and checked with
// Trail.Verify. Anything else is a *CorruptError naming the approval, and
// nothing is written on it.

// Checksum domains, one per kind of row and version of the rule.
const (
	decisionDomain  = "lockstep/approval/decision/v1"
	resumeDomain    = "lockstep/approval/resume/v1"
	executionDomain = "lockstep/approval/execution/v1"
)

// decisionRow is an approval_decisions row as stored.
type decisionRow struct {
	id, thread, checkpoint, tool, owner string
	outcome, reviewer, note             string
	args                                sql.NullString
	argsHash, decidedAt, request        string
	crc                                 int64
	resume                              resumeRow
}

// resumeRow is the worker's progress on a decision, as stored.
type resumeRow struct {
	resumedAt            sql.NullString
	note                 string
	attempts             int64
	lastError, notBefore string
	claimant, claim      string // since schema 3
	crc                  int64
}

// executionRow is an approval_executions row as stored.
type executionRow struct {
	id, key, argsHash string
	result            sql.NullString
	errText, at       string
	crc               int64
}

// recordColumns2 are the columns of a decisionRow in schema 2, in the
// order of dest's first ones: the migration to schema 2 reads them.
const recordColumns2 = `id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request, crc,
	resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, resume_crc`

// recordColumns are the columns of a decisionRow, in dest's order.
const recordColumns = recordColumns2 + `, resume_claimant, resume_claim`

func (r *decisionRow) dest() []any {
	return []any{&r.id, &r.thread, &r.checkpoint, &r.tool, &r.owner, &r.outcome, &r.reviewer, &r.note, &r.args, &r.argsHash, &r.decidedAt, &r.request, &r.crc,
		&r.resume.resumedAt, &r.resume.note, &r.resume.attempts, &r.resume.lastError, &r.resume.notBefore, &r.resume.crc,
		&r.resume.claimant, &r.resume.claim}
}

// sum is the checksum of the decision columns, bound to the approval ID.
func (r *decisionRow) sum() int64 {
	return rowsum.New(decisionDomain).String(r.id).String(r.thread).String(r.checkpoint).String(r.tool).String(r.owner).
		String(r.outcome).String(r.reviewer).String(r.note).NullString(r.args.String, r.args.Valid).String(r.argsHash).
		String(r.decidedAt).String(r.request).Value()
}

// sum is the checksum of the resume columns of approval id. The claim's
// holder (schema 3) is covered only when set, so that the rows of schema
// 2, which have none, keep their checksums: the fields are
// self-delimiting, so a row with a holder never sums as one without.
func (r *resumeRow) sum(id string) int64 {
	s := rowsum.New(resumeDomain).String(id).NullString(r.resumedAt.String, r.resumedAt.Valid).String(r.note).
		Int(r.attempts).String(r.lastError).String(r.notBefore)
	if r.claimant != "" || r.claim != "" {
		s = s.String(r.claimant).String(r.claim)
	}
	return s.Value()
}

// sum is the checksum of the execution columns, bound to the approval ID.
func (r *executionRow) sum() int64 {
	return rowsum.New(executionDomain).String(r.id).String(r.key).String(r.argsHash).NullString(r.result.String, r.result.Valid).
		String(r.errText).String(r.at).Value()
}

// resumeRowOf is the stored form of r.
func resumeRowOf(id string, r Resume) resumeRow {
	row := resumeRow{note: r.Note, attempts: int64(r.Attempts), lastError: r.LastError, claimant: r.Claimant, claim: r.Claim}
	if !r.At.IsZero() {
		row.resumedAt = sql.NullString{String: sqlTime(r.At), Valid: true}
	}
	if !r.NotBefore.IsZero() {
		row.notBefore = sqlTime(r.NotBefore)
	}
	row.crc = row.sum(id)
	return row
}

// readTime parses a time the store wrote with sqlTime, refusing any other
// spelling of it.
func readTime(column, s string) (time.Time, error) {
	t, err := parseSQLTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", column, err)
	}
	if sqlTime(t) != s {
		return time.Time{}, fmt.Errorf("%s %q is not a time as the store writes it", column, s)
	}
	return t, nil
}

// record checks the row and decodes it: a *CorruptError naming the
// approval when it does not verify, does not decode strictly, or fails
// Record.Verify.
func (r *decisionRow) record() (Record, error) {
	if r.crc != r.sum() {
		return Record{}, corrupt(r.id, "decision", errors.New("its checksum does not match its approval ID and contents (damaged, or copied from another approval)"))
	}
	if r.resume.crc != r.resume.sum(r.id) {
		return Record{}, corrupt(r.id, "resume", errors.New("its checksum does not match its approval ID and contents (damaged, or copied from another approval)"))
	}
	rec, what, err := r.decode()
	if err != nil {
		return Record{}, corrupt(r.id, what, err)
	}
	if err := rec.Verify(); err != nil {
		return Record{}, err
	}
	return rec, nil
}

func (r *decisionRow) decode() (Record, string, error) {
	rec := Record{ID: r.id, Thread: r.thread, Checkpoint: r.checkpoint}
	req, ok, err := ParseRequest(json.RawMessage(r.request))
	switch {
	case err != nil:
		return Record{}, "request", err
	case !ok:
		return Record{}, "request", errors.New("not an approval request")
	case req.Tool != r.tool || req.Owner != r.owner:
		return Record{}, "request", errors.New("its tool or owner is not the row's")
	}
	rec.Request = req
	at, err := readTime("decided_at", r.decidedAt)
	if err != nil {
		return Record{}, "decision", err
	}
	rec.Decision = Decision{ID: r.id, Outcome: Outcome(r.outcome), Reviewer: r.reviewer, Note: r.note, ArgsHash: r.argsHash, DecidedAt: at}
	if r.args.Valid {
		if err := strictjson.CheckJSON([]byte(r.args.String)); err != nil {
			return Record{}, "decision", fmt.Errorf("args: %w", err)
		}
		rec.Decision.Args = json.RawMessage(r.args.String)
	}
	if rec.Resume, err = r.resume.decode(); err != nil {
		return Record{}, "resume", err
	}
	return rec, "", nil
}

func (r *resumeRow) decode() (Resume, error) {
	out := Resume{Note: r.note, LastError: r.lastError, Attempts: int(r.attempts), Claimant: r.claimant, Claim: r.claim}
	var err error
	if r.resumedAt.Valid {
		if out.At, err = readTime("resumed_at", r.resumedAt.String); err != nil {
			return Resume{}, err
		}
	}
	if r.notBefore != "" {
		if out.NotBefore, err = readTime("resume_not_before", r.notBefore); err != nil {
			return Resume{}, err
		}
	}
	if int64(out.Attempts) != r.attempts {
		return Resume{}, fmt.Errorf("resume_attempts %d out of range", r.attempts)
	}
	return out, nil
}

// execution checks the row and decodes it: a *CorruptError naming the
// approval when it does not verify or decode strictly. The caller checks
// it against its decision (Trail.Verify).
func (r *executionRow) execution() (*Execution, error) {
	if r.crc != r.sum() {
		return nil, corrupt(r.id, "execution", errors.New("its checksum does not match its approval ID and contents (damaged, or copied from another approval)"))
	}
	e := &Execution{IdempotencyKey: r.key, ArgsHash: r.argsHash, Error: r.errText}
	if r.result.Valid {
		if err := strictjson.CheckJSON([]byte(r.result.String)); err != nil {
			return nil, corrupt(r.id, "execution", fmt.Errorf("result: %w", err))
		}
		e.Result = json.RawMessage(r.result.String)
	}
	at, err := readTime("recorded_at", r.at)
	if err != nil {
		return nil, corrupt(r.id, "execution", err)
	}
	e.At = at
	return e, nil
}

// checksumRows gives every row of version 1 its checksums (the migration
// to version 2). Rows of version 1 carry none to check first: a row that
// was damaged before the upgrade is caught by the strict decoding of
// every read, not by its checksum.
func checksumRows(ctx context.Context, tx *sql.Tx) error {
	return rechecksum(ctx, tx, recordColumns2, 19)
}

// rechecksum gives every row the checksums of what it holds: the
// decision rows read as columns, the first n of dest's.
func rechecksum(ctx context.Context, tx *sql.Tx, columns string, n int) error {
	type fix struct {
		id          string
		crc, resume int64
	}
	var fixes []fix
	rows, err := tx.QueryContext(ctx, `SELECT `+columns+` FROM approval_decisions`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r decisionRow
		if err := rows.Scan(r.dest()[:n]...); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{r.id, r.sum(), r.resume.sum(r.id)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, f := range fixes {
		if _, err := tx.ExecContext(ctx, `UPDATE approval_decisions SET crc = ?, resume_crc = ? WHERE id = ?`, f.crc, f.resume, f.id); err != nil {
			return err
		}
	}
	fixes = fixes[:0]
	rows, err = tx.QueryContext(ctx, `SELECT `+executionColumns+` FROM approval_executions`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r executionRow
		if err := rows.Scan(r.dest()...); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{id: r.id, crc: r.sum()})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, f := range fixes {
		if _, err := tx.ExecContext(ctx, `UPDATE approval_executions SET crc = ? WHERE approval_id = ?`, f.crc, f.id); err != nil {
			return err
		}
	}
	return nil
}

// executionColumns are the columns of an executionRow, in dest's order.
const executionColumns = `approval_id, idempotency_key, args_hash, result, error, recorded_at, crc`

func (r *executionRow) dest() []any {
	return []any{&r.id, &r.key, &r.argsHash, &r.result, &r.errText, &r.at, &r.crc}
}
