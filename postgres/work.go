package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var (
	_ checkpoint.DueWork      = (*Saver)(nil)
	_ checkpoint.InputQueue   = (*Saver)(nil)
	_ checkpoint.InputBatcher = (*Saver)(nil)
)

// claimDueSQL claims the due threads at $1 (now), those due the longest
// first, one per owner of $2 (the claims' owners), until $3 with runner
// $4, in one statement: the candidates are locked FOR UPDATE SKIP LOCKED,
// so that a row another worker is claiming at the same moment is skipped,
// never waited for (and READ COMMITTED re-checks a row updated since the
// statement's snapshot, so a thread claimed and committed meanwhile is not
// due any more). A thread is due when its lease expired unreleased
// (expired), it is marked due and free (marked), or its queued input is
// parked behind a head that has moved (parked; "" stands for no
// checkpoint). The claim takes the lease (the epoch grows), records the
// owner as the claimer and marks the thread due now unless it is marked.
const claimDueSQL = `WITH
due AS (
	SELECT t.thread_id,
		CASE WHEN t.lease_owner IS NOT NULL THEN 'expired' WHEN t.due_at <= $1::bigint THEN 'marked' ELSE 'parked' END AS reason,
		CASE WHEN t.lease_owner IS NOT NULL THEN t.lease_until WHEN t.due_at <= $1::bigint THEN t.due_at ELSE 0 END AS at
	FROM $S.threads t
	WHERE t.checkpoint_ns = '' AND (
		(t.lease_owner IS NOT NULL AND t.lease_until <= $1::bigint)
		OR (t.due_at IS NOT NULL AND t.due_at <= $1::bigint AND t.lease_owner IS NULL)
		OR (t.due_parked IS NOT NULL AND t.lease_owner IS NULL AND (t.due_at IS NULL OR t.due_at > $1::bigint)
			AND t.due_parked <> coalesce(t.head, '')))
	ORDER BY at, t.thread_id
	LIMIT cardinality($2::text[])
	FOR UPDATE OF t SKIP LOCKED
),
pick AS (SELECT d.thread_id, d.reason, row_number() OVER (ORDER BY d.at, d.thread_id) AS n FROM due d),
claim AS (
	UPDATE $S.threads t SET lease_owner = ($2::text[])[p.n], lease_until = $3::bigint, lease_runner = nullif($4::text, ''),
		lease_epoch = t.lease_epoch + (CASE WHEN t.lease_owner IS DISTINCT FROM ($2::text[])[p.n] THEN 1 ELSE 0 END),
		due_owner = ($2::text[])[p.n], due_at = coalesce(t.due_at, $1::bigint)
	FROM pick p
	WHERE t.thread_id = p.thread_id AND t.checkpoint_ns = ''
	RETURNING t.thread_id, p.reason, p.n, t.lease_owner, t.lease_epoch, t.due_attempts, t.head
)
SELECT c.thread_id, c.reason, c.lease_owner, c.lease_epoch, c.due_attempts, c.head,
	(SELECT count(*) FROM $S.queued_inputs q WHERE q.thread_id = c.thread_id)
FROM claim c ORDER BY c.n`

// nextDueSQL is the earliest time after $1 at which a live lease ends or a
// due mark falls due (NULL: none), each walking its partial index.
const nextDueSQL = `SELECT least(
	(SELECT min(lease_until) FROM $S.threads WHERE lease_owner IS NOT NULL AND lease_until > $1::bigint AND checkpoint_ns = ''),
	(SELECT min(due_at) FROM $S.threads WHERE due_at IS NOT NULL AND due_at > $1::bigint AND checkpoint_ns = ''))`

// holdNewSQL creates the root row of a thread that has none, held by
// owner $2 (runner $3) until $4, claimed and marked due at $5. It does
// nothing for a thread that has a row.
const holdNewSQL = `INSERT INTO $S.threads (thread_id, checkpoint_ns, head, lease_owner, lease_runner, lease_epoch, lease_until, updated_at, due_owner, due_at)
VALUES ($1::text, '', NULL, $2::text, nullif($3::text, ''), 1, $4::bigint, $5::bigint, $2::text, $5::bigint)
ON CONFLICT (thread_id, checkpoint_ns) DO NOTHING`

