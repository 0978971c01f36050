package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// Ledger is a ledger.Ledger on PostgreSQL, in the tables ledger and
// messages of the DB's schema, with the rules of ledger.Memory and
// ledger.SQL (it passes ledgertest). Get it from DB.Ledger: it is fenced
// by the DB's Saver (see WithOptions). Every write
// is one transaction; Begin reads the record it may replace with FOR
// UPDATE, so that concurrent Begins of one key decide one at a time. It is
// safe for concurrent use by any number of goroutines and processes.
type Ledger struct {
	db   *DB
	opts ledger.Options
}

var _ ledger.Ledger = (*Ledger)(nil)

type ledgerQueries struct {
	insert, selectForUpdate, takeOver, restart, complete, release, resolve, forget, get, pruneCandidates, pruneDone, pruneMessages, claim, claimRead string
}

const ledgerColumns = `key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc`

// The checksums of the ledger's rows (see Integrity in the package doc):
// the schema's crc function over the key (a claim's scope and ID) and
// every column, JSONB as PostgreSQL prints it, computed by the statement
// that writes the row and checked on every read, and by the WHERE of
// every update, so that nothing is written on a row that does not verify.
var ledgerCRCColumns = []string{"key", "tool", "args_hash", "state", "result::text", "failure::text", "owner",
	"lease_until::text", "created_at::text", "completed_at::text", "thread_id", "run_id"}

// ledgerCRCWith is the checksum of a ledger row with the columns of set
// replaced by the expressions that write them.
func ledgerCRCWith(set map[string]string) string {
	out := make([]string, len(ledgerCRCColumns))
	for i, c := range ledgerCRCColumns {
		out[i] = c
		if e, ok := set[c]; ok {
			out[i] = e
		}
	}
	return `$S.crc(` + strings.Join(out, ", ") + `)`
}

// ledgerIntact is the WHERE clause of a write on a record: it verifies.
var ledgerIntact = `crc = ` + ledgerCRCWith(nil)

// messageCRC is the checksum of a messages row.
const messageCRC = `$S.crc(scope, id, fingerprint, claimed_at::text)`

