package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/canon"
)

// ApprovalStore is an approval.Store and approval.ResumeClaimer on
// PostgreSQL, in the tables approval_decisions and approval_executions of
// the DB's schema, with the rules of approval.MemoryStore and
// approval.SQLStore (it passes approvaltest). Get it from DB.Approvals. First-wins is the primary key
// of approval_decisions; every write is one statement. It is safe for
// concurrent use by any number of goroutines and processes.
type ApprovalStore struct {
	db *DB
}

var (
	_ approval.Store         = (*ApprovalStore)(nil)
	_ approval.ResumeClaimer = (*ApprovalStore)(nil)
)

type approvalQueries struct {
	insert, winner, get, decided, unresumed, claim, finish, retry, exists, recordOutcome, execution string
	claimAs, claims                                                                                 string
}

// The checksums of the approval rows (see Integrity in the package doc):
// the schema's crc function over the approval ID and every column, JSONB
// as PostgreSQL prints it, computed by the statement that writes the row
// and checked on every read (and by the WHERE of every update, so that
// nothing is written on a row that does not verify). The expressions name
// the columns; writes substitute what they store. The resume checksum
// covers the claim's holder (resume_claimant, resume_claim, schema 4)
// only when one is set, so that the rows of older versions, which have
// none, keep the checksums they were written with.
const (
	approvalDecisionCRC = `$S.crc(id, thread, checkpoint, tool, owner, outcome, reviewer, note, args::text, args_hash, decided_at, request::text)`
	approvalResumeCRC   = `(CASE WHEN resume_claimant = '' AND resume_claim = ''
		THEN $S.crc(id, resumed_at, resume_note, resume_attempts::text, resume_error, resume_not_before)
		ELSE $S.crc(id, resumed_at, resume_note, resume_attempts::text, resume_error, resume_not_before, resume_claimant, resume_claim) END)`
	approvalExecutionCRC = `$S.crc(approval_id, idempotency_key, args_hash, result::text, error, recorded_at)`
)

// resumeCRCWith is approvalResumeCRC with the columns of set replaced by
// the expressions that update them.
func resumeCRCWith(set map[string]string) string {
	col := func(c string) string {
		if e, ok := set[c]; ok {
			return e
		}
		return c
	}
	cols := []string{"resumed_at", "resume_note", "resume_attempts::text", "resume_error", "resume_not_before"}
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = col(c)
	}
	base := strings.Join(out, ", ")
	claimant, claim := col("resume_claimant"), col("resume_claim")
	return `(CASE WHEN ` + claimant + ` = '' AND ` + claim + ` = '' THEN $S.crc(id, ` + base + `)
		ELSE $S.crc(id, ` + base + `, ` + claimant + `, ` + claim + `) END)`
}

// resumeCRCOf is what approvalResumeCRC computes, in Go.
func resumeCRCOf(r *approvalRecordRow) []byte {
	parts := [][]byte{str(r.id), nstr(r.resumed), str(r.resumeNote), num(int64(r.attempts)), str(r.resumeError), str(r.notBefore)}
	if r.claimant != "" || r.claim != "" {
		parts = append(parts, str(r.claimant), str(r.claim))
	}
	return crcOf(parts...)
}

// noClaimant is the part of resumeCRCWith's set of a write that clears the
// claim's holder (an anonymous claim, a finish, a retry).
func noClaimant(set map[string]string) map[string]string {
	set["resume_claimant"], set["resume_claim"] = "''", "''"
	return set
}

const approvalDecisionColumns = `id, outcome, reviewer, note, args, args_hash, decided_at`

const approvalRecordColumns = `thread, checkpoint, tool, owner, request, ` + approvalDecisionColumns + `,
	resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc, resume_claimant, resume_claim`

// approvalIntact is the WHERE clause of an update: the row verifies.
const approvalIntact = `crc = ` + approvalDecisionCRC + ` AND resume_crc = ` + approvalResumeCRC