// dueRowSQL locks and reads the due part of a thread's root row, with
// how many inputs are queued for it other than input $2 (0: none).
const dueRowSQL = `SELECT t.head, t.lease_owner, t.lease_runner, t.lease_epoch, t.lease_until, t.due_at, t.due_owner, t.due_parked, t.due_attempts,
	(SELECT count(*) FROM $S.queued_inputs q WHERE q.thread_id = t.thread_id AND q.input_id <> $2::bigint)
FROM $S.threads t WHERE t.thread_id = $1::text AND t.checkpoint_ns = '' FOR UPDATE`

// holdSQL claims thread $1 for owner $2 (runner $3) until $4, as ClaimDue
// does, marking it due at $5 unless it is marked.
const holdSQL = `UPDATE $S.threads t SET lease_owner = $2::text, lease_until = $4::bigint, lease_runner = nullif($3::text, ''),
	lease_epoch = t.lease_epoch + (CASE WHEN t.lease_owner IS DISTINCT FROM $2::text THEN 1 ELSE 0 END),
	due_owner = $2::text, due_at = coalesce(t.due_at, $5::bigint)
WHERE t.thread_id = $1::text AND t.checkpoint_ns = ''
RETURNING t.lease_epoch`

// settleOneSQL is Settle in one statement: it locks thread $1's root row
// and, only while $2 is its claimer, drops queued input $3 (0: none) and
// records what is due next ($4: checkpoint.DueNext; $5 now, $6 the time
// of a retry, $7 the head queued input is parked behind, $8 the
// attempts), releasing the claim's lease. It returns whether the row
// exists and whether it was settled (0 with the row: the claim passed to
// another worker).
const settleOneSQL = `WITH
cur AS (
	SELECT t.due_owner, t.due_at, t.due_parked, t.due_attempts,
		EXISTS (SELECT 1 FROM $S.queued_inputs q WHERE q.thread_id = t.thread_id AND q.input_id <> $3::bigint) AS queued
	FROM $S.threads t WHERE t.thread_id = $1::text AND t.checkpoint_ns = '' FOR UPDATE
),
ok AS (SELECT * FROM cur WHERE cur.due_owner = $2::text),
dropped AS (
	DELETE FROM $S.queued_inputs q WHERE $3::bigint <> 0 AND q.input_id = $3::bigint AND q.thread_id = $1::text AND EXISTS (SELECT 1 FROM ok)
),
settled AS (
	UPDATE $S.threads t SET
		due_at = CASE $4::integer WHEN 0 THEN ok.due_at WHEN 1 THEN (CASE WHEN ok.queued THEN $5::bigint END) WHEN 2 THEN $6::bigint END,
		due_parked = CASE $4::integer WHEN 0 THEN ok.due_parked WHEN 3 THEN (CASE WHEN ok.queued THEN $7::text END) END,
		due_attempts = CASE $4::integer WHEN 0 THEN ok.due_attempts ELSE $8::integer END,
		due_owner = NULL,
		lease_owner = CASE WHEN t.lease_owner = $2::text THEN NULL ELSE t.lease_owner END,
		lease_runner = CASE WHEN t.lease_owner = $2::text THEN NULL ELSE t.lease_runner END,
		lease_until = CASE WHEN t.lease_owner = $2::text THEN NULL ELSE t.lease_until END
	FROM ok WHERE t.thread_id = $1::text AND t.checkpoint_ns = ''
	RETURNING 1
)
SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM settled)`

// dropInputSQL deletes queued input $2 of thread $1.
const dropInputSQL = `DELETE FROM $S.queued_inputs WHERE input_id = $2::bigint AND thread_id = $1::text`

