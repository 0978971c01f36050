package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// joinTx is the transaction the Saver hands a checkpoint.Join: a pgx
// transaction on the DB's pool. Only the stores of this package use it
// (the DB's ApprovalStore and Ledger, whose Consumption and CompleteJoin
// check that it is their DB's); any other Join gets
// checkpoint.ErrNotJoinable from them, or must refuse it itself.
type joinTx struct {
	tx pgx.Tx
	db *DB
}

// ours returns the pgx transaction of tx when it is a transaction of db's
// saver, and an error matching checkpoint.ErrNotJoinable otherwise.
func ours(db *DB, tx any, what string) (pgx.Tx, error) {
	jt, ok := tx.(*joinTx)
	if !ok || jt.db != db {
		return nil, fmt.Errorf("postgres: %s: %w: the saver's transaction is not on this store's database (use the stores of one postgres.DB)", what, checkpoint.ErrNotJoinable)
	}
	return jt.tx, nil
}

var _ checkpoint.Joiner = (*Saver)(nil)

// anyJoins reports whether a request of reqs has Joins.
func anyJoins(reqs []checkpoint.PutRequest) bool {
	for i := range reqs {
		if len(reqs[i].Joins) > 0 {
			return true
		}
	}
	return false
}

// runJoins runs joins in tx; the first error is returned as it is, in
// *joinErr too, so that the caller returns it unwrapped.
func (s *Saver) runJoins(ctx context.Context, tx pgx.Tx, joins []checkpoint.Join, joinErr *error) error {
	for _, j := range joins {
		if err := j(ctx, &joinTx{tx: tx, db: s.db}); err != nil {
			*joinErr = err
			return err
		}
	}
	return nil
}

// Fenced implements checkpoint.Joiner: in one transaction it locks the
// thread's root row (FOR UPDATE, so that no claim or save of the thread
// commits in between) and runs j only while owner holds the thread's
// lease at the epoch it took it (live, or lapsed with nobody having taken
// it since). It returns an error wrapping checkpoint.ErrInvalid for an
// empty thread or owner, a *checkpoint.BusyError when the lease is
// another owner's, was released since, or was never taken, j's error as
// it is (nothing of j is written), checkpoint.ErrClosed after Close, and
// a *StoreError when the database fails.
func (s *Saver) Fenced(ctx context.Context, thread, owner string, j checkpoint.Join) error {
	if j == nil {
		return fmt.Errorf("%w: a fenced write needs work to run", checkpoint.ErrInvalid)
	}
	var joinErr error
	err := s.fenced(ctx, thread, owner, func(tx pgx.Tx) error {
		return s.runJoins(ctx, tx, []checkpoint.Join{j}, &joinErr)
	})
	if joinErr != nil {
		return joinErr
	}
	return err
}