func newLedgerQueries(s func(string) string) ledgerQueries {
	return ledgerQueries{
		insert: s(`INSERT INTO $S.ledger (key, tool, args_hash, state, owner, lease_until, created_at, thread_id, run_id, crc)
			VALUES ($1::text, $2::text, $3::text, 'pending', $4::text, $5::bigint, $6::bigint, $7::text, $8::text, ` + ledgerCRCWith(map[string]string{
			"key": "$1::text", "tool": "$2::text", "args_hash": "$3::text", "state": "'pending'", "result::text": "NULL", "failure::text": "NULL",
			"owner": "$4::text", "lease_until::text": "$5::bigint::text", "created_at::text": "$6::bigint::text", "completed_at::text": "NULL",
			"thread_id": "$7::text", "run_id": "$8::text"}) + `) ON CONFLICT (key) DO NOTHING`),
		selectForUpdate: s(`SELECT ` + ledgerColumns + ` FROM $S.ledger WHERE key = $1::text FOR UPDATE`),
		takeOver: s(`UPDATE $S.ledger SET owner = $2::text, lease_until = $3::bigint, thread_id = $4::text, run_id = $5::text, crc = ` + ledgerCRCWith(map[string]string{
			"owner": "$2::text", "lease_until::text": "$3::bigint::text", "thread_id": "$4::text", "run_id": "$5::text"}) + `
			WHERE key = $1::text AND ` + ledgerIntact),
		restart: s(`UPDATE $S.ledger SET tool = $2::text, args_hash = $3::text, state = 'pending', result = NULL, failure = NULL, owner = $4::text,
			lease_until = $5::bigint, created_at = $6::bigint, completed_at = NULL, thread_id = $7::text, run_id = $8::text, crc = ` + ledgerCRCWith(map[string]string{
			"tool": "$2::text", "args_hash": "$3::text", "state": "'pending'", "result::text": "NULL", "failure::text": "NULL",
			"owner": "$4::text", "lease_until::text": "$5::bigint::text", "created_at::text": "$6::bigint::text", "completed_at::text": "NULL",
			"thread_id": "$7::text", "run_id": "$8::text"}) + `
			WHERE key = $1::text AND ` + ledgerIntact),
		complete: s(`UPDATE $S.ledger SET state = 'done', result = $3::text::jsonb, failure = $4::text::jsonb, completed_at = $5::bigint, crc = ` + ledgerCRCWith(map[string]string{
			"state": "'done'", "result::text": "$3::text::jsonb::text", "failure::text": "$4::text::jsonb::text", "completed_at::text": "$5::bigint::text"}) + `
			WHERE key = $1::text AND state = 'pending' AND owner = $2::text AND ` + ledgerIntact),
		release: s(`DELETE FROM $S.ledger WHERE key = $1::text AND state = 'pending' AND owner = $2::text AND ` + ledgerIntact),
		resolve: s(`UPDATE $S.ledger SET state = 'done', result = $2::text::jsonb, failure = $3::text::jsonb, completed_at = $4::bigint, crc = ` + ledgerCRCWith(map[string]string{
			"state": "'done'", "result::text": "$2::text::jsonb::text", "failure::text": "$3::text::jsonb::text", "completed_at::text": "$4::bigint::text"}) + `
			WHERE key = $1::text AND state = 'pending' AND ` + ledgerIntact),
		forget:          s(`DELETE FROM $S.ledger WHERE key = $1::text`),
		get:             s(`SELECT ` + ledgerColumns + ` FROM $S.ledger WHERE key = $1::text`),
		pruneCandidates: s(`SELECT ` + ledgerColumns + ` FROM $S.ledger WHERE state = 'done' AND created_at <= $1::bigint FOR UPDATE`),
		pruneDone:       s(`DELETE FROM $S.ledger WHERE state = 'done' AND created_at <= $1::bigint`),
		pruneMessages:   s(`DELETE FROM $S.messages WHERE claimed_at <= $1::bigint`),
		claim: s(`INSERT INTO $S.messages AS m (scope, id, fingerprint, claimed_at, crc)
			SELECT $1::text, $2::text, $3::text, $4::bigint, $S.crc($1::text, $2::text, $3::text, $4::bigint::text)
			WHERE NOT EXISTS (SELECT 1 FROM $S.messages WHERE scope = '' AND id = $2::text AND (claimed_at > $5::bigint OR crc <> ` + messageCRC + `))
			ON CONFLICT (scope, id) DO UPDATE SET fingerprint = excluded.fingerprint, claimed_at = excluded.claimed_at, crc = excluded.crc
			WHERE m.claimed_at <= $5::bigint AND m.crc = $S.crc(m.scope, m.id, m.fingerprint, m.claimed_at::text)`),
		claimRead: s(`SELECT scope, id, fingerprint, claimed_at, crc FROM $S.messages WHERE id = $1::text AND (scope = $2::text OR scope = '')
			ORDER BY scope COLLATE "C" DESC`),
	}
}

// textOnly refuses identifiers PostgreSQL's text cannot hold (a NUL
// byte, invalid UTF-8) with an error matching ledger.ErrInvalid: the
// SQLite ledger stores any bytes, and this one refuses rather than
// storing another identifier.
func textOnly(what ...string) error {
	for i := 0; i+1 < len(what); i += 2 {
		if v := what[i+1]; !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: %w: the %s holds a NUL byte or invalid UTF-8, which PostgreSQL's text cannot store", ledger.ErrInvalid, ErrUnsupported, what[i])
		}
	}
	return nil
}

func newLedger(db *DB) (*Ledger, error) {
	return fencedBy(db, ledger.Options{Retention: db.cfg.LedgerRetention, Now: db.cfg.Now})
}