// dropEmptySQL deletes the root row of thread $1 when it holds nothing:
// no checkpoint, no lease, no due mark and no queued input (a row a Claim,
// a Hold or an Enqueue created).
const dropEmptySQL = `DELETE FROM $S.threads t WHERE t.thread_id = $1::text AND t.checkpoint_ns = '' AND t.head IS NULL
	AND t.lease_owner IS NULL AND t.due_at IS NULL
	AND NOT EXISTS (SELECT 1 FROM $S.threads s WHERE s.thread_id = $1::text AND s.checkpoint_ns <> '')
	AND NOT EXISTS (SELECT 1 FROM $S.queued_inputs q WHERE q.thread_id = $1::text)`

// markQueuedSQL marks thread $1 due at $2 for its new input, unless it is
// marked already or parked, creating its root row when it has none. It
// locks the row, so that a thread's inputs are numbered in the order
// their transactions commit.
const markQueuedSQL = `INSERT INTO $S.threads AS t (thread_id, checkpoint_ns, updated_at, due_at) VALUES ($1::text, '', $2::bigint, $2::bigint)
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET due_at = CASE WHEN t.due_parked IS NULL THEN coalesce(t.due_at, excluded.due_at) ELSE t.due_at END`

// enqueueSQL queues input $3 (exact JSON text) under key $2 for thread
// $1 at $4, unless the key is queued already.
const enqueueSQL = `INSERT INTO $S.queued_inputs (thread_id, run_key, input_text, created_at, crc)
VALUES ($1::text, $2::text, $3::text, $4::text, $S.crc($1::text, $2::text, $3::text, $4::text))
ON CONFLICT (thread_id, run_key) DO NOTHING
RETURNING input_id`

// queuedByKeySQL reads the input queued under key $2 for thread $1.
const queuedByKeySQL = `SELECT input_id, run_key, input_text, created_at, crc FROM $S.queued_inputs WHERE thread_id = $1::text AND run_key = $2::text`

// queuedSQL reads up to $2 (NULL: all) inputs queued for thread $1, oldest
// first.
const queuedSQL = `SELECT input_id, run_key, input_text, created_at, crc FROM $S.queued_inputs WHERE thread_id = $1::text ORDER BY input_id LIMIT $2::bigint`

// workQueries are the work statements with the schema name in place.
type workQueries struct {
	claimDue, nextDue, holdNew, dueRow, hold, settleOne, dropInput, dropEmpty, markQueued, enqueue, queuedByKey, queued string
}

func newWorkQueries(s func(string) string) workQueries {
	return workQueries{
		claimDue: s(claimDueSQL), nextDue: s(nextDueSQL), holdNew: s(holdNewSQL), dueRow: s(dueRowSQL), hold: s(holdSQL),
		settleOne: s(settleOneSQL), dropInput: s(dropInputSQL), dropEmpty: s(dropEmptySQL), markQueued: s(markQueuedSQL),
		enqueue: s(enqueueSQL), queuedByKey: s(queuedByKeySQL), queued: s(queuedSQL),
	}
}

// hook calls Config.Hook, if set, at point.
func (s *Saver) hook(point string) {
	if h := s.db.cfg.Hook; h != nil {
		h(point)
	}
}