// fenced runs fn in a transaction that holds the thread's root row
// locked, after checking that owner holds its lease (see Fenced). fn's
// error is returned as it is; a database error as a *StoreError.
func (s *Saver) fenced(ctx context.Context, thread, owner string, fn func(tx pgx.Tx) error) error {
	if thread == "" || owner == "" {
		return fmt.Errorf("%w: a fenced write needs a thread and an owner", checkpoint.ErrInvalid)
	}
	if err := s.live(); err != nil {
		return err
	}
	var fnErr error
	err := pgx.BeginFunc(ctx, s.db.pool, func(tx pgx.Tx) error {
		var lo, runner *string
		var epoch int64
		var until *int64
		err := tx.QueryRow(ctx, s.db.q.rootLease, thread).Scan(&lo, &runner, &epoch, &until)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if lo == nil || *lo != owner {
			be := &checkpoint.BusyError{Thread: thread, Epoch: uint64(epoch)}
			if lo != nil {
				be.Owner = *lo
				if runner != nil {
					be.Runner = *runner
				}
			}
			fnErr = be
			return be
		}
		s.hook(pointFencedBegin)
		if err := fn(tx); err != nil {
			fnErr = err
			return err
		}
		s.hook(pointFencedBeforeCommit)
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return s.writeErr("fenced write", thread, err, nil)
	}
	s.hook(pointFencedAfterCommit)
	return nil
}

var _ approval.Consumer = (*ApprovalStore)(nil)

// consumeSQL inserts the consumption of approval $1 at $2, if it has a
// decision and no consumption yet; consumedSQL reads it.
const (
	consumeSQL = `INSERT INTO $S.approval_consumptions (approval_id, consumed_at, crc)
		SELECT id, $2::text, $S.crc(id, $2::text) FROM $S.approval_decisions WHERE id = $1::text
		ON CONFLICT (approval_id) DO NOTHING`
	consumedSQL = `SELECT consumed_at, crc FROM $S.approval_consumptions WHERE approval_id = $1::text`
)

// Consumption implements approval.Consumer: in the saver's transaction
// it inserts the approval's approval_consumptions row, unless it has one.
// It fails with an error matching checkpoint.ErrNotJoinable when tx is
// not a transaction of this DB's saver, approval.ErrNotFound when the
// approval has no decision, and a *StoreError otherwise.
func (s *ApprovalStore) Consumption(id string) checkpoint.Join {
	return func(ctx context.Context, tx any) error {
		if err := s.live(id); err != nil {
			return err
		}
		t, err := ours(s.db, tx, "consume approval "+quoteShort(id))
		if err != nil {
			return err
		}
		tag, err := t.Exec(ctx, sqlFor(s.db.schema, consumeSQL), id, formatTime(s.db.now()))
		if err != nil {
			return s.fail("consume", id, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var one int
		err = t.QueryRow(ctx, sqlFor(s.db.schema, `SELECT 1 FROM $S.approval_decisions WHERE id = $1::text`), id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: approval %s has no decision to consume", approval.ErrNotFound, quoteShort(id))
		}
		if err != nil {
			return s.fail("consume", id, err)
		}
		return nil // consumed before: the first consumption stays
	}
}

// consumed reads when approval id was consumed (zero: never); a row that
// does not verify is an *approval.CorruptError.
func (s *ApprovalStore) consumed(ctx context.Context, trail *approval.Trail) error {
	var at string
	var crc []byte
	err := s.db.pool.QueryRow(ctx, sqlFor(s.db.schema, consumedSQL), trail.ID).Scan(&at, &crc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return s.fail("read the consumption of", trail.ID, err)
	}
	if string(crc) != string(crcOf(str(trail.ID), str(at))) {
		return &approval.CorruptError{ID: trail.ID, What: "consumption", Err: errCopied}
	}
	t, err := readTime(at)
	if err != nil {
		return &approval.CorruptError{ID: trail.ID, What: "consumption", Err: fmt.Errorf("consumed_at: %w", err)}
	}
	trail.Consumed = t
	return nil
}

var _ ledger.Joiner = (*Ledger)(nil)

// Fenced implements ledger.Joiner: it reports whether the ledger was
// given the DB's saver as its Fence (WithOptions).
func (l *Ledger) Fenced() bool { return l.opts.Fence != nil }

// write runs fn in a transaction: fenced by the lease of run on thread
// when the ledger is fenced and both are set, otherwise a transaction of
// its own.
func (l *Ledger) write(ctx context.Context, thread, run string, fn func(tx pgx.Tx) error) error {
	if l.opts.Fence == nil || thread == "" || run == "" {
		return pgx.BeginFunc(ctx, l.db.pool, fn)
	}
	return l.db.saver.fenced(ctx, thread, run, fn)
}

// heldWrite runs the statement query on the intent under key that owner
// holds: fenced by the lease of the run that recorded it (Entry.Thread
// and Run) when the ledger is fenced. It returns the rows it changed.
func (l *Ledger) heldWrite(ctx context.Context, key, owner, query string, args ...any) (int64, error) {
	if l.opts.Fence == nil {
		tag, err := l.db.pool.Exec(ctx, query, args...)
		return tag.RowsAffected(), err
	}
	e, err := scanEntry(l.db.pool.QueryRow(ctx, l.db.q.ledger.get, key))
	if errors.Is(err, pgx.ErrNoRows) || err == nil && (e.State != ledger.StatePending || e.Owner != owner) {
		return 0, nil // not held: the caller diagnoses
	}
	if err != nil {
		return 0, err
	}
	var n int64
	err = l.write(ctx, e.Thread, e.Run, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, query, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// CompleteJoin implements ledger.Joiner: the work of Complete(key, owner,
// o), to run in a transaction of the DB's saver (graph.JoinWrite), so
// that the outcome commits with the write that saves the call's result.
// It returns nil when the ledger is not fenced. The work fails as
// Complete does, except that an intent already completed (by a late
// result) is left as it is, and with an error matching
// checkpoint.ErrNotJoinable in a transaction of another database.
func (l *Ledger) CompleteJoin(key, owner string, o ledger.Outcome) func(ctx context.Context, tx any) error {
	if l.opts.Fence == nil {
		return nil
	}
	return func(ctx context.Context, tx any) error {
		t, err := ours(l.db, tx, "complete key "+key)
		if err != nil {
			return err
		}
		result, failure, err := outcomeArgs(o)
		if err != nil {
			return err
		}
		tag, err := t.Exec(ctx, l.db.q.ledger.complete, key, owner, result, failure, nanos(l.opts.Now()))
		if err != nil {
			return l.wrap("complete", key, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		e, err := scanEntry(t.QueryRow(ctx, l.db.q.ledger.get, key))
		if err == nil && e.State == ledger.StateDone {
			return nil // a late result was recorded first: it stays
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return l.wrap("complete", key, err)
		}
		return ledger.NotHeldError(key, "")
	}
}
