package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Saver is the checkpoint saver on PostgreSQL: a checkpoint.Saver that
// also implements ChainPutter, ThreadLister, InterruptLister, Pruner,
// LeaseInspector, DueWork and InputQueue (so that package workers runs on
// it), with the rules of package checkpoint (it passes
// checkpointtest). Get it from DB.Saver. It is safe for concurrent use by
// any number of goroutines and processes.
type Saver struct {
	db    *DB
	group groupQueue
}

var (
	_ checkpoint.Saver           = (*Saver)(nil)
	_ checkpoint.ChainPutter     = (*Saver)(nil)
	_ checkpoint.ThreadLister    = (*Saver)(nil)
	_ checkpoint.InterruptLister = (*Saver)(nil)
	_ checkpoint.Pruner          = (*Saver)(nil)
	_ checkpoint.LeaseInspector  = (*Saver)(nil)
)

// live returns checkpoint.ErrClosed after DB.Close.
func (s *Saver) live() error {
	if s.db.closed.Load() {
		return checkpoint.ErrClosed
	}
	return nil
}

// nullable returns nil for "" (SQL NULL) and s otherwise.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// writeRow is one pending write as the JSON array parameter of the write
// statements carries it.
type writeRow struct {
	TaskID  string          `json:"task_id"`
	Idx     int             `json:"idx"`
	Channel string          `json:"channel"`
	Node    string          `json:"node"`
	Path    string          `json:"path"`
	Value   json.RawMessage `json:"value"`
}