// ClaimDue implements checkpoint.DueWork: one round trip, one implicit
// transaction of two statements: the claim (candidates locked FOR UPDATE
// SKIP LOCKED, so that workers claiming at once on one database skip each
// other's rows instead of waiting for them; see claimDueSQL) and the time
// the next thread falls due. It returns an error wrapping
// checkpoint.ErrInvalid for a query checkpoint.ValidateDueQuery refuses,
// checkpoint.ErrClosed after Close, ctx's error, and a *StoreError
// (ErrUnavailable; ErrCommitIndeterminate when the connection broke after
// the claim was sent: its leases then lapse and the threads are due
// again) when PostgreSQL fails. Nothing is claimed on any error but an
// indeterminate commit.
func (s *Saver) ClaimDue(ctx context.Context, q checkpoint.DueQuery) (checkpoint.DueBatch, error) {
	if err := checkpoint.ValidateDueQuery(q); err != nil {
		return checkpoint.DueBatch{}, err
	}
	if err := ctx.Err(); err != nil {
		return checkpoint.DueBatch{}, err
	}
	if err := s.live(); err != nil {
		return checkpoint.DueBatch{}, err
	}
	now := s.db.now()
	nowNS := now.UnixNano()
	owners := q.Owners
	if owners == nil {
		owners = []string{}
	}
	b := &pgx.Batch{}
	b.Queue(s.db.q.work.claimDue, nowNS, owners, now.Add(q.TTL).UnixNano(), q.Runner)
	b.Queue(s.db.q.work.nextDue, nowNS)
	s.hook("postgres.claim.beforeSend")
	var out checkpoint.DueBatch
	err := func() error {
		br := s.db.pool.SendBatch(ctx, b)
		defer br.Close()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var d checkpoint.DueThread
			var reason string
			var epoch, queued int64
			var head *string
			if err := rows.Scan(&d.Thread, &reason, &d.Owner, &epoch, &d.Attempts, &head, &queued); err != nil {
				rows.Close()
				return err
			}
			d.Reason, d.Epoch, d.Queued = checkpoint.DueReason(reason), uint64(epoch), int(queued)
			if head != nil {
				d.Head = *head
			}
			out.Threads = append(out.Threads, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var next *int64
		if err := br.QueryRow().Scan(&next); err != nil {
			return err
		}
		if next != nil {
			out.Next = time.Duration(*next - nowNS)
		}
		return br.Close()
	}()
	if err != nil {
		return checkpoint.DueBatch{}, s.writeErr("claim due threads", "", err, nil)
	}
	s.hook("postgres.claim.afterCommit")
	// The claims' own leases end too (the statement's snapshot saw them
	// free).
	if len(out.Threads) > 0 && (out.Next == 0 || q.TTL < out.Next) {
		out.Next = q.TTL
	}
	return out, nil
}

// dueRow is the due part of a thread's root row.
type dueRow struct {
	lease    threadState
	dueAt    *int64
	owner    string
	parked   *string
	attempts int
	others   int64 // inputs queued other than the one named
}

// readDueRow locks and reads thread's root row in tx, counting the
// inputs queued other than input except; ok is false when the thread has
// no root row.
func (s *Saver) readDueRow(ctx context.Context, tx pgx.Tx, thread string, except int64) (dueRow, bool, error) {
	var r dueRow
	var head, owner, runner, dueOwner *string
	var until *int64
	err := tx.QueryRow(ctx, s.db.q.work.dueRow, thread, except).Scan(&head, &owner, &runner, &r.lease.epoch, &until, &r.dueAt, &dueOwner, &r.parked, &r.attempts, &r.others)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r.lease.exists, r.lease.root = true, true
	if head != nil {
		r.lease.head = *head
	}
	if owner != nil {
		r.lease.owner = *owner
	}
	if runner != nil {
		r.lease.runner = *runner
	}
	if until != nil {
		r.lease.until = *until
	}
	if dueOwner != nil {
		r.owner = *dueOwner
	}
	return r, true, nil
}

// errRefused carries a rule's refusal out of a transaction, which it
// rolls back.
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }

// inTx runs fn in a transaction and commits it; an errRefused from fn
// rolls back and is returned as its error, any other error as a
// *StoreError (see writeErr).
func (s *Saver) inTx(ctx context.Context, op, thread string, fn func(tx pgx.Tx) error) error {
	err := func() error {
		tx, err := s.db.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}()
	var r errRefused
	switch {
	case err == nil:
		return nil
	case errors.As(err, &r):
		return r.err
	}
	return s.writeErr(op, thread, err, nil)
}

