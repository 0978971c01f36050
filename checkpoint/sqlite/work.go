package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var (
	_ checkpoint.DueWork      = (*Saver)(nil)
	_ checkpoint.InputQueue   = (*Saver)(nil)
	_ checkpoint.InputBatcher = (*Saver)(nil)
)

// workSize is about the bytes a claim, hold, settle or enqueue writes
// (Config.GroupCommitBytes): these commit in a group with the Puts of
// the runs in flight, so that a pool of workers pays one fsync for a
// thread's claim or settlement and its neighbours' steps.
const workSize = 256

// hasWork fails with a *SchemaError (ErrSchemaTooOld) when the file is
// older than dueSchema (OpenExisting opened it as it is): it keeps no due
// work and no queued input, and nothing is written. what names the
// operation.
func (s *Saver) hasWork(what string) error {
	if s.version < dueSchema {
		return fmt.Errorf("%s: %w (the file has schema %d, which keeps no due work or queued input; open it with Open to migrate it)",
			what, &SchemaError{Path: s.cfg.path, File: s.version, Code: schemaVersion}, s.version)
	}
	return nil
}

// selectDue lists the due threads at ?1, those due the longest first, at
// most ?2: an expired lease (threads_leased), a due mark on a free thread
// (threads_due), or queued input parked behind a head that has moved
// (threads_parked; ” stands for no checkpoint). Each branch walks its
// partial index.
const selectDue = `SELECT thread_id, reason FROM (
	SELECT thread_id, 'expired' AS reason, lease_until AS at FROM threads
		WHERE lease_owner IS NOT NULL AND lease_until <= ?1 AND checkpoint_ns = ''
	UNION ALL
	SELECT thread_id, 'marked', due_at FROM threads
		WHERE due_at IS NOT NULL AND due_at <= ?1 AND lease_owner IS NULL AND checkpoint_ns = ''
	UNION ALL
	SELECT thread_id, 'parked', 0 FROM threads t
		WHERE due_parked IS NOT NULL AND lease_owner IS NULL AND (due_at IS NULL OR due_at > ?1) AND checkpoint_ns = ''
		AND due_parked IS NOT coalesce((SELECT max(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''), '')
) ORDER BY at, thread_id LIMIT ?2`

// selectNextDue is the earliest time after ?1 at which a live lease ends
// or a due mark falls due (NULL: none).
const selectNextDue = `SELECT min(at) FROM (
	SELECT min(lease_until) AS at FROM threads WHERE lease_owner IS NOT NULL AND lease_until > ?1 AND checkpoint_ns = ''
	UNION ALL
	SELECT min(due_at) FROM threads WHERE due_at > ?1 AND checkpoint_ns = '')`

// claimThread takes the lease of thread ?1 for owner ?2 until ?3 with
// runner ?4, growing the epoch, records ?2 as the claimer and marks the
// thread due at ?5 unless it is marked already.
const claimThread = `UPDATE threads SET lease_owner = ?2, lease_until = ?3, lease_runner = ?4,
	lease_epoch = CASE WHEN lease_owner IS ?2 THEN lease_epoch ELSE lease_epoch + 1 END,
	due_owner = ?2, due_at = coalesce(due_at, ?5)
WHERE thread_id = ?1 AND checkpoint_ns = ''`

// holdNew is the row of a thread Hold creates.
const holdNew = `INSERT INTO threads (thread_id, checkpoint_ns, lease_owner, lease_until, lease_runner, lease_epoch, due_owner, due_at)
VALUES (?1, '', ?2, ?3, ?4, 1, ?2, ?5)`

// selectClaimed describes a claimed thread: epoch, attempts, head, how
// many inputs are queued.
const selectClaimed = `SELECT t.lease_epoch, t.due_attempts, ` + headOf + `,
	(SELECT count(*) FROM queued_inputs q WHERE q.thread_id = ?1)
FROM threads t WHERE t.thread_id = ?1 AND t.checkpoint_ns = ?2`

// dueRow is the due part of a threads row.
type dueRow struct {
	exists   bool
	lease    threadRow
	dueAt    sql.NullInt64
	owner    string
	parked   sql.NullString
	attempts int
}

const selectDueRow = `SELECT lease_owner, lease_until, lease_runner, lease_epoch, due_at, due_owner, due_parked, due_attempts FROM threads
WHERE thread_id = ? AND checkpoint_ns = ''`