// writesParam encodes tasks' writes as the statements' JSON parameter,
// one row per (task, index): of two regular writes with one index the
// first is kept, of two special ones the last, as the memory saver
// applies them in order.
func writesParam(tasks []checkpoint.TaskWrites) (string, error) {
	type key struct {
		task string
		idx  int
	}
	var rows []writeRow
	at := map[key]int{}
	for _, tw := range tasks {
		for pos, w := range tw.Writes {
			if err := storable(w.Value); err != nil {
				return "", fmt.Errorf("%w: task %q channel %q: %w", checkpoint.ErrInvalid, tw.TaskID, w.Channel, err)
			}
			k := key{tw.TaskID, checkpoint.WriteIndex(w.Channel, pos)}
			r := writeRow{TaskID: tw.TaskID, Idx: k.idx, Channel: w.Channel, Node: tw.Node, Path: tw.Path, Value: w.Value}
			if i, ok := at[k]; ok {
				if checkpoint.IsSpecial(w.Channel) {
					rows[i] = r
				}
				continue
			}
			at[k] = len(rows)
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(rows)
	return string(b), err
}

// blobRow is one blob as the Put statement's JSON parameter carries it.
type blobRow struct {
	Channel string          `json:"channel"`
	Kind    string          `json:"kind"`
	Base    string          `json:"base"`
	Value   json.RawMessage `json:"value"`
}

// putArgs are the Put statement's parameters for req at now.
func putArgs(req *checkpoint.PutRequest, now time.Time) ([]any, error) {
	cp := &req.Checkpoint
	meta, err := json.Marshal(cp.Metadata)
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint %q: metadata: %w", checkpoint.ErrInvalid, cp.ID, err)
	}
	versions, err := json.Marshal(cp.Versions)
	if err != nil {
		return nil, err
	}
	if cp.Versions == nil {
		versions = []byte("{}")
	}
	blobs := make([]blobRow, 0, len(cp.Channels))
	for ch, bs := range cp.Channels {
		b := bs[0]
		if err := storable(b.Data); err != nil {
			return nil, fmt.Errorf("%w: checkpoint %q channel %q: %w", checkpoint.ErrInvalid, cp.ID, ch, err)
		}
		kind := "value"
		if b.Append {
			kind = "append"
		}
		blobs = append(blobs, blobRow{Channel: ch, Kind: kind, Base: b.Base, Value: b.Data})
	}
	blobJSON, err := json.Marshal(blobs)
	if err != nil {
		return nil, err
	}
	parentWrites, err := writesParam(req.ParentWrites)
	if err != nil {
		return nil, err
	}
	ownWrites, err := writesParam(req.Writes)
	if err != nil {
		return nil, err
	}
	created := cp.CreatedAt
	if created.IsZero() {
		created = now
	}
	l := req.Lease
	return []any{req.Thread, req.NS, cp.ID, nullable(cp.ParentID), int64(cp.Metadata.Step), string(cp.Metadata.Source),
		formatTime(created), string(meta), string(versions), cp.Mark, string(blobJSON), parentWrites, ownWrites,
		l.Owner, l.Runner, now.Add(l.TTL).UnixNano(), now.UnixNano(), req.Release, takesBack(l), l.Held, req.Fork, exactText(meta), req.NS != ""}, nil
}

// takesBack is the owner whose live lease the request may take back, as
// the statements apply it ("" for none; see checkpoint.Lease.TakesBack:
// the statements also need that owner to hold the lease, of the request's
// runner).
func takesBack(l checkpoint.Lease) string {
	if l.Held || l.Runner == "" {
		return ""
	}
	return l.TakeBack
}

// timeLayout writes times in UTC with nine fraction digits, as the SQLite
// saver does: exact, and sortable as text.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) { return time.Parse(timeLayout, s) }

// Put implements checkpoint.Saver: a chain of one checkpoint (PutChain).
func (s *Saver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	return s.PutChain(ctx, []checkpoint.PutRequest{req})
}

// maxAttempts bounds how often a refused write is tried again when the
// diagnosis finds that the rules now let it through (the thread changed
// between the two).
const maxAttempts = 4

// PutChain implements checkpoint.ChainPutter. In the steady state each
// checkpoint is one statement (the thread's compare-and-swap, lease,
// checkpoint row, blobs and writes), and the chain one batch, sent in one
// round trip and committed as one implicit transaction: all of it or
// nothing. A request with interrupt writes runs in a transaction that
// locks the thread's row first, to check its interrupt IDs against those
// saved. It returns an error wrapping checkpoint.ErrInvalid for a request
// checkpoint.ValidateChain refuses or a value JSONB cannot hold, a
// *checkpoint.ConflictError or *checkpoint.BusyError as the Saver rules
// say, checkpoint.ErrClosed after Close, ctx's error, and a *StoreError
// (ErrUnavailable; ErrCommitIndeterminate when the connection broke after
// the batch was sent). Nothing is written on any error but an
// indeterminate commit.
func (s *Saver) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	if err := checkpoint.ValidateChain(reqs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	thread := reqs[0].Thread
	joins := anyJoins(reqs) // run in the transaction of putLocked
	interrupts := false
	for i := range reqs {
		if checkpoint.HasInterruptWrite(reqs[i].ParentWrites) || checkpoint.HasInterruptWrite(reqs[i].Writes) {
			interrupts = true
		}
	}
	for attempt := 0; ; attempt++ {
		now := s.db.now()
		b := &pgx.Batch{}
		for i := range reqs {
			args, err := putArgs(&reqs[i], now)
			if err != nil {
				return err
			}
			b.Queue(s.db.q.put, args...)
		}
		var counts []int64
		var err, joinErr error
		if interrupts || reqs[0].NS != "" || joins {
			counts, err = s.putLocked(ctx, reqs, b, now, joins, &joinErr)
		} else {
			s.hook(pointPutBeforeCommit)
			if counts, err = s.sendGrouped(ctx, thread, b); err == nil && counts[0] == 1 {
				s.hook(pointPutAfterCommit)
			}
		}
		if joinErr != nil {
			return joinErr
		}
		if err != nil {
			return s.writeErr("put", thread, err, reqs)
		}
		if counts[0] == 1 {
			return nil
		}
		derr := s.diagnosePut(ctx, &reqs[0], now)
		if derr != nil || attempt == maxAttempts-1 {
			if derr == nil {
				derr = &checkpoint.ConflictError{Thread: thread, NS: reqs[0].NS, Expected: reqs[0].Checkpoint.ParentID, Head: "(changing)"}
			}
			return derr
		}
	}
}

// sendCounts sends b (statements that each return one count) in one
// round trip, as one implicit transaction, and returns the counts.
func (s *Saver) sendCounts(ctx context.Context, b *pgx.Batch) ([]int64, error) {
	br := s.db.pool.SendBatch(ctx, b)
	counts := make([]int64, 0, b.Len())
	for range b.Len() {
		var n int64
		if err := br.QueryRow().Scan(&n); err != nil {
			br.Close()
			return nil, err
		}
		counts = append(counts, n)
	}
	return counts, br.Close()
}

// putLocked runs a chain with interrupt writes, or in a subgraph's
// namespace, in one transaction (rootTx): it checks the interrupt IDs of
// the writes against those saved on the checkpoints they go to, and sends
// the statements.
func (s *Saver) putLocked(ctx context.Context, reqs []checkpoint.PutRequest, b *pgx.Batch, now time.Time, joined bool, joinErr *error) ([]int64, error) {
	first, last := &reqs[0], &reqs[len(reqs)-1]
	counts := make([]int64, b.Len())
	_, err := s.rootTx(ctx, putPoints, joined, first.Thread, first.NS, first.Lease, now, last.Release, false, true, func(tx pgx.Tx) (int64, error) {
		for i := range reqs {
			req := &reqs[i]
			if req.Checkpoint.ParentID != "" && checkpoint.HasInterruptWrite(req.ParentWrites) {
				if err := s.checkInterrupts(ctx, tx, req.Thread, req.NS, req.Checkpoint.ParentID, req.ParentWrites); err != nil {
					return 0, err
				}
			}
			if checkpoint.HasInterruptWrite(req.Writes) {
				if err := checkpoint.CheckInterruptIDs(nil, req.Writes); err != nil {
					return 0, err
				}
			}
		}
		br := tx.SendBatch(ctx, b)
		for i := range b.Len() {
			if err := br.QueryRow().Scan(&counts[i]); err != nil {
				br.Close()
				return 0, err
			}
		}
		if err := br.Close(); err != nil || counts[0] != 1 {
			return counts[0], err
		}
		// The chain is written: the joins run in its transaction.
		for i := range reqs {
			if err := s.runJoins(ctx, tx, reqs[i].Joins, joinErr); err != nil {
				return 0, err
			}
		}
		return counts[0], nil
	})
	return counts, err
}

// rootTx runs a write that needs a transaction: one with interrupt
// writes (whose IDs it checks against those saved), or one in a
// subgraph's namespace, whose lease is the thread's one lease, on its root
// row. It locks the namespace's row and, for a subgraph, the root row,
// checks the lease rule for l there (a refusal returns 0: the caller
// diagnoses), runs send (the statements, with the lease skipped for a
// subgraph), and when they wrote, takes the lease on the root row (renew:
// Claim's rule; touch: the write is an update of the thread), and
// commits. It calls the hook at pts (and, when joined says that send runs
// joins, at the join points after the write's own).
func (s *Saver) rootTx(ctx context.Context, pts writePoints, joined bool, thread, ns string, l checkpoint.Lease, now time.Time, release, renew, touch bool, send func(tx pgx.Tx) (int64, error)) (int64, error) {
	tx, err := s.db.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	s.hook(pts.begin)
	if ns != "" {
		var owner, runner *string
		var epoch int64
		var until *int64
		err := tx.QueryRow(ctx, s.db.q.rootLease, thread).Scan(&owner, &runner, &epoch, &until)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if l.Held {
				return 0, nil
			}
		case err != nil:
			return 0, err
		default:
			st := threadState{exists: true, epoch: epoch}
			if owner != nil {
				st.owner = *owner
			}
			if runner != nil {
				st.runner = *runner
			}
			if until != nil {
				st.until = *until
			}
			if st.busy(thread, ns, l, now) != nil {
				return 0, nil
			}
		}
	}
	if _, err := tx.Exec(ctx, s.db.q.lockThread, thread, ns); err != nil {
		return 0, err
	}
	n, err := send(tx)
	if err != nil || n != 1 {
		return n, err // refused: the rollback drops nothing
	}
	if ns != "" {
		if _, err := tx.Exec(ctx, s.db.q.takeRoot, thread, l.Owner, l.Runner, now.Add(l.TTL).UnixNano(), now.UnixNano(), release, renew, touch); err != nil {
			return 0, err
		}
	}
	s.hook(pts.beforeCommit)
	if joined {
		s.hook(pointJoinBeforeCommit)
	}
	if err := tx.Commit(ctx); err != nil {
		return n, err
	}
	s.hook(pts.afterCommit)
	if joined {
		s.hook(pointJoinAfterCommit)
	}
	return n, nil
}