// fencedBy returns the ledger of db with options o, fenced by db's saver
// unless o.Unfenced.
func fencedBy(db *DB, o ledger.Options) (*Ledger, error) {
	o, err := ledger.ResolveOptions(o)
	if err != nil {
		return nil, err
	}
	if o.Fence != nil && o.Fence != ledger.Fencer(db.saver) {
		return nil, fmt.Errorf("%w: Options.Fence is not the saver of this ledger's DB (pass db.Saver(), or leave it nil: the ledger is fenced by it by default)", ledger.ErrInvalid)
	}
	if !o.Unfenced {
		o.Fence = db.saver
	}
	return &Ledger{db: db, opts: o}, nil
}

// WithOptions returns a ledger on the same tables with other options:
// retention, clock, and the fence. The ledger is fenced by the DB's Saver
// unless o.Unfenced is set: the intents of leased runs are begun,
// completed and released only while the run holds the thread's lease
// (D17), and their outcomes commit with the write that saves the call's
// result (CompleteJoin, D16). Set Unfenced only for graphs that save
// their checkpoints elsewhere (see ledger.Options.Unfenced). It returns
// an error matching ledger.ErrInvalid for bad options, for a Fence that
// is not this DB's Saver, and for Unfenced with a Fence.
func (l *Ledger) WithOptions(o ledger.Options) (*Ledger, error) {
	return fencedBy(l.db, o)
}

// wrap adds the operation and key to a storage error and leaves the
// ledger's typed errors as they are.
func (l *Ledger) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var (
		kr *ledger.KeyReuseError
		ip *ledger.InProgressError
		ou *ledger.OutcomeUnknownError
	)
	if errors.As(err, &kr) || errors.As(err, &ip) || errors.As(err, &ou) || errors.Is(err, ledger.ErrNotHeld) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalid) ||
		errors.Is(err, ledger.ErrDuplicateMessage) || errors.Is(err, ledger.ErrDuplicateMismatch) || errors.Is(err, ledger.ErrCorrupt) {
		return err
	}
	if l.db.closed.Load() {
		return fmt.Errorf("ledger: %s key %s: %w", op, ledger.ShortKey(key), errPoolClosed)
	}
	return storeErr("ledger: "+op+" key "+ledger.ShortKey(key), "", err, false)
}

func nanos(t time.Time) int64 { return t.UnixNano() }

// scanEntry reads and checks one record: pgx's error, or a
// *ledger.CorruptError naming the key when the row does not verify, its
// failure does not decode strictly, or it fails Entry.Verify.
func scanEntry(row pgx.Row) (ledger.Entry, error) {
	var (
		e               ledger.Entry
		state           string
		result, failure []byte
		lease, created  int64
		completed       *int64
		crc             []byte
	)
	if err := row.Scan(&e.Key, &e.Tool, &e.ArgsHash, &state, &result, &failure, &e.Owner, &lease, &created, &completed, &e.Thread, &e.Run, &crc); err != nil {
		return ledger.Entry{}, err
	}
	var done []byte
	if completed != nil {
		done = num(*completed)
	}
	if !bytes.Equal(crc, crcOf(str(e.Key), str(e.Tool), str(e.ArgsHash), str(state), result, failure, str(e.Owner), num(lease), num(created), done, str(e.Thread), str(e.Run))) {
		return ledger.Entry{}, &ledger.CorruptError{Key: e.Key, What: "record", Err: errors.New("its checksum does not match its key and contents (damaged, edited by hand, or copied from another key)")}
	}
	e.State = ledger.State(state)
	e.LeaseUntil, e.CreatedAt = time.Unix(0, lease), time.Unix(0, created)
	if completed != nil {
		e.CompletedAt = time.Unix(0, *completed)
	}
	if result != nil {
		e.Outcome.Result = json.RawMessage(result)
	}
	if failure != nil {
		f, err := ledger.DecodeFailure(failure)
		if err != nil {
			return ledger.Entry{}, &ledger.CorruptError{Key: e.Key, What: "failure", Err: err}
		}
		e.Outcome.Failure = f
	}
	if err := e.Verify(); err != nil {
		return ledger.Entry{}, err
	}
	return e, nil
}

