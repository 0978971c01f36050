package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/internal/rowsum"
)

// The rows of the SQL ledger, as stored, and how they are checked when
// read. Every row carries a checksum (package rowsum) over its key and
// every column it holds, in a fixed order: a row damaged, or copied under
// another key, does not verify. A row that verifies is then decoded as
// strictly as it was written (the failure as json.Marshal writes a
// Failure, the result as JSON json.Marshal can write) and checked with
// Entry.Verify. Anything else is a *CorruptError naming the key, and
// nothing is written on it.

// Checksum domains, one per table and version of the rule.
const (
	recordDomain = "lockstep/ledger/record/v1"
	claimDomain  = "lockstep/ledger/claim/v1"
)

// entryRow is a lockstep_ledger row as stored.
type entryRow struct {
	key, tool, argsHash, state string
	result, failure            sql.NullString
	owner                      string
	lease, created             int64
	completed                  sql.NullInt64
	thread, run                string
	crc                        int64
}

// entryColumns are the columns of an entryRow, in dest's order.
const entryColumns = `key, tool, args_hash, state, result, failure, owner, lease_until, created_at, completed_at, thread_id, run_id, crc`

func (r *entryRow) dest() []any {
	return []any{&r.key, &r.tool, &r.argsHash, &r.state, &r.result, &r.failure, &r.owner, &r.lease, &r.created, &r.completed, &r.thread, &r.run, &r.crc}
}

// sum is the checksum of the row, bound to its key.
func (r *entryRow) sum() int64 {
	return rowsum.New(recordDomain).String(r.key).String(r.tool).String(r.argsHash).String(r.state).
		NullString(r.result.String, r.result.Valid).NullString(r.failure.String, r.failure.Valid).String(r.owner).
		Int(r.lease).Int(r.created).NullInt(r.completed.Int64, r.completed.Valid).String(r.thread).String(r.run).Value()
}

// rowOf is the stored form of e, with its checksum.
func rowOf(e Entry) (entryRow, error) {
	r := entryRow{key: e.Key, tool: e.Tool, argsHash: e.ArgsHash, state: string(e.State), owner: e.Owner,
		lease: nanos(e.LeaseUntil), created: nanos(e.CreatedAt), thread: e.Thread, run: e.Run}
	if !e.CompletedAt.IsZero() {
		r.completed = sql.NullInt64{Int64: nanos(e.CompletedAt), Valid: true}
	}
	var err error
	if r.result, r.failure, err = outcomeColumns(e.Outcome); err != nil {
		return entryRow{}, err
	}
	r.crc = r.sum()
	return r, nil
}

// entry checks the row and decodes it: a *CorruptError naming the key when
// it does not verify, does not decode strictly, or fails Entry.Verify.
func (r *entryRow) entry() (Entry, error) {
	if r.crc != r.sum() {
		return Entry{}, &CorruptError{Key: r.key, What: "record", Err: errors.New("its checksum does not match its key and contents (damaged, or copied from another key)")}
	}
	e := Entry{Key: r.key, Tool: r.tool, ArgsHash: r.argsHash, State: State(r.state), Owner: r.owner,
		LeaseUntil: fromNanos(r.lease), CreatedAt: fromNanos(r.created), Thread: r.thread, Run: r.run}
	if r.completed.Valid {
		e.CompletedAt = fromNanos(r.completed.Int64)
	}
	if r.result.Valid {
		e.Outcome.Result = json.RawMessage(r.result.String)
	}
	if r.failure.Valid {
		f, err := DecodeFailure([]byte(r.failure.String))
		if err != nil {
			return Entry{}, &CorruptError{Key: r.key, What: "failure", Err: err}
		}
		e.Outcome.Failure = f
	}
	if err := e.Verify(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// claimRow is a lockstep_messages row as stored.
type claimRow struct {
	scope, id, fingerprint string
	at                     int64
	crc                    int64
}

// claimColumns are the columns of a claimRow, in dest's order.
const claimColumns = `scope, id, fingerprint, claimed_at, crc`

func (r *claimRow) dest() []any { return []any{&r.scope, &r.id, &r.fingerprint, &r.at, &r.crc} }

// sum is the checksum of the claim, bound to its scope and ID.
func (r *claimRow) sum() int64 {
	return rowsum.New(claimDomain).String(r.scope).String(r.id).String(r.fingerprint).Int(r.at).Value()
}

// verify checks the claim: its checksum, and that it is one the ledger
// writes (an ID; a scope and a fingerprint, or neither for a claim
// migrated from version 1). It returns a *CorruptError otherwise.
func (r *claimRow) verify() error {
	var err error
	switch {
	case r.crc != r.sum():
		err = errors.New("its checksum does not match its scope, ID and contents (damaged, or copied from another message)")
	case r.id == "":
		err = errors.New("no message ID")
	case (r.scope == "") != (r.fingerprint == ""):
		err = errors.New("a scope without a fingerprint, or a fingerprint without a scope")
	}
	if err != nil {
		return &CorruptError{Key: r.id, Scope: r.scope, What: "message claim", Err: err}
	}
	return nil
}

func (r *claimRow) time() time.Time { return fromNanos(r.at) }

// checksumRows gives every row of version 3 its checksum (the upgrade to
// version 4). Rows of version 3 carry none to check first: a row damaged
// before the upgrade is caught only by the strict decoding of every read.
func checksumRows(ctx context.Context, tx *sql.Tx) error {
	type fix struct {
		key, scope string
		crc        int64
	}
	var fixes []fix
	rows, err := tx.QueryContext(ctx, `SELECT `+entryColumns+` FROM lockstep_ledger`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r entryRow
		if err := rows.Scan(r.dest()...); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{key: r.key, crc: r.sum()})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, f := range fixes {
		if _, err := tx.ExecContext(ctx, `UPDATE lockstep_ledger SET crc = ? WHERE key = ?`, f.crc, f.key); err != nil {
			return err
		}
	}
	fixes = fixes[:0]
	rows, err = tx.QueryContext(ctx, `SELECT `+claimColumns+` FROM lockstep_messages`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r claimRow
		if err := rows.Scan(r.dest()...); err != nil {
			rows.Close()
			return err
		}
		fixes = append(fixes, fix{key: r.id, scope: r.scope, crc: r.sum()})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, f := range fixes {
		if _, err := tx.ExecContext(ctx, `UPDATE lockstep_messages SET crc = ? WHERE scope = ? AND id = ?`, f.crc, f.scope, f.key); err != nil {
			return err
		}
	}
	return nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readEntry reads and checks the record under key: an error matching
// ErrNotFound when there is none, a *CorruptError when it does not verify.
func readEntry(ctx context.Context, q queryer, key string) (Entry, error) {
	var r entryRow
	err := q.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM lockstep_ledger WHERE key = ?`, key).Scan(r.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, fmt.Errorf("%w (key %s)", ErrNotFound, short(key))
	}
	if err != nil {
		return Entry{}, err
	}
	return r.entry()
}