// checkInterrupts refuses interrupt writes of tasks that raise an ID
// another task saved on checkpoint id (checkpoint.CheckInterruptIDs).
func (s *Saver) checkInterrupts(ctx context.Context, tx pgx.Tx, thread, ns, id string, tasks []checkpoint.TaskWrites) error {
	rows, err := tx.Query(ctx, s.db.q.interruptIDs, thread, ns, id)
	if err != nil {
		return err
	}
	ids := map[string]string{}
	for rows.Next() {
		var task string
		var value []byte
		if err := rows.Scan(&task, &value); err != nil {
			rows.Close()
			return err
		}
		list, _ := checkpoint.DecodeInterrupts(value)
		for _, in := range list {
			ids[in.ID] = task
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := checkpoint.CheckInterruptIDs(ids, tasks); err != nil {
		return fmt.Errorf("thread %q checkpoint %q: %w", thread, id, err)
	}
	return nil
}

// writeErr maps a failed write to the saver's errors: ErrInvalid for
// what the rules or JSONB refuse, a conflict for a checkpoint ID taken,
// a *StoreError otherwise.
func (s *Saver) writeErr(op, thread string, err error, reqs []checkpoint.PutRequest) error {
	if errors.Is(err, checkpoint.ErrInvalid) {
		return err
	}
	switch sqlState(err) {
	case "23505": // a checkpoint ID that exists
		if len(reqs) > 0 {
			return &checkpoint.ConflictError{Thread: thread, NS: reqs[0].NS, Expected: reqs[0].Checkpoint.ParentID, Head: "(the checkpoint ID exists)"}
		}
	case "22P05", "22P02", "22003", "54000", "22021":
		// untranslatable character (\u0000), invalid JSON text, a
		// number out of numeric's range, too large, bad encoding
		return fmt.Errorf("%w: %w: thread %q: PostgreSQL refused a value: %v", checkpoint.ErrInvalid, ErrUnsupported, thread, err)
	}
	if s.db.closed.Load() {
		return checkpoint.ErrClosed
	}
	return storeErr(op, thread, err, true)
}

// threadState is a threads row, for diagnosis.
type threadState struct {
	exists bool // the namespace's row
	root   bool // the thread's root row, which holds the lease
	head   string
	owner  string
	runner string
	epoch  int64
	until  int64
}

func (s *Saver) readThread(ctx context.Context, thread, ns string) (threadState, error) {
	var st threadState
	var head, owner, runner *string
	var until *int64
	err := s.db.pool.QueryRow(ctx, s.db.q.thread, thread, ns).Scan(&head, &st.exists, &owner, &runner, &st.epoch, &until, &st.root)
	if err != nil {
		return st, err
	}
	if head != nil {
		st.head = *head
	}
	if owner != nil {
		st.owner = *owner
	}
	if runner != nil {
		st.runner = *runner
	}
	if until != nil {
		st.until = *until
	}
	return st, nil
}

// busy is the lease rule on st for l at now: the *BusyError refusing l,
// or nil.
func (st threadState) busy(thread, ns string, l checkpoint.Lease, now time.Time) *checkpoint.BusyError {
	e := &checkpoint.BusyError{Thread: thread, NS: ns, Owner: st.owner, Runner: st.runner, Epoch: uint64(st.epoch),
		SameRunner: st.owner != "" && l.Runner != "" && l.Runner == st.runner}
	if st.owner != "" {
		e.Until = time.Unix(0, st.until).UTC()
	}
	if l.Held {
		if st.owner != l.Owner {
			return e
		}
		return nil
	}
	if st.owner != "" && st.owner != l.Owner && now.UnixNano() < st.until && !l.TakesBack(st.owner, st.runner) {
		return e
	}
	return nil
}

// diagnosePut says why the first request of a chain was refused, as the
// memory saver's rules decide it; nil when they let it through now (the
// caller tries again).
func (s *Saver) diagnosePut(ctx context.Context, req *checkpoint.PutRequest, now time.Time) error {
	st, err := s.readThread(ctx, req.Thread, req.NS)
	if err != nil {
		return s.writeErr("put", req.Thread, err, nil)
	}
	if st.root {
		if be := st.busy(req.Thread, req.NS, req.Lease, now); be != nil {
			return be
		}
	} else if req.Lease.Held {
		// The run held a lease on a thread that is gone (deleted).
		return &checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: req.Checkpoint.ParentID, Head: st.head}
	}
	cp := &req.Checkpoint
	conflict := &checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: st.head}
	step := func(id string) (int64, bool, error) {
		var n int64
		err := s.db.pool.QueryRow(ctx, s.db.q.checkpointStep, req.Thread, req.NS, id).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, nil
		}
		return n, err == nil, err
	}
	if req.Fork {
		if cp.ParentID != "" {
			_, ok, err := step(cp.ParentID)
			if err != nil {
				return s.writeErr("put", req.Thread, err, nil)
			}
			if !ok {
				return conflict
			}
		}
		if cp.ID <= st.head {
			return conflict
		}
	} else if st.head != cp.ParentID {
		return conflict
	}
	if _, ok, err := step(cp.ID); err != nil {
		return s.writeErr("put", req.Thread, err, nil)
	} else if ok {
		return conflict
	}
	if cp.ParentID != "" {
		ps, ok, err := step(cp.ParentID)
		if err != nil {
			return s.writeErr("put", req.Thread, err, nil)
		}
		if ok && int64(cp.Metadata.Step) <= ps {
			return fmt.Errorf("%w: checkpoint %q: step %d does not follow its parent %q's step %d", checkpoint.ErrInvalid, cp.ID, cp.Metadata.Step, cp.ParentID, ps)
		}
	}
	if !st.exists && cp.ParentID != "" {
		return conflict
	}
	return nil
}