// Hold implements checkpoint.DueWork: in one transaction it creates the
// thread's root row when it has none, locks it, checks the lease rule,
// reads what was due and claims the thread. It returns a
// *checkpoint.BusyError (claiming nothing) when another owner holds a
// live lease, an error wrapping checkpoint.ErrInvalid for an empty thread
// or owner or a TTL that is not positive, checkpoint.ErrClosed, ctx's
// error, and a *StoreError when PostgreSQL fails.
func (s *Saver) Hold(ctx context.Context, thread string, l checkpoint.Lease) (checkpoint.DueThread, error) {
	switch {
	case thread == "":
		return checkpoint.DueThread{}, fmt.Errorf("%w: hold: empty thread ID", checkpoint.ErrInvalid)
	case l.Owner == "":
		return checkpoint.DueThread{}, fmt.Errorf("%w: hold thread %q: empty lease owner", checkpoint.ErrInvalid, thread)
	case l.TTL <= 0:
		return checkpoint.DueThread{}, fmt.Errorf("%w: hold thread %q: lease TTL %v is not positive", checkpoint.ErrInvalid, thread, l.TTL)
	}
	if err := ctx.Err(); err != nil {
		return checkpoint.DueThread{}, err
	}
	if err := s.live(); err != nil {
		return checkpoint.DueThread{}, err
	}
	l.Held = false
	var out checkpoint.DueThread
	err := s.inTx(ctx, "hold", thread, func(tx pgx.Tx) error {
		now := s.db.now()
		nowNS, until := now.UnixNano(), now.Add(l.TTL).UnixNano()
		tag, err := tx.Exec(ctx, s.db.q.work.holdNew, thread, l.Owner, l.Runner, until, nowNS)
		if err != nil {
			return err
		}
		r, ok, err := s.readDueRow(ctx, tx, thread, 0)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("the thread's row vanished under its lock")
		}
		out = checkpoint.DueThread{Thread: thread, Owner: l.Owner, Head: r.lease.head, Attempts: r.attempts, Queued: int(r.others)}
		if tag.RowsAffected() == 1 {
			out.Epoch = uint64(r.lease.epoch)
			return nil
		}
		if be := r.lease.busy(thread, "", l, now); be != nil {
			return errRefused{be}
		}
		switch {
		case r.lease.owner != "" && r.lease.owner != l.Owner:
			out.Reason = checkpoint.DueExpired // expired, or one of the runner's own taken back
		case r.dueAt != nil && *r.dueAt <= nowNS:
			out.Reason = checkpoint.DueMarked
		case r.parked != nil && *r.parked != r.lease.head:
			out.Reason = checkpoint.DueParked
		}
		var epoch int64
		if err := tx.QueryRow(ctx, s.db.q.work.hold, thread, l.Owner, l.Runner, until, nowNS).Scan(&epoch); err != nil {
			return err
		}
		out.Epoch = uint64(epoch)
		return nil
	})
	if err != nil {
		return checkpoint.DueThread{}, err
	}
	return out, nil
}

// Settle implements checkpoint.DueWork: one round trip, one implicit
// transaction of two statements: the settlement (settleOneSQL: the
// thread's root row locked, st.Owner checked to be its claimer, the
// applied input dropped, what is due next recorded and the claim's lease
// released) and the row's removal when it holds nothing any more. It
// returns an error matching checkpoint.ErrClaimLost (writing nothing)
// when another claim replaced st.Owner's, nil when the thread has no row
// (deleted), an error wrapping checkpoint.ErrInvalid for a settlement
// checkpoint.ValidateSettlement refuses, checkpoint.ErrClosed, ctx's
// error, and a *StoreError when PostgreSQL fails.
func (s *Saver) Settle(ctx context.Context, st checkpoint.Settlement) error {
	if err := checkpoint.ValidateSettlement(st); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	s.hook("postgres.settle.begin")
	now := s.db.now()
	b := &pgx.Batch{}
	b.Queue(s.db.q.work.settleOne, st.Thread, st.Owner, st.Drop, int(st.Next), now.UnixNano(), now.Add(st.After).UnixNano(), st.Park, st.Attempts)
	b.Queue(s.db.q.work.dropEmpty, st.Thread)
	s.hook("postgres.settle.beforeCommit")
	var found, settled int64
	err := func() error {
		br := s.db.pool.SendBatch(ctx, b)
		defer br.Close()
		if err := br.QueryRow().Scan(&found, &settled); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return s.writeErr("settle", st.Thread, err, nil)
	}
	if found > 0 && settled == 0 {
		return fmt.Errorf("%w: thread %q: claim %q is not the thread's claimer any more", checkpoint.ErrClaimLost, st.Thread, st.Owner)
	}
	s.hook("postgres.settle.afterCommit")
	return nil
}