func newApprovalQueries(s func(string) string) approvalQueries {
	return approvalQueries{
		insert: s(`INSERT INTO $S.approval_decisions
			(id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request, crc, resume_crc)
			VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text::jsonb, $10::text, $11::text, $12::text::jsonb,
				$S.crc($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text::jsonb::text, $10::text, $11::text, $12::text::jsonb::text),
				$S.crc($1::text, NULL, '', '0', '', ''))
			ON CONFLICT (id) DO NOTHING`),
		winner:    s(`SELECT ` + approvalRecordColumns + ` FROM $S.approval_decisions WHERE id = $1::text`),
		get:       s(`SELECT ` + approvalRecordColumns + ` FROM $S.approval_decisions WHERE id = $1::text`),
		decided:   s(`SELECT id FROM $S.approval_decisions WHERE id = ANY($1::text[])`),
		unresumed: s(`SELECT ` + approvalRecordColumns + ` FROM $S.approval_decisions WHERE resumed_at IS NULL AND resume_not_before <= $1::text ORDER BY decided_at COLLATE "C", id COLLATE "C" LIMIT $2::bigint`),
		claim: s(`UPDATE $S.approval_decisions SET resume_not_before = $2::text, resume_claimant = '', resume_claim = '',
				resume_crc = ` + resumeCRCWith(noClaimant(map[string]string{"resume_not_before": "$2::text"})) + `
			WHERE id = $1::text AND resumed_at IS NULL AND resume_not_before <= $3::text AND ` + approvalIntact),
		// claimAs: $4 the worker, $5 the claim, $6 the claim of the
		// worker's it takes back ('' for none).
		claimAs: s(`UPDATE $S.approval_decisions SET resume_not_before = $2::text, resume_claimant = $4::text, resume_claim = $5::text,
				resume_crc = ` + resumeCRCWith(map[string]string{"resume_not_before": "$2::text", "resume_claimant": "$4::text", "resume_claim": "$5::text"}) + `
			WHERE id = $1::text AND resumed_at IS NULL
				AND (resume_not_before <= $3::text OR ($6::text <> '' AND resume_claimant = $4::text AND resume_claim = $6::text))
				AND ` + approvalIntact),
		claims: s(`SELECT ` + approvalRecordColumns + ` FROM $S.approval_decisions
			WHERE resumed_at IS NULL AND resume_claimant = $1::text AND resume_not_before > $2::text
			ORDER BY decided_at COLLATE "C", id COLLATE "C" LIMIT $3::bigint`),
		finish: s(`UPDATE $S.approval_decisions SET resumed_at = $2::text, resume_note = $3::text, resume_not_before = '', resume_claimant = '', resume_claim = '',
				resume_crc = ` + resumeCRCWith(noClaimant(map[string]string{"resumed_at": "$2::text", "resume_note": "$3::text", "resume_not_before": "''"})) + `
			WHERE id = $1::text AND resumed_at IS NULL AND ` + approvalIntact),
		retry: s(`UPDATE $S.approval_decisions SET resume_attempts = resume_attempts + 1, resume_error = $2::text, resume_not_before = $3::text,
				resume_claimant = '', resume_claim = '',
				resume_crc = ` + resumeCRCWith(noClaimant(map[string]string{"resume_attempts::text": "(resume_attempts + 1)::text", "resume_error": "$2::text", "resume_not_before": "$3::text"})) + `
			WHERE id = $1::text AND resumed_at IS NULL AND ` + approvalIntact),
		exists: s(`SELECT 1 FROM $S.approval_decisions WHERE id = $1::text`),
		recordOutcome: s(`INSERT INTO $S.approval_executions (approval_id, idempotency_key, args_hash, result, error, recorded_at, crc)
			VALUES ($1::text, $2::text, $3::text, $4::text::jsonb, $5::text, $6::text,
				$S.crc($1::text, $2::text, $3::text, $4::text::jsonb::text, $5::text, $6::text)) ON CONFLICT (approval_id) DO NOTHING`),
		execution: s(`SELECT idempotency_key, args_hash, result, error, recorded_at, crc FROM $S.approval_executions WHERE approval_id = $1::text`),
	}
}

// live returns an *approval.Error matching approval.ErrClosed after
// DB.Close.
func (s *ApprovalStore) live(id string) error {
	if s.db.closed.Load() {
		return &approval.Error{ID: id, Kind: approval.ErrClosed}
	}
	return nil
}

// fail maps a database error: ErrClosed once the DB is closed, ctx's
// error as it is, a *StoreError otherwise.
func (s *ApprovalStore) fail(op, id string, err error) error {
	if s.db.closed.Load() {
		return &approval.Error{ID: id, Kind: approval.ErrClosed, Reason: "the database is closed"}
	}
	return storeErr("approval: "+op+" "+quoteShort(id), "", err, false)
}