func (t *wtx) dueRow(thread string) (dueRow, error) {
	var r dueRow
	var owner, runner, dueOwner sql.NullString
	var until sql.NullInt64
	err := t.queryRow(selectDueRow, thread).Scan(&owner, &until, &runner, &r.lease.epoch, &r.dueAt, &dueOwner, &r.parked, &r.attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.exists, r.owner = true, dueOwner.String
	r.lease.exists, r.lease.owner, r.lease.until, r.lease.runner = true, owner.String, until.Int64, runner.String
	return r, nil
}

// claimed reads what a claim of thread reports (its owner and reason set
// by the caller).
func (t *wtx) claimed(thread, owner string, why checkpoint.DueReason) (checkpoint.DueThread, error) {
	d := checkpoint.DueThread{Thread: thread, Owner: owner, Reason: why}
	var epoch int64
	var head sql.NullString
	if err := t.queryRow(selectClaimed, thread, "").Scan(&epoch, &d.Attempts, &head, &d.Queued); err != nil {
		return d, err
	}
	d.Epoch, d.Head = uint64(epoch), head.String
	return d, nil
}

// ClaimDue implements checkpoint.DueWork: one IMMEDIATE transaction finds
// the due threads (walking the partial indexes threads_leased, threads_due
// and threads_parked) and claims up to one per owner. SQLite's one writer
// at a time makes the claims of several processes exclusive. It returns
// an error wrapping checkpoint.ErrInvalid for a query
// checkpoint.ValidateDueQuery refuses, a *SchemaError (ErrSchemaTooOld)
// on a file older than schema 6 (see OpenExisting), and a *StoreError
// when SQLite fails (nothing claimed).
func (s *Saver) ClaimDue(ctx context.Context, q checkpoint.DueQuery) (checkpoint.DueBatch, error) {
	if err := checkpoint.ValidateDueQuery(q); err != nil {
		return checkpoint.DueBatch{}, err
	}
	if err := s.hasWork("claim due threads"); err != nil {
		return checkpoint.DueBatch{}, err
	}
	var out checkpoint.DueBatch
	err := s.writeGrouped(ctx, opInfo{op: "claim due"}, "sqlite.claim", workSize, func(t *wtx) error {
		out = checkpoint.DueBatch{}
		now := s.cfg.now()
		nowNS := now.UnixNano()
		if len(q.Owners) > 0 {
			st, err := t.stmt(selectDue)
			if err != nil {
				return err
			}
			rows, err := st.QueryContext(t.ctx, nowNS, len(q.Owners))
			if err != nil {
				return err
			}
			type due struct {
				thread string
				why    checkpoint.DueReason
			}
			var list []due
			for rows.Next() {
				var d due
				if err := rows.Scan(&d.thread, &d.why); err != nil {
					rows.Close()
					return err
				}
				list = append(list, d)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			until := now.Add(q.TTL).UnixNano()
			for i, d := range list {
				owner := q.Owners[i]
				if _, err := t.exec(claimThread, d.thread, owner, until, nullable(q.Runner), nowNS); err != nil {
					return err
				}
				c, err := t.claimed(d.thread, owner, d.why)
				if err != nil {
					return err
				}
				out.Threads = append(out.Threads, c)
			}
		}
		var next sql.NullInt64
		if err := t.queryRow(selectNextDue, nowNS).Scan(&next); err != nil {
			return err
		}
		if next.Valid {
			out.Next = time.Duration(next.Int64 - nowNS)
		}
		return nil
	})
	if err != nil {
		return checkpoint.DueBatch{}, err
	}
	return out, nil
}

// Hold implements checkpoint.DueWork: in one IMMEDIATE transaction it
// checks the lease rule, reads what was due and claims the thread,
// creating its row when it has none. It returns a *checkpoint.BusyError
// when another owner holds a live lease, an error wrapping
// checkpoint.ErrInvalid for an empty thread or owner or a TTL that is not
// positive, a *SchemaError (ErrSchemaTooOld) on a file older than schema
// 6, and a *StoreError when SQLite fails.
func (s *Saver) Hold(ctx context.Context, thread string, l checkpoint.Lease) (checkpoint.DueThread, error) {
	if err := validThread(thread); err != nil {
		return checkpoint.DueThread{}, err
	}
	if l.Owner == "" {
		return checkpoint.DueThread{}, fmt.Errorf("%w: hold thread %q: empty lease owner", checkpoint.ErrInvalid, thread)
	}
	if l.TTL <= 0 {
		return checkpoint.DueThread{}, fmt.Errorf("%w: hold thread %q: lease TTL %v is not positive", checkpoint.ErrInvalid, thread, l.TTL)
	}
	if err := s.hasWork(fmt.Sprintf("hold thread %q", thread)); err != nil {
		return checkpoint.DueThread{}, err
	}
	l.Held = false
	var out checkpoint.DueThread
	err := s.writeGrouped(ctx, opInfo{op: "hold", thread: thread}, "sqlite.hold", workSize, func(t *wtx) error {
		now := s.cfg.now()
		nowNS := now.UnixNano()
		r, err := t.dueRow(thread)
		if err != nil {
			return err
		}
		until := now.Add(l.TTL).UnixNano()
		if !r.exists {
			if _, err := t.exec(holdNew, thread, l.Owner, until, nullable(l.Runner), nowNS); err != nil {
				return err
			}
			out, err = t.claimed(thread, l.Owner, "")
			return err
		}
		if err := r.lease.busy(thread, "", l, now); err != nil {
			return errRollback{err}
		}
		var why checkpoint.DueReason
		switch {
		case r.lease.owner != "" && r.lease.owner != l.Owner:
			why = checkpoint.DueExpired // expired, or one of the runner's own taken back
		case r.dueAt.Valid && r.dueAt.Int64 <= nowNS:
			why = checkpoint.DueMarked
		case r.parked.Valid:
			head, err := t.head(thread, "")
			if err != nil {
				return err
			}
			if head != r.parked.String {
				why = checkpoint.DueParked
			}
		}
		if _, err := t.exec(claimThread, thread, l.Owner, until, nullable(l.Runner), nowNS); err != nil {
			return err
		}
		out, err = t.claimed(thread, l.Owner, why)
		return err
	})
	if err != nil {
		return checkpoint.DueThread{}, err
	}
	return out, nil
}

// settleThread writes what a Settle decided on thread ?1 for claim ?2:
// due mark ?3, parked head ?4, attempts ?5; the claim's lease goes.
const settleThread = `UPDATE threads SET due_at = ?3, due_parked = ?4, due_attempts = ?5, due_owner = NULL,
	lease_owner = CASE WHEN lease_owner = ?2 THEN NULL ELSE lease_owner END,
	lease_until = CASE WHEN lease_owner = ?2 THEN NULL ELSE lease_until END,
	lease_runner = CASE WHEN lease_owner = ?2 THEN NULL ELSE lease_runner END
WHERE thread_id = ?1 AND checkpoint_ns = ''`

// Settle implements checkpoint.DueWork: in one IMMEDIATE transaction it
// checks that st.Owner is still the thread's claimer, drops the applied
// input, records what is due next and releases the claim's lease. It
// returns an error matching checkpoint.ErrClaimLost (writing nothing) when
// another claim replaced st.Owner's, nil when the thread has no row, an
// error wrapping checkpoint.ErrInvalid for a settlement
// checkpoint.ValidateSettlement refuses, a *SchemaError (ErrSchemaTooOld)
// on a file older than schema 6, and a *StoreError when SQLite fails.
func (s *Saver) Settle(ctx context.Context, st checkpoint.Settlement) error {
	if err := checkpoint.ValidateSettlement(st); err != nil {
		return err
	}
	if err := s.hasWork(fmt.Sprintf("settle thread %q", st.Thread)); err != nil {
		return err
	}
	return s.writeGrouped(ctx, opInfo{op: "settle", thread: st.Thread}, "sqlite.settle", workSize, func(t *wtx) error {
		now := s.cfg.now()
		r, err := t.dueRow(st.Thread)
		if err != nil || !r.exists {
			return err
		}
		if r.owner != st.Owner {
			return errRollback{fmt.Errorf("%w: thread %q: claim %q is not the thread's claimer any more", checkpoint.ErrClaimLost, st.Thread, st.Owner)}
		}
		if st.Drop != 0 {
			if _, err := t.exec(`DELETE FROM queued_inputs WHERE input_id = ? AND thread_id = ?`, st.Drop, st.Thread); err != nil {
				return err
			}
		}
		var queued bool
		if err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM queued_inputs WHERE thread_id = ?)`, st.Thread).Scan(&queued); err != nil {
			return err
		}
		dueAt, parked := any(nil), any(nil)
		attempts := st.Attempts
		switch st.Next {
		case checkpoint.DueKeep:
			if r.dueAt.Valid {
				dueAt = r.dueAt.Int64
			}
			if r.parked.Valid {
				parked = r.parked.String
			}
			attempts = r.attempts
		case checkpoint.DueNone:
			if queued {
				dueAt = now.UnixNano()
			}
		case checkpoint.DueLater:
			dueAt = now.Add(st.After).UnixNano()
		case checkpoint.DuePark:
			if queued {
				parked = st.Park
			}
		}
		if _, err := t.exec(settleThread, st.Thread, st.Owner, dueAt, parked, attempts); err != nil {
			return err
		}
		_, err = t.exec(dropEmptyThread, st.Thread)
		return err
	})
}

// inputCRC is the checksum of a queued input, bound to its thread and key.
func inputCRC(thread, key string, input []byte, created string) int64 {
	return crcOf([]byte(thread), []byte(key), input, []byte(created))
}

// markQueued marks thread ?1 due at ?2 for its new input, unless it is
// marked already or parked, creating its row when it has none.
const markQueued = `INSERT INTO threads (thread_id, checkpoint_ns, due_at) VALUES (?1, '', ?2)
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET due_at = CASE WHEN due_parked IS NULL THEN coalesce(due_at, excluded.due_at) ELSE due_at END`

// Enqueue implements checkpoint.InputQueue: in one IMMEDIATE transaction
// it returns the input queued under the same key, or inserts the input
// (checksummed with its thread, key and time) and marks the thread due.
// It returns an error wrapping checkpoint.ErrInvalid for an input
// checkpoint.ValidateQueuedInput refuses, a *checkpoint.CorruptError when
// the input queued under the key does not read back, a *SchemaError
// (ErrSchemaTooOld) on a file older than schema 6, and a *StoreError when
// SQLite fails.
func (s *Saver) Enqueue(ctx context.Context, in checkpoint.QueuedInput) (checkpoint.QueuedInput, bool, error) {
	if err := checkpoint.ValidateQueuedInput(in); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	if err := s.hasWork(fmt.Sprintf("queue input %q for thread %q", in.Key, in.Thread)); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	var (
		out   checkpoint.QueuedInput
		added bool
	)
	err := s.writeGrouped(ctx, opInfo{op: "enqueue", thread: in.Thread}, "sqlite.enqueue", workSize+len(in.Input), func(t *wtx) (err error) {
		out, added, err = s.enqueueIn(t, in, s.cfg.now())
		return err
	})
	if err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	return out, added, nil
}

// EnqueueAll implements checkpoint.InputBatcher: every input in one
// write transaction (grouped with the other writes in flight, as
// Enqueue's), each as Enqueue queues it. It returns an error wrapping
// checkpoint.ErrInvalid for an input checkpoint.ValidateQueuedInput
// refuses, a *checkpoint.CorruptError when an input queued under a key
// does not read back, a *SchemaError (ErrSchemaTooOld) on a file older
// than schema 6, and a *StoreError when SQLite fails; nothing is queued
// then.
func (s *Saver) EnqueueAll(ctx context.Context, ins []checkpoint.QueuedInput) ([]checkpoint.QueuedInput, []bool, error) {
	if err := checkpoint.ValidateQueuedInputs(ins); err != nil {
		return nil, nil, err
	}
	if len(ins) == 0 {
		return nil, nil, ctx.Err()
	}
	if err := s.hasWork(fmt.Sprintf("queue %d inputs", len(ins))); err != nil {
		return nil, nil, err
	}
	size := workSize
	for _, in := range ins {
		size += workSize + len(in.Input)
	}
	out, added := make([]checkpoint.QueuedInput, len(ins)), make([]bool, len(ins))
	err := s.writeGrouped(ctx, opInfo{op: "enqueue", thread: ins[0].Thread}, "sqlite.enqueue", size, func(t *wtx) error {
		now := s.cfg.now()
		for i, in := range ins {
			q, ok, err := s.enqueueIn(t, in, now)
			if err != nil {
				return err
			}
			out[i], added[i] = q, ok
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, added, nil
}

// enqueueIn queues in at now in t (see Enqueue): the input already
// queued under its key, or the new one, and whether it was added.
func (s *Saver) enqueueIn(t *wtx, in checkpoint.QueuedInput, now time.Time) (checkpoint.QueuedInput, bool, error) {
	row := t.queryRow(`SELECT input_id, run_key, input, created_at, crc FROM queued_inputs WHERE thread_id = ? AND run_key = ?`, in.Thread, in.Key)
	q, err := scanInput(in.Thread, row)
	if err == nil {
		return q, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) {
			return checkpoint.QueuedInput{}, false, errRollback{err}
		}
		return checkpoint.QueuedInput{}, false, err
	}
	created := formatTime(now)
	st, err := t.stmt(`INSERT INTO queued_inputs (thread_id, run_key, input, created_at, crc) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	res, err := st.ExecContext(t.ctx, in.Thread, in.Key, string(in.Input), created, inputCRC(in.Thread, in.Key, in.Input, created))
	if err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	if _, err := t.exec(markQueued, in.Thread, now.UnixNano()); err != nil {
		return checkpoint.QueuedInput{}, false, err
	}
	return checkpoint.QueuedInput{ID: id, Thread: in.Thread, Key: in.Key, Input: append(json.RawMessage(nil), in.Input...), CreatedAt: now.UTC()}, true, nil
}

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// scanInput reads a queued_inputs row (input_id, run_key, input,
// created_at, crc) of thread and checks its checksum.
func scanInput(thread string, r rowScanner) (checkpoint.QueuedInput, error) {
	var (
		q       checkpoint.QueuedInput
		input   string
		created string
		crc     int64
	)
	if err := r.Scan(&q.ID, &q.Key, &input, &created, &crc); err != nil {
		return q, err
	}
	q.Thread = thread
	corrupt := func(err error) error {
		return &checkpoint.CorruptError{Thread: thread, What: fmt.Sprintf("queued input %d", q.ID), Err: err}
	}
	if inputCRC(thread, q.Key, []byte(input), created) != crc {
		return q, corrupt(errors.New("checksum mismatch"))
	}
	at, err := parseTime(created)
	if err != nil {
		return q, corrupt(err)
	}
	q.Input, q.CreatedAt = json.RawMessage(input), at.UTC()
	return q, nil
}

// Queued implements checkpoint.InputQueue: it reads the thread's queued
// inputs in input_id order in a read transaction (none on a file older
// than schema 6, which keeps no queue). It returns an error
// wrapping checkpoint.ErrInvalid for an empty thread or a negative limit,
// a *checkpoint.CorruptError for a row whose checksum does not match, and
// a *StoreError when SQLite fails.
func (s *Saver) Queued(ctx context.Context, thread string, limit int) ([]checkpoint.QueuedInput, error) {
	if err := validThread(thread); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("%w: queued inputs of thread %q: negative limit %d", checkpoint.ErrInvalid, thread, limit)
	}
	if limit == 0 {
		limit = -1
	}
	if s.version < dueSchema {
		return nil, s.live() // the file keeps no queued input
	}
	var out []checkpoint.QueuedInput
	err := s.read(ctx, opInfo{op: "queued", thread: thread}, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, `SELECT input_id, run_key, input, created_at, crc FROM queued_inputs WHERE thread_id = ? ORDER BY input_id LIMIT ?`, thread, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			q, err := scanInput(thread, rows)
			if err != nil {
				return err
			}
			out = append(out, q)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// selectLeasedBy lists the root threads whose lease names runner ?1 and
// is live at ?2, at most ?3 (-1: all), by thread ID.
const selectLeasedBy = `SELECT thread_id, lease_owner, lease_epoch, lease_until FROM threads
	WHERE lease_owner IS NOT NULL AND lease_runner = ?1 AND lease_until > ?2 AND checkpoint_ns = ''
	ORDER BY thread_id LIMIT ?3`

var _ checkpoint.RunnerLeases = (*Saver)(nil)

// LeasedBy implements checkpoint.RunnerLeases: one query over the threads
// table (it walks the leased threads' partial index; a pool runs it once
// when it starts). It returns an error wrapping checkpoint.ErrInvalid for
// an empty runner or a negative limit, and a *StoreError when SQLite
// fails.
func (s *Saver) LeasedBy(ctx context.Context, runner string, limit int) ([]checkpoint.LeaseInfo, error) {
	if err := checkpoint.ValidateLeasedBy(runner, limit); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = -1
	}
	var out []checkpoint.LeaseInfo
	err := s.read(ctx, opInfo{op: "leases of runner"}, func(c *sql.Conn) error {
		out = nil
		rows, err := c.QueryContext(ctx, selectLeasedBy, runner, s.cfg.now().UnixNano(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l := checkpoint.LeaseInfo{Runner: runner}
			var epoch, until int64
			if err := rows.Scan(&l.Thread, &l.Owner, &epoch, &until); err != nil {
				return err
			}
			l.Epoch, l.Until = uint64(epoch), time.Unix(0, until).UTC()
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