// Enqueue implements checkpoint.InputQueue: one round trip, one implicit
// transaction of three statements: the thread's row marked due (and
// locked, so that its inputs are numbered in commit order), the input
// inserted (its text exactly as given, checksummed with its thread, key
// and time) unless its key is queued already, and the input under the key
// read back. It returns an error wrapping checkpoint.ErrInvalid for an
// input checkpoint.ValidateQueuedInput refuses (and ErrUnsupported as
// well for one JSONB cannot hold: a string holding U+0000), a
// *checkpoint.CorruptError when the input queued under the key does not
// read back, checkpoint.ErrClosed, ctx's error, and a *StoreError when
// PostgreSQL fails. Nothing is written on any error but an indeterminate
// commit.
func (s *Saver) Enqueue(ctx context.Context, in checkpoint.QueuedInput) (checkpoint.QueuedInput, bool, error) {
	if err := checkpoint.ValidateQueuedInput(in); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	if err := s.live(); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	now := s.db.now()
	created := formatTime(now)
	b := &pgx.Batch{}
	b.Queue(s.db.q.work.markQueued, in.Thread, now.UnixNano())
	b.Queue(s.db.q.work.enqueue, in.Thread, in.Key, string(in.Input), created)
	b.Queue(s.db.q.work.queuedByKey, in.Thread, in.Key)
	var (
		added bool
		row   queuedRow
	)
	err := func() error {
		br := s.db.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		var id int64
		switch err := br.QueryRow().Scan(&id); {
		case err == nil:
			added = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if err := br.QueryRow().Scan(&row.id, &row.key, &row.input, &row.created, &row.crc); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return checkpoint.QueuedInput{}, false, s.writeErr("queue input", in.Thread, err, nil)
	}
	q, err := row.decode(in.Thread)
	if err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	return q, added, nil
}

// EnqueueAll implements checkpoint.InputBatcher: one round trip, one
// implicit transaction of Enqueue's three statements for every input.
// The inputs are sent grouped by thread (in the order of ins within a
// thread, so that a thread's inputs are numbered in that order; the
// threads in their first appearance's order, and their rows locked as
// they come, as concurrent Enqueues of the same threads lock them). It
// returns an error wrapping checkpoint.ErrInvalid for an input
// checkpoint.ValidateQueuedInput refuses (and ErrUnsupported as well for
// one JSONB cannot hold), a *checkpoint.CorruptError when an input queued
// under a key does not read back (read in the transaction's round trip:
// the batch's new inputs are queued then), checkpoint.ErrClosed, ctx's
// error, and a *StoreError when PostgreSQL fails. Nothing is written on
// any other error but an indeterminate commit.
func (s *Saver) EnqueueAll(ctx context.Context, ins []checkpoint.QueuedInput) ([]checkpoint.QueuedInput, []bool, error) {
	if err := checkpoint.ValidateQueuedInputs(ins); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if len(ins) == 0 {
		return nil, nil, nil
	}
	if err := s.live(); err != nil {
		return nil, nil, err
	}
	// Send a thread's inputs together, so that its row is locked once
	// and before its inserts.
	order := make([]int, 0, len(ins))
	byThread := map[string][]int{}
	var threads []string
	for i, in := range ins {
		if _, ok := byThread[in.Thread]; !ok {
			threads = append(threads, in.Thread)
		}
		byThread[in.Thread] = append(byThread[in.Thread], i)
	}
	for _, th := range threads {
		order = append(order, byThread[th]...)
	}
	now := s.db.now()
	created := formatTime(now)
	b := &pgx.Batch{}
	for _, i := range order {
		in := ins[i]
		b.Queue(s.db.q.work.markQueued, in.Thread, now.UnixNano())
		b.Queue(s.db.q.work.enqueue, in.Thread, in.Key, string(in.Input), created)
		b.Queue(s.db.q.work.queuedByKey, in.Thread, in.Key)
	}
	rows := make([]queuedRow, len(ins))
	added := make([]bool, len(ins))
	err := func() error {
		br := s.db.pool.SendBatch(ctx, b)
		defer br.Close()
		for _, i := range order {
			if _, err := br.Exec(); err != nil {
				return err
			}
			var id int64
			switch err := br.QueryRow().Scan(&id); {
			case err == nil:
				added[i] = true
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			r := &rows[i]
			if err := br.QueryRow().Scan(&r.id, &r.key, &r.input, &r.created, &r.crc); err != nil {
				return err
			}
		}
		return br.Close()
	}()
	if err != nil {
		return nil, nil, s.writeErr("queue input", ins[0].Thread, err, nil)
	}
	out := make([]checkpoint.QueuedInput, len(ins))
	for i := range ins {
		q, err := rows[i].decode(ins[i].Thread)
		if err != nil {
			return nil, nil, err
		}
		out[i] = q
	}
	return out, added, nil
}

// queuedRow is a queued_inputs row as read.
type queuedRow struct {
	id      int64
	key     string
	input   string
	created string
	crc     []byte
}

// decode checks the row's checksum and returns the input of thread it
// holds, or a *checkpoint.CorruptError.
func (r *queuedRow) decode(thread string) (checkpoint.QueuedInput, error) {
	corrupt := func(err error) error {
		return &checkpoint.CorruptError{Thread: thread, What: fmt.Sprintf("queued input %d", r.id), Err: err}
	}
	if !bytes.Equal(crcOf(str(thread), str(r.key), str(r.input), str(r.created)), r.crc) {
		return checkpoint.QueuedInput{}, corrupt(errors.New("checksum mismatch: the row was changed or copied from another thread"))
	}
	at, err := parseTime(r.created)
	if err != nil {
		return checkpoint.QueuedInput{}, corrupt(err)
	}
	return checkpoint.QueuedInput{ID: r.id, Thread: thread, Key: r.key, Input: json.RawMessage(r.input), CreatedAt: at.UTC()}, nil
}

// Queued implements checkpoint.InputQueue: one statement, the thread's
// inputs in input_id order. It returns an error wrapping
// checkpoint.ErrInvalid for an empty thread or a negative limit, a
// *checkpoint.CorruptError for a row whose checksum does not match,
// checkpoint.ErrClosed, ctx's error, and a *StoreError when PostgreSQL
// fails.
func (s *Saver) Queued(ctx context.Context, thread string, limit int) ([]checkpoint.QueuedInput, error) {
	if thread == "" {
		return nil, fmt.Errorf("%w: queued inputs: empty thread ID", checkpoint.ErrInvalid)
	}
	if limit < 0 {
		return nil, fmt.Errorf("%w: queued inputs of thread %q: negative limit %d", checkpoint.ErrInvalid, thread, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	var lim *int64
	if limit > 0 {
		n := int64(limit)
		lim = &n
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.work.queued, thread, lim)
	if err != nil {
		return nil, s.readErr("queued inputs", thread, err)
	}
	defer rows.Close()
	var out []checkpoint.QueuedInput
	for rows.Next() {
		var r queuedRow
		if err := rows.Scan(&r.id, &r.key, &r.input, &r.created, &r.crc); err != nil {
			return nil, s.readErr("queued inputs", thread, err)
		}
		q, err := r.decode(thread)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("queued inputs", thread, err)
	}
	return out, nil
}