func quoteShort(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return quote(s)
}

// canonJSON returns JSON read from a JSONB column in canonical form:
// what the store wrote was canonical (edited arguments, results), and
// JSONB keeps neither key order nor spacing, so canonicalising restores
// the bytes written.
func canonJSON(b []byte) (json.RawMessage, error) {
	if b == nil {
		return nil, nil
	}
	return canon.JSON(b)
}

// approvalRecordRow is an approval_decisions row as read.
type approvalRecordRow struct {
	thread, checkpoint, tool, owner    string
	request                            []byte
	id, outcome, reviewer, note        string
	args                               []byte
	argsHash, decided                  string
	resumed                            *string
	resumeNote, resumeError, notBefore string
	attempts                           int32
	crc, resumeCRC                     []byte
	claimant, claim                    string
}

func (r *approvalRecordRow) dest() []any {
	return []any{&r.thread, &r.checkpoint, &r.tool, &r.owner, &r.request, &r.id, &r.outcome, &r.reviewer, &r.note, &r.args, &r.argsHash, &r.decided,
		&r.resumed, &r.resumeNote, &r.attempts, &r.resumeError, &r.notBefore, &r.crc, &r.resumeCRC, &r.claimant, &r.claim}
}

// errCopied is what a row whose checksum fails is.
var errCopied = errors.New("its checksum does not match its approval ID and contents (damaged, edited by hand, or copied from another approval)")

// record checks the row and decodes it: an *approval.CorruptError naming
// the approval when it does not verify (approvalDecisionCRC,
// approvalResumeCRC), does not decode strictly, or fails Record.Verify.
func (r *approvalRecordRow) record() (approval.Record, error) {
	if !bytes.Equal(r.crc, crcOf(str(r.id), str(r.thread), str(r.checkpoint), str(r.tool), str(r.owner), str(r.outcome), str(r.reviewer), str(r.note),
		r.args, str(r.argsHash), str(r.decided), r.request)) {
		return approval.Record{}, &approval.CorruptError{ID: r.id, What: "decision", Err: errCopied}
	}
	if !bytes.Equal(r.resumeCRC, resumeCRCOf(r)) {
		return approval.Record{}, &approval.CorruptError{ID: r.id, What: "resume", Err: errCopied}
	}
	rec, what, err := r.decode()
	if err != nil {
		return approval.Record{}, &approval.CorruptError{ID: r.id, What: what, Err: err}
	}
	if err := rec.Verify(); err != nil {
		return approval.Record{}, err
	}
	return rec, nil
}

func (r *approvalRecordRow) decode() (approval.Record, string, error) {
	rec := approval.Record{ID: r.id, Thread: r.thread, Checkpoint: r.checkpoint}
	req, ok, err := approval.ParseRequest(json.RawMessage(r.request))
	switch {
	case err != nil:
		return rec, "request", err
	case !ok:
		return rec, "request", errors.New("not an approval request")
	case req.Tool != r.tool || req.Owner != r.owner:
		return rec, "request", errors.New("its tool or owner is not the row's")
	}
	// JSONB keeps neither key order nor spacing: the request's JSON
	// fields come back canonical, as every reader of them compares them.
	for _, f := range []*json.RawMessage{&req.Args, &req.Context, &req.Schema} {
		if len(*f) > 0 {
			if *f, err = canon.JSON(*f); err != nil {
				return rec, "request", err
			}
		}
	}
	rec.Request = req
	at, err := readTime(r.decided)
	if err != nil {
		return rec, "decision", fmt.Errorf("decided_at: %w", err)
	}
	rec.Decision = approval.Decision{ID: r.id, Outcome: approval.Outcome(r.outcome), Reviewer: r.reviewer, Note: r.note, ArgsHash: r.argsHash, DecidedAt: at}
	if r.args != nil {
		if rec.Decision.Args, err = canonJSON(r.args); err != nil {
			return rec, "decision", fmt.Errorf("args: %w", err)
		}
	}
	if r.resumed != nil {
		if rec.Resume.At, err = readTime(*r.resumed); err != nil {
			return rec, "resume", fmt.Errorf("resumed_at: %w", err)
		}
	}
	if r.notBefore != "" {
		if rec.Resume.NotBefore, err = readTime(r.notBefore); err != nil {
			return rec, "resume", fmt.Errorf("resume_not_before: %w", err)
		}
	}
	rec.Resume.Note, rec.Resume.Attempts, rec.Resume.LastError = r.resumeNote, int(r.attempts), r.resumeError
	rec.Resume.Claimant, rec.Resume.Claim = r.claimant, r.claim
	return rec, "", nil
}