// diagnose says why a write on key's record changed nothing: the
// record's *ledger.CorruptError (the write's WHERE refuses a row that
// does not verify), ledger.ErrNotFound, or refused (nil: the caller's
// rule did not hold).
func (l *Ledger) diagnose(ctx context.Context, op, key string) error {
	_, err := scanEntry(l.db.pool.QueryRow(ctx, l.db.q.ledger.get, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.NotFoundError(key)
	}
	if err != nil {
		return l.wrap(op, key, err)
	}
	return nil
}

func outcomeArgs(o ledger.Outcome) (result, failure any, err error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if o.Result != nil {
		if err := storable(o.Result); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ledger.ErrInvalid, err)
		}
		result = string(o.Result)
	}
	if o.Failure != nil {
		b, err := json.Marshal(o.Failure)
		if err != nil {
			return nil, nil, err
		}
		failure = string(b)
	}
	return result, failure, nil
}

// Begin implements ledger.Ledger, in one transaction: an insert that wins
// for a new key, or the record locked and judged by ledger.Judge. It
// returns an error matching ledger.ErrInvalid, a *ledger.KeyReuseError,
// *ledger.InProgressError or *ledger.OutcomeUnknownError as ledger.Ledger
// says, or a *StoreError.
func (l *Ledger) Begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	if err := ledger.CheckIntent(&in); err != nil {
		return ledger.Entry{}, false, err
	}
	if err := textOnly("idempotency key", in.Key, "owner", in.Owner, "tool", in.Tool, "arguments hash", in.ArgsHash, "thread", in.Thread, "run", in.Run); err != nil {
		return ledger.Entry{}, false, err
	}
	var (
		out     ledger.Entry
		started bool
	)
	err := l.write(ctx, in.Thread, in.Run, func(tx pgx.Tx) error {
		now := l.opts.Now()
		fresh := ledger.Entry{Key: in.Key, Tool: in.Tool, ArgsHash: in.ArgsHash, State: ledger.StatePending, Owner: in.Owner,
			LeaseUntil: now.Add(in.Lease), CreatedAt: now, Thread: in.Thread, Run: in.Run}
		tag, err := tx.Exec(ctx, l.db.q.ledger.insert, in.Key, in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now), in.Thread, in.Run)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			out, started = fresh, true
			return nil
		}
		e, err := scanEntry(tx.QueryRow(ctx, l.db.q.ledger.selectForUpdate, in.Key))
		if errors.Is(err, pgx.ErrNoRows) {
			// Forgotten between the insert and the read: begin again.
			return errRetryBegin
		}
		if err != nil {
			return err
		}
		restart, err := ledger.Judge(e, in, now, l.opts.Retention)
		if err != nil {
			return err
		}
		if !restart {
			out = e
			return nil
		}
		if e.State == ledger.StatePending { // taken over: keep its age
			e.Owner, e.LeaseUntil, e.Thread, e.Run = in.Owner, fresh.LeaseUntil, in.Thread, in.Run
			_, err = tx.Exec(ctx, l.db.q.ledger.takeOver, in.Key, e.Owner, nanos(e.LeaseUntil), e.Thread, e.Run)
			out, started = e, true
			return err
		}
		_, err = tx.Exec(ctx, l.db.q.ledger.restart, in.Key, in.Tool, in.ArgsHash, in.Owner, nanos(fresh.LeaseUntil), nanos(now), in.Thread, in.Run)
		out, started = fresh, true
		return err
	})
	if errors.Is(err, errRetryBegin) {
		return l.Begin(ctx, in)
	}
	if err != nil {
		return ledger.Entry{}, false, l.wrap("begin", in.Key, err)
	}
	return out, started, nil
}