// PutWrites implements checkpoint.Saver: one statement (the thread's
// head and lease checked and taken, the writes inserted), one round
// trip; a request with interrupt writes runs in a transaction that
// checks their IDs first. It returns an error wrapping
// checkpoint.ErrInvalid for a request checkpoint.ValidateWrites refuses
// or a value JSONB cannot hold, a *checkpoint.ConflictError when
// req.Ref.ID is not the head, a *checkpoint.BusyError when another owner
// holds the lease (or, with Lease.Held, when the requester no longer
// does), checkpoint.ErrClosed, ctx's error, or a *StoreError. Nothing is
// written on any error but an indeterminate commit.
func (s *Saver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := checkpoint.ValidateWrites(&req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	writes, err := writesParam(req.Tasks)
	if err != nil {
		return err
	}
	ref := req.Ref
	interrupts := checkpoint.HasInterruptWrite(req.Tasks)
	for attempt := 0; ; attempt++ {
		now := s.db.now()
		l := req.Lease
		args := []any{ref.Thread, ref.NS, ref.ID, writes, l.Owner, l.Runner, now.Add(l.TTL).UnixNano(), now.UnixNano(), req.Release, takesBack(l), l.Held, ref.NS != ""}
		var n int64
		var joinErr error
		if joined := len(req.Joins) > 0; interrupts || ref.NS != "" || joined {
			n, err = s.rootTx(ctx, writesPoints, joined, ref.Thread, ref.NS, l, now, req.Release, false, true, func(tx pgx.Tx) (int64, error) {
				if interrupts {
					if err := s.checkInterrupts(ctx, tx, ref.Thread, ref.NS, ref.ID, req.Tasks); err != nil {
						return 0, err
					}
				}
				var n int64
				if err := tx.QueryRow(ctx, s.db.q.putWrites, args...).Scan(&n); err != nil || n != 1 {
					return n, err
				}
				// The writes are saved: the joins run in their transaction.
				return n, s.runJoins(ctx, tx, req.Joins, &joinErr)
			})
		} else {
			s.hook(pointWritesBeforeCommit)
			b := &pgx.Batch{}
			b.Queue(s.db.q.putWrites, args...)
			var counts []int64
			if counts, err = s.sendGrouped(ctx, ref.Thread, b); err == nil {
				if n = counts[0]; n == 1 {
					s.hook(pointWritesAfterCommit)
				}
			}
		}
		if joinErr != nil {
			return joinErr
		}
		if err != nil {
			return s.writeErr("put writes", ref.Thread, err, nil)
		}
		if n == 1 {
			return nil
		}
		st, err := s.readThread(ctx, ref.Thread, ref.NS)
		if err != nil {
			return s.writeErr("put writes", ref.Thread, err, nil)
		}
		var derr error
		switch {
		case !st.exists || st.head != ref.ID:
			derr = &checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: st.head}
		case !st.root && l.Held:
			derr = &checkpoint.BusyError{Thread: ref.Thread, NS: ref.NS}
		case st.root:
			if be := st.busy(ref.Thread, ref.NS, l, now); be != nil {
				derr = be
			}
		}
		if derr != nil {
			return derr
		}
		if attempt == maxAttempts-1 {
			return &checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: "(changing)"}
		}
	}
}