// scanApproval reads and checks one row: pgx's error, or an
// *approval.CorruptError.
func scanApproval(row pgx.Row) (approval.Record, error) {
	var r approvalRecordRow
	if err := row.Scan(r.dest()...); err != nil {
		return approval.Record{}, err
	}
	return r.record()
}

// Decide implements approval.Store: one INSERT ... ON CONFLICT DO
// NOTHING; the row that lands wins, and a loser reads the winner back. It
// fails as approval.Store.Decide says, with an *approval.Error matching
// approval.ErrClosed after Close, and with a *StoreError when the
// database fails.
func (s *ApprovalStore) Decide(ctx context.Context, item approval.Item, v approval.Verdict) (approval.Decision, error) {
	if err := s.live(item.ID); err != nil {
		return approval.Decision{}, err
	}
	if err := approval.CheckVerdict(item, v); err != nil {
		return approval.Decision{}, err
	}
	if w, ok, err := s.winner(ctx, item.ID); err != nil {
		return approval.Decision{}, err
	} else if ok {
		return approval.Decision{}, &approval.AlreadyDecidedError{ID: item.ID, Winner: w}
	}
	d, late, err := approval.Judge(item, v, s.db.now())
	if err != nil {
		return approval.Decision{}, err
	}
	req, err := json.Marshal(item.Request)
	if err != nil {
		return approval.Decision{}, &approval.Error{ID: item.ID, Kind: approval.ErrInvalidRequest, Reason: "does not encode: " + err.Error()}
	}
	if err := storable(req); err != nil {
		return approval.Decision{}, &approval.Error{ID: item.ID, Kind: approval.ErrInvalidRequest, Reason: err.Error()}
	}
	var args any
	if d.Args != nil {
		args = string(d.Args)
	}
	tag, err := s.db.pool.Exec(ctx, s.db.q.approval.insert, item.ID, item.Thread, item.Checkpoint, item.Request.Tool, item.Request.Owner,
		string(d.Outcome), d.Reviewer, d.Note, args, d.ArgsHash, formatTime(d.DecidedAt), string(req))
	if err != nil {
		return approval.Decision{}, s.fail("record decision on", item.ID, err)
	}
	if tag.RowsAffected() == 1 {
		if late != nil {
			return approval.Decision{}, late
		}
		return d, nil
	}
	w, ok, err := s.winner(ctx, item.ID)
	if err == nil && !ok {
		err = errors.New("the conflicting row is gone")
	}
	if err != nil {
		return approval.Decision{}, fmt.Errorf("approval: read the winning decision on approval %s: %w", quoteShort(item.ID), err)
	}
	return approval.Decision{}, &approval.AlreadyDecidedError{ID: item.ID, Winner: w}
}