var errRetryBegin = errors.New("ledger: begin again")

// Complete implements ledger.Ledger: one statement. It returns an error
// matching ledger.ErrNotHeld when owner does not hold a pending intent
// under key, ledger.ErrInvalid for a result JSONB cannot hold, or a
// *StoreError.
func (l *Ledger) Complete(ctx context.Context, key, owner string, o ledger.Outcome) error {
	result, failure, err := outcomeArgs(o)
	if err != nil {
		return err
	}
	n, err := l.heldWrite(ctx, key, owner, l.db.q.ledger.complete, key, owner, result, failure, nanos(l.opts.Now()))
	if err != nil {
		return l.wrap("complete", key, err)
	}
	if n != 1 {
		if err := l.diagnose(ctx, "complete", key); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		return ledger.NotHeldError(key, "")
	}
	return nil
}

// Release implements ledger.Ledger: one statement. It fails as Complete
// does.
func (l *Ledger) Release(ctx context.Context, key, owner string) error {
	n, err := l.heldWrite(ctx, key, owner, l.db.q.ledger.release, key, owner)
	if err != nil {
		return l.wrap("release", key, err)
	}
	if n != 1 {
		if err := l.diagnose(ctx, "release", key); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		return ledger.NotHeldError(key, "")
	}
	return nil
}