// Claim implements checkpoint.Saver: one statement. It returns an error
// wrapping checkpoint.ErrInvalid for an empty thread or owner, a
// *checkpoint.ConflictError when ref.ID is not the head, a
// *checkpoint.BusyError when another owner holds the lease (or, with
// Held, when the owner no longer does), checkpoint.ErrClosed, ctx's
// error, or a *StoreError.
func (s *Saver) Claim(ctx context.Context, ref checkpoint.Ref, lease checkpoint.Lease) error {
	if ref.Thread == "" {
		return fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	if lease.Owner == "" {
		return fmt.Errorf("%w: empty lease owner", checkpoint.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		now := s.db.now()
		var n int64
		args := []any{ref.Thread, ref.NS, nullable(ref.ID), lease.Owner, lease.Runner,
			now.Add(lease.TTL).UnixNano(), now.UnixNano(), takesBack(lease), lease.Held, ref.NS != ""}
		var err error
		if ref.NS != "" {
			n, err = s.rootTx(ctx, leasePoints, false, ref.Thread, ref.NS, lease, now, false, true, false, func(tx pgx.Tx) (int64, error) {
				var n int64
				err := tx.QueryRow(ctx, s.db.q.claim, args...).Scan(&n)
				return n, err
			})
		} else {
			s.hook(pointLeaseBeforeCommit)
			if err = s.db.pool.QueryRow(ctx, s.db.q.claim, args...).Scan(&n); err == nil && n == 1 {
				s.hook(pointLeaseAfterCommit)
			}
		}
		if err != nil {
			return s.writeErr("claim", ref.Thread, err, nil)
		}
		if n == 1 {
			return nil
		}
		st, err := s.readThread(ctx, ref.Thread, ref.NS)
		if err != nil {
			return s.writeErr("claim", ref.Thread, err, nil)
		}
		if st.head != ref.ID {
			return &checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: st.head}
		}
		if !st.root && lease.Held {
			return &checkpoint.BusyError{Thread: ref.Thread, NS: ref.NS}
		}
		if st.root {
			if be := st.busy(ref.Thread, ref.NS, lease, now); be != nil {
				return be
			}
		}
		if attempt == maxAttempts-1 {
			return &checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: "(changing)"}
		}
	}
}