// winner reads the decision recorded on id: ok false when there is
// none, an *approval.CorruptError when its row does not verify.
func (s *ApprovalStore) winner(ctx context.Context, id string) (approval.Decision, bool, error) {
	rec, err := scanApproval(s.db.pool.QueryRow(ctx, s.db.q.approval.winner, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return approval.Decision{}, false, nil
	}
	if err != nil {
		return approval.Decision{}, false, s.readFail("read", id, err)
	}
	return rec.Decision, true, nil
}

// readFail maps a failed read: an *approval.CorruptError as it is, the
// database's errors as fail does.
func (s *ApprovalStore) readFail(op, id string, err error) error {
	var ce *approval.CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return s.fail(op, id, err)
}

// Get implements approval.Store. It returns an *approval.Error matching
// approval.ErrNotFound when there is no decision, approval.ErrClosed
// after Close, and a *StoreError when the database fails.
func (s *ApprovalStore) Get(ctx context.Context, id string) (approval.Record, error) {
	if err := s.live(id); err != nil {
		return approval.Record{}, err
	}
	r, err := scanApproval(s.db.pool.QueryRow(ctx, s.db.q.approval.get, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return approval.Record{}, &approval.Error{ID: id, Kind: approval.ErrNotFound, Reason: "no decision"}
	}
	if err != nil {
		return approval.Record{}, s.readFail("read", id, err)
	}
	return r, nil
}

// Decided implements approval.Store: one statement. It fails with
// approval.ErrClosed after Close, ctx's error, or a *StoreError.
func (s *ApprovalStore) Decided(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.approval.decided, ids)
	if err != nil {
		return nil, s.fail("look up decisions", "", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.fail("look up decisions", "", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("look up decisions", "", err)
	}
	return out, nil
}

// Unresumed implements approval.Store. It fails with approval.ErrClosed
// after Close, ctx's error, or a *StoreError.
func (s *ApprovalStore) Unresumed(ctx context.Context, limit int) ([]approval.Record, error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	var lim any
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.approval.unresumed, formatTime(s.db.now()), lim)
	if err != nil {
		return nil, s.fail("list unresumed decisions", "", err)
	}
	defer rows.Close()
	var out []approval.Record
	for rows.Next() {
		r, err := scanApproval(rows)
		if err != nil {
			return nil, s.readFail("list unresumed decisions", "", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list unresumed decisions", "", err)
	}
	return out, nil
}

// update runs a conditional UPDATE on one approval and reports whether it
// changed the row; when it did not, it tells a missing ID (ErrNotFound)
// from a condition that did not hold.
func (s *ApprovalStore) update(ctx context.Context, id, what, query string, args ...any) (bool, error) {
	tag, err := s.db.pool.Exec(ctx, query, args...)
	if err != nil {
		return false, s.fail(what, id, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Refused: no such approval (ErrNotFound), a row that does not verify
	// (the update's WHERE checks it; Get says how), or a condition that
	// did not hold.
	if _, err := s.Get(ctx, id); err != nil {
		return false, err
	}
	return false, nil
}

// ClaimResume implements approval.Store. It fails as approval.Store
// says, with approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) ClaimResume(ctx context.Context, id string, lease time.Duration) (bool, error) {
	if err := s.live(id); err != nil {
		return false, err
	}
	if err := approval.CheckResumeLease(id, lease); err != nil {
		return false, err
	}
	now := s.db.now()
	return s.update(ctx, id, "claim", s.db.q.approval.claim, id, formatTime(now.Add(lease)), formatTime(now))
}

// ClaimResumeAs implements approval.ResumeClaimer: one conditional
// UPDATE, which takes the approval only while it is unresumed and either
// free (its Resume.NotBefore passed) or held by the claim of c.Worker that
// c.TakeBack names, so that two workers never hold one resume at once. It
// fails as approval.ResumeClaimer says (approval.ErrNotFound, an
// *approval.Error matching approval.ErrInvalidConfig for an invalid c, an
// *approval.CorruptError for a row that does not verify, which is not
// claimed), with approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) ClaimResumeAs(ctx context.Context, id string, c approval.Claim) (bool, error) {
	if err := s.live(id); err != nil {
		return false, err
	}
	if err := approval.CheckClaim(id, c); err != nil {
		return false, err
	}
	now := s.db.now()
	return s.update(ctx, id, "claim", s.db.q.approval.claimAs, id, formatTime(now.Add(c.Lease)), formatTime(now), c.Worker, c.ID, c.TakeBack)
}

// Claims implements approval.ResumeClaimer: the unresumed approvals whose
// claim by worker is live, oldest decision first. It fails as
// approval.ResumeClaimer says (an *approval.Error matching
// approval.ErrInvalidConfig for a worker name that is not valid, an
// *approval.CorruptError for a row that does not verify), with
// approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) Claims(ctx context.Context, worker string, limit int) ([]approval.Record, error) {
	if err := s.live(""); err != nil {
		return nil, err
	}
	if err := approval.CheckWorkerName(worker); err != nil {
		return nil, err
	}
	var lim *int64
	if limit > 0 {
		n := int64(limit)
		lim = &n
	}
	what := "list the claims of worker " + quoteShort(worker)
	rows, err := s.db.pool.Query(ctx, s.db.q.approval.claims, worker, formatTime(s.db.now()), lim)
	if err != nil {
		return nil, s.fail(what, "", err)
	}
	defer rows.Close()
	var out []approval.Record
	for rows.Next() {
		r, err := scanApproval(rows)
		if err != nil {
			return nil, s.readFail(what, "", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(what, "", err)
	}
	return out, nil
}

// FinishResume implements approval.Store. It fails as approval.Store
// says, with approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) FinishResume(ctx context.Context, id, note string) error {
	if err := s.live(id); err != nil {
		return err
	}
	_, err := s.update(ctx, id, "finish resuming", s.db.q.approval.finish, id, formatTime(s.db.now()), approval.TruncateReason(note))
	return err
}

// RetryResume implements approval.Store. It fails as approval.Store
// says, with approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) RetryResume(ctx context.Context, id, reason string, after time.Duration) error {
	if err := s.live(id); err != nil {
		return err
	}
	if err := approval.CheckRetryDelay(id, after); err != nil {
		return err
	}
	_, err := s.update(ctx, id, "defer resuming", s.db.q.approval.retry, id, approval.TruncateReason(reason), formatTime(s.db.now().Add(after)))
	return err
}

// Now implements approval.Store: the DB's clock (Config.Now).
func (s *ApprovalStore) Now() time.Time { return s.db.now() }

// Close does nothing: the store lives as long as its DB (close that).
// It returns nil.
func (s *ApprovalStore) Close() error { return nil }

// RecordOutcome implements approval.OutcomeRecorder. It fails as
// approval.OutcomeRecorder says, with approval.ErrClosed after Close, and
// with a *StoreError.
func (s *ApprovalStore) RecordOutcome(ctx context.Context, id string, e approval.Execution) error {
	if err := s.live(id); err != nil {
		return err
	}
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	e, err = approval.CheckExecution(rec, e, s.db.now())
	if err != nil {
		return err
	}
	var result any
	if e.Result != nil {
		if err := storable(e.Result); err != nil {
			return &approval.Error{ID: id, Kind: approval.ErrInvalidArgs, Reason: err.Error()}
		}
		result = string(e.Result)
	}
	tag, err := s.db.pool.Exec(ctx, s.db.q.approval.recordOutcome, id, e.IdempotencyKey, e.ArgsHash, result, e.Error, formatTime(e.At))
	if err != nil {
		return s.fail("record outcome of", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	old, err := s.execution(ctx, id)
	if err != nil {
		return err
	}
	if old != nil && approval.SameExecution(*old, e) {
		return nil
	}
	return &approval.Error{ID: id, Kind: approval.ErrOutcomeRecorded}
}

// execution reads the outcome recorded for id (nil when none): an
// *approval.CorruptError when its row does not verify or decode strictly.
// The caller checks it against its decision (Trail.Verify).
func (s *ApprovalStore) execution(ctx context.Context, id string) (*approval.Execution, error) {
	var (
		e      approval.Execution
		result []byte
		at     string
		crc    []byte
	)
	err := s.db.pool.QueryRow(ctx, s.db.q.approval.execution, id).Scan(&e.IdempotencyKey, &e.ArgsHash, &result, &e.Error, &at, &crc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail("read outcome of", id, err)
	}
	if !bytes.Equal(crc, crcOf(str(id), str(e.IdempotencyKey), str(e.ArgsHash), result, str(e.Error), str(at))) {
		return nil, &approval.CorruptError{ID: id, What: "execution", Err: errCopied}
	}
	if e.Result, err = canonJSON(result); err != nil {
		return nil, &approval.CorruptError{ID: id, What: "execution", Err: fmt.Errorf("result: %w", err)}
	}
	if e.At, err = readTime(at); err != nil {
		return nil, &approval.CorruptError{ID: id, What: "execution", Err: fmt.Errorf("recorded_at: %w", err)}
	}
	return &e, nil
}

// Audit implements approval.Store. It fails as approval.Store says, with
// approval.ErrClosed after Close, and with a *StoreError.
func (s *ApprovalStore) Audit(ctx context.Context, id string) (approval.Trail, error) {
	if err := s.live(id); err != nil {
		return approval.Trail{}, err
	}
	rec, err := s.Get(ctx, id)
	if err != nil {
		return approval.Trail{}, err
	}
	e, err := s.execution(ctx, id)
	if err != nil {
		return approval.Trail{}, err
	}
	trail := approval.Trail{Record: rec, Execution: e}
	if err := trail.Verify(); err != nil {
		return approval.Trail{}, err
	}
	if err := s.consumed(ctx, &trail); err != nil {
		return approval.Trail{}, err
	}
	return trail, nil
}