// Resolve implements ledger.Ledger. It returns an error matching
// ledger.ErrNotFound when there is no record under key, one matching
// ledger.ErrNotHeld when the record is already done, or a *StoreError.
func (l *Ledger) Resolve(ctx context.Context, key string, o ledger.Outcome) error {
	result, failure, err := outcomeArgs(o)
	if err != nil {
		return err
	}
	tag, err := l.db.pool.Exec(ctx, l.db.q.ledger.resolve, key, result, failure, nanos(l.opts.Now()))
	if err != nil {
		return l.wrap("resolve", key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if err := l.diagnose(ctx, "resolve", key); err != nil {
		return err
	}
	return ledger.NotHeldError(key, "already has an outcome")
}

// Forget implements ledger.Ledger. It fails only with a *StoreError.
func (l *Ledger) Forget(ctx context.Context, key string) error {
	_, err := l.db.pool.Exec(ctx, l.db.q.ledger.forget, key)
	return l.wrap("forget", key, err)
}

// Get implements ledger.Ledger. It returns an error matching
// ledger.ErrNotFound when there is no record under key, or a *StoreError.
func (l *Ledger) Get(ctx context.Context, key string) (ledger.Entry, error) {
	e, err := scanEntry(l.db.pool.QueryRow(ctx, l.db.q.ledger.get, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Entry{}, ledger.NotFoundError(key)
	}
	if err != nil {
		return ledger.Entry{}, l.wrap("get", key, err)
	}
	return e, nil
}

// Prune implements ledger.Ledger, in one transaction. It fails only with
// a *StoreError, deleting nothing.
func (l *Ledger) Prune(ctx context.Context) (int, error) {
	cut := nanos(l.opts.Now().Add(-l.opts.Retention))
	var n int64
	err := pgx.BeginFunc(ctx, l.db.pool, func(tx pgx.Tx) error {
		// Nothing is deleted when a row it would delete does not verify.
		rows, err := tx.Query(ctx, l.db.q.ledger.pruneCandidates, cut)
		if err != nil {
			return err
		}
		for rows.Next() {
			if _, err := scanEntry(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var bad []byte
		var badScope, badID string
		err = tx.QueryRow(ctx, sqlFor(l.db.schema, `SELECT scope, id, crc FROM $S.messages WHERE claimed_at <= $1::bigint AND crc <> `+messageCRC+` LIMIT 1`), cut).Scan(&badScope, &badID, &bad)
		if err == nil {
			return &ledger.CorruptError{Key: badID, Scope: badScope, What: "message claim", Err: errClaimCopied}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		for _, q := range []string{l.db.q.ledger.pruneDone, l.db.q.ledger.pruneMessages} {
			tag, err := tx.Exec(ctx, q, cut)
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return 0, l.wrap("prune", "", err)
	}
	return int(n), nil
}

// ClaimMessage implements ledger.Ledger: one statement. It returns an
// error matching ledger.ErrInvalid for a bad claim, ledger.ErrDuplicateMessage
// or a *ledger.DuplicateMismatchError for a claim already made within the
// retention, or a *StoreError.
func (l *Ledger) ClaimMessage(ctx context.Context, c ledger.Claim) error {
	if err := ledger.CheckClaim(c); err != nil {
		return err
	}
	return l.claimIn(ctx, l.db.pool, c)
}

// ClaimMessageTx claims a message inside the caller's transaction tx (on
// the DB's pool), so that the claim commits or rolls back with the effect
// it guards. It returns what ClaimMessage returns; after a database
// error the caller must roll tx back.
func (l *Ledger) ClaimMessageTx(ctx context.Context, tx pgx.Tx, c ledger.Claim) error {
	if err := ledger.CheckClaim(c); err != nil {
		return err
	}
	return l.claimIn(ctx, tx, c)
}

func (l *Ledger) claimIn(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, c ledger.Claim) error {
	if err := textOnly("message scope", c.Scope, "message ID", c.ID, "message fingerprint", c.Fingerprint); err != nil {
		return err
	}
	now := l.opts.Now()
	cut := nanos(now.Add(-l.opts.Retention))
	// The insert and its row count in one statement.
	var n int64
	err := q.QueryRow(ctx, `WITH i AS (`+l.db.q.ledger.claim+` RETURNING 1) SELECT count(*) FROM i`, c.Scope, c.ID, c.Fingerprint, nanos(now), cut).Scan(&n)
	if err != nil {
		return l.wrap("claim message", "", err)
	}
	if n == 1 {
		return nil
	}
	// Refused: a live claim of the message (in its scope, or one without
	// a scope from before scopes), or a claim that does not verify.
	rows, err := q.Query(ctx, l.db.q.ledger.claimRead, c.ID, c.Scope)
	if err != nil {
		return l.wrap("claim message", "", err)
	}
	defer rows.Close()
	var live *messageRow
	for rows.Next() {
		var m messageRow
		if err := rows.Scan(&m.scope, &m.id, &m.fingerprint, &m.at, &m.crc); err != nil {
			return l.wrap("claim message", "", err)
		}
		if err := m.verify(); err != nil {
			return err
		}
		if live == nil && m.at > cut {
			live = &m
		}
	}
	if err := rows.Err(); err != nil {
		return l.wrap("claim message", "", err)
	}
	if live == nil {
		return l.wrap("claim message", "", fmt.Errorf("the claim of message %q was refused but none is live (a concurrent prune?); claim it again", c.ID))
	}
	return ledger.DuplicateError(c, live.fingerprint, time.Unix(0, live.at))
}

// messageRow is a messages row as read.
type messageRow struct {
	scope, id, fingerprint string
	at                     int64
	crc                    []byte
}

var errClaimCopied = errors.New("its checksum does not match its scope, ID and contents (damaged, edited by hand, or copied from another message)")

// verify returns a *ledger.CorruptError when the claim does not verify
// or is not one the ledger writes (an ID; a scope and a fingerprint, or
// neither).
func (m *messageRow) verify() error {
	var err error
	switch {
	case !bytes.Equal(m.crc, crcOf(str(m.scope), str(m.id), str(m.fingerprint), num(m.at))):
		err = errClaimCopied
	case m.id == "":
		err = errors.New("no message ID")
	case (m.scope == "") != (m.fingerprint == ""):
		err = errors.New("a scope without a fingerprint, or a fingerprint without a scope")
	}
	if err != nil {
		return &ledger.CorruptError{Key: m.id, Scope: m.scope, What: "message claim", Err: err}
	}
	return nil
}