// Release implements checkpoint.Saver. It fails with ctx's error,
// checkpoint.ErrClosed or a *StoreError.
func (s *Saver) Release(ctx context.Context, thread, ns, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	// One lease per thread, on its root row, whatever namespace is named.
	if _, err := s.db.pool.Exec(ctx, s.db.q.release, thread, "", owner); err != nil {
		return s.writeErr("release", thread, err, nil)
	}
	return nil
}

// DeleteThread implements checkpoint.Saver: one statement. It returns an
// error wrapping checkpoint.ErrInvalid for an empty thread, ctx's error,
// checkpoint.ErrClosed or a *StoreError.
func (s *Saver) DeleteThread(ctx context.Context, thread string) error {
	if thread == "" {
		return fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	if _, err := s.db.pool.Exec(ctx, s.db.q.deleteThread, thread); err != nil {
		return s.writeErr("delete thread", thread, err, nil)
	}
	return nil
}

// storable refuses JSON that JSONB would store as another value or
// cannot store: a \u0000 escape (PostgreSQL text holds no NUL), and a
// negative zero (JSONB's numeric has none: -0 would read back as 0).
// Key order, whitespace, escapes and the spelling of numbers (1e2 reads
// back as 100) change without changing the value; duplicate keys and lone
// surrogates never reach a saver (checkpoint.ValidatePut refuses them).
func storable(b []byte) error {
	if bytes.Contains(b, []byte(`\u0000`)) {
		// A \\u0000 is an escaped backslash followed by u0000: only a
		// count of the backslashes before it tells.
		for i := 0; i+6 <= len(b); i++ {
			if b[i] == '\\' {
				if string(b[i:i+6]) == `\u0000` {
					return fmt.Errorf("%w: a string holds U+0000, which PostgreSQL's JSONB cannot store", ErrUnsupported)
				}
				i++ // skip the escaped byte
			}
		}
	}
	if hasNegativeZero(b) {
		return fmt.Errorf("%w: the number -0, which PostgreSQL's JSONB stores as 0", ErrUnsupported)
	}
	return nil
}

// hasNegativeZero reports whether the JSON text b holds a number token
// that is a negative zero (-0, -0.0, -0e5), outside strings.
func hasNegativeZero(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-':
			j := i + 1
			zero := true
			for ; j < len(b); j++ {
				d := b[j]
				if d >= '1' && d <= '9' {
					zero = false
				}
				if d == 'e' || d == 'E' {
					// the exponent does not change a zero mantissa
					for j++; j < len(b) && (b[j] == '+' || b[j] == '-' || b[j] >= '0' && b[j] <= '9'); j++ {
					}
					break
				}
				if !(d >= '0' && d <= '9' || d == '.') {
					break
				}
			}
			if zero {
				return true
			}
			i = j - 1
		}
	}
	return false
}

// exactText returns b as text when JSONB would spell one of its numbers
// otherwise (an exponent: 1e+21 prints as 1000000000000000000000), and
// nil when JSONB keeps every number's text. Metadata numbers come back
// with the text they were stored with (checkpoint.Metadata), so their
// row keeps that text beside the JSONB.
func exactText(b []byte) any {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == 'e' || c == 'E':
			return string(b)
		}
	}
	if hasNegativeZero(b) {
		return string(b)
	}
	return nil
}

// quote is strconv.Quote, for messages.
func quote(s string) string { return strconv.Quote(s) }
