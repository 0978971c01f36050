package sqlite

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Group commit: Put, PutChain and PutWrites calls (and the due work of a
// pool of workers: ClaimDue, Hold, Settle, Enqueue) that arrive while this
// Saver's writer is busy wait in a queue; the next one to get the writer
// (the leader) takes whatever waits, bounded by Config.GroupCommitMax and
// Config.GroupCommitBytes, and runs every member in one transaction, each
// inside its own SAVEPOINT when it may have to undo a write (runMember).
// A member its own checks refuse (a conflict, a busy or fenced lease, an
// invalid row: errRollback) rolls back to its savepoint, or wrote
// nothing, and fails alone; the others commit together, with one
// COMMIT (one fsync at synchronous=FULL) for all of them. A lone writer
// finds the queue empty but for itself and runs exactly as before: there is
// no timer, nothing waits for company. When SQLite itself fails in the
// middle of a group, the transaction is rolled back and every member runs
// again alone, so that a failure is reported by the member it belongs to.
// A crash before COMMIT returns loses the whole group, after it none of
// it: each member's checkpoint and writes are whole or absent.

// member is one write waiting to commit, alone or in a group.
type member struct {
	ctx    context.Context
	op     opInfo
	prefix string
	fn     func(t *wtx) error
	size   int        // bytes it writes, for Config.GroupCommitBytes
	done   chan error // buffered: the leader never blocks on it
	// firstOnly: fn cannot be refused once its first write statement,
	// run with execFirst, wrote (writeGroupedFirst).
	firstOnly bool

	// What the member's fn recorded for the head cache, applied once the
	// group committed (see wtx).
	savedPut  *preparedPut
	writeRef  *checkpoint.Ref
	writeRows []writeRow
	prevHead  *cachedHead
	err       error // its own refusal, once decided
	ran       bool  // its statements are in the transaction
}

// groupQueue holds the members waiting for the writer.
type groupQueue struct {
	mu     sync.Mutex
	queue  []*member
	closed bool // Close drained it: nothing joins any more

	// Counters, for tests and benchmarks: transactions committed by a
	// group of two or more and the members they carried.
	groups, grouped atomic.Int64
}

// GroupStats reports how many transactions carried more than one write
// (group commit) and how many writes they carried in all, since Open. It
// never fails.
func (s *Saver) GroupStats() (groups, members int64) {
	return s.group.groups.Load(), s.group.grouped.Load()
}

// writeGrouped runs fn as write does, possibly in one transaction with
// other grouped writes (see above). size is what it writes, in bytes.
func (s *Saver) writeGrouped(ctx context.Context, op opInfo, prefix string, size int, fn func(t *wtx) error) error {
	return s.writeGroupedFirst(ctx, op, prefix, size, false, fn)
}

// writeGroupedFirst is writeGrouped for a writer that may say (firstOnly)
// that fn writes only through wtx.exec and wtx.execFirst and cannot be
// refused once the statement it runs with execFirst wrote: in a group,
// such a member takes its savepoint only when it is about to write
// something else first (see runMember).
func (s *Saver) writeGroupedFirst(ctx context.Context, op opInfo, prefix string, size int, firstOnly bool, fn func(t *wtx) error) error {
	if s.cfg.groupMax <= 1 {
		return s.write(ctx, op, prefix, fn)
	}
	if err := s.live(); err != nil {
		return err
	}
	q := &s.group
	select {
	case s.wsem <- struct{}{}:
		// The writer is idle: with nobody queued, this is a lone write
		// (no member to queue, nothing to hand over).
		q.mu.Lock()
		if q.closed || len(q.queue) > 0 {
			q.mu.Unlock()
			<-s.wsem
			break
		}
		q.mu.Unlock()
		err := s.writeLocked(ctx, op, prefix, fn)
		<-s.wsem
		return err
	default:
	}
	m := &member{ctx: ctx, op: op, prefix: prefix, fn: fn, size: size, done: make(chan error, 1), firstOnly: firstOnly}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return s.live()
	}
	q.queue = append(q.queue, m)
	q.mu.Unlock()
	for {
		select {
		case err := <-m.done:
			return err
		case s.wsem <- struct{}{}:
			err := s.lead(ctx, m)
			<-s.wsem
			return err
		case <-ctx.Done():
			if q.remove(m) {
				return op.storeErr(ctx.Err())
			}
			// A leader took it: its transaction runs to the end.
			return <-m.done
		}
	}
}

// remove takes m out of the queue and reports whether it was still there.
func (q *groupQueue) remove(m *member) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.queue {
		if x == m {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return true
		}
	}
	return false
}

// take removes the next group from the front of the queue: at least one
// member, at most max, and no more than maxBytes in all unless the first
// alone is larger.
func (q *groupQueue) take(max, maxBytes int) []*member {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, bytes := 0, 0
	for n < len(q.queue) && n < max {
		if n > 0 && bytes+q.queue[n].size > maxBytes {
			break
		}
		bytes += q.queue[n].size
		n++
	}
	g := make([]*member, n)
	copy(g, q.queue[:n])
	q.queue = append(q.queue[:0], q.queue[n:]...)
	return g
}

// drain fails every waiting member with err and lets no new one join
// (Close, holding wsem).
func (q *groupQueue) drain(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, m := range q.queue {
		m.done <- err
	}
	q.queue = nil
}

// lead runs groups from the front of the queue, holding wsem, until m has
// its result, and returns it.
func (s *Saver) lead(ctx context.Context, m *member) error {
	for {
		select {
		case err := <-m.done:
			return err // a previous leader's group carried it
		default:
		}
		g := s.group.take(s.cfg.groupMax, s.cfg.groupBytes)
		if len(g) == 0 {
			// Not queued and not done cannot happen while we hold wsem;
			// wait for the result all the same rather than spin.
			return <-m.done
		}
		s.commitGroup(ctx, g)
	}
}

// commitGroup runs g in one transaction and sends each member its result.
// The caller holds wsem.
func (s *Saver) commitGroup(ctx context.Context, g []*member) {
	if len(g) == 1 {
		m := g[0]
		m.done <- s.writeLocked(m.ctx, m.op, m.prefix, m.fn)
		return
	}
	if err := s.live(); err != nil {
		for _, m := range g {
			m.done <- err
		}
		return
	}
	// Members whose context ended while they waited fail alone.
	live := g[:0:0]
	for _, m := range g {
		if err := m.ctx.Err(); err != nil {
			m.done <- m.op.storeErr(err)
			continue
		}
		live = append(live, m)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		s.commitGroup(ctx, live)
		return
	}
	if err := s.groupTx(live); err != nil {
		if errors.Is(err, errGroupRetry) {
			// SQLite failed in the middle: nothing of the group is
			// written; each member runs again alone and reports its own
			// outcome.
			for _, m := range live {
				m.done <- s.writeLocked(m.ctx, m.op, m.prefix, m.fn)
			}
			return
		}
		for _, m := range live {
			m.done <- err
		}
		return
	}
	for _, m := range live {
		m.done <- m.err
	}
}

// errGroupRetry says a group's transaction failed in a way that belongs
// to one member or to none (a statement's SQLite error): it was rolled
// back and its members are to run alone.
var errGroupRetry = errors.New("checkpoint/sqlite: group transaction failed; members run alone")

// groupTx runs the members of g in one transaction, each in a savepoint.
// It returns nil when the transaction committed (each member's own
// refusal, if any, is in its err), errGroupRetry when it was rolled back
// because of a statement's SQLite error, and otherwise the error every
// member gets (the writer is gone, BEGIN failed, COMMIT failed:
// ErrCommitIndeterminate).
func (s *Saver) groupTx(g []*member) error {
	first := g[0].op
	if s.wal.lost != nil {
		return s.wal.lost
	}
	bctx, stop := groupContext(g)
	defer stop()
	if _, err := s.writer(bctx); err != nil {
		return first.storeErr(err)
	}
	bg := context.WithoutCancel(bctx)
	s.tx = wtx{s: s, ctx: bg}
	defer func() { s.tx = wtx{} }()
	t := &s.tx
	begin, err := t.stmt("BEGIN IMMEDIATE")
	if err == nil {
		// The wait for the write lock ends early only when every member
		// gave up.
		_, err = begin.ExecContext(bctx)
	}
	if err != nil {
		s.rollback(bg)
		return first.storeErr(err)
	}
	for _, m := range g {
		if err := s.runMember(t, m); err != nil {
			s.rollback(bg)
			return errGroupRetry
		}
	}
	for _, m := range g {
		if m.prefix != "" {
			s.hook(m.prefix, ".beforeCommit")
		}
	}
	if err := s.checkWALInUse(); err != nil {
		s.rollback(bg)
		return s.saveDetachedWAL(bg)
	}
	stamped := s.stampPage1(t)
	commit, err := t.stmt("COMMIT")
	if err != nil {
		s.rollback(bg)
		return first.storeErr(err)
	}
	if _, err := commit.ExecContext(bg); err != nil {
		s.rollback(bg)
		// Each member that was not refused gets its own *StoreError
		// (ErrCommitIndeterminate) naming its operation.
		for _, m := range g {
			if m.err == nil {
				m.err = m.op.commitErr(err)
			}
		}
		return nil
	}
	s.group.groups.Add(1)
	s.group.grouped.Add(int64(len(g)))
	s.recordGroup(g)
	for _, m := range g {
		if m.prefix != "" {
			s.hook(m.prefix, ".afterCommit")
		}
	}
	s.wal.walCommitted(stamped)
	s.keepWAL(bg)
	return nil
}

// errMemberWrote says a member that wrote without a savepoint
// (execFirst) was refused after all: the group is rolled back and its
// members run alone.
var errMemberWrote = errors.New("checkpoint/sqlite: a group member refused after a write it made without a savepoint")

// runMember runs one member in its savepoint. Its own refusal is recorded
// in m.err and rolled back to the savepoint; a SQLite error is returned
// (the caller rolls the whole transaction back).
//
// The savepoint is taken before the member's first write (wtx.exec), not
// before its reads, and not at all for a member whose first write is a
// statement that is all or nothing and after which it cannot be refused
// (writeGroupedFirst, wtx.execFirst: a Put on its parent, the usual
// case): such a member's refusal comes before it wrote anything, and
// there is nothing to roll back. Should it be refused after that write
// all the same, the whole group is rolled back and its members run
// alone (errMemberWrote).
func (s *Saver) runMember(t *wtx, m *member) error {
	t.sp, t.firstOnly = spLazy, m.firstOnly
	defer func() { t.sp, t.firstOnly = spNone, false }()
	if !m.firstOnly {
		if err := t.savepoint(); err != nil {
			return err
		}
	}
	t.savedPut, t.writeRef, t.writeRows, t.prevHead = nil, nil, nil, nil
	if m.op.changesHeads() {
		t.prevHead = s.heads.entry(m.op.thread, m.op.ns)
		s.heads.dropThread(m.op.thread)
	}
	if m.prefix != "" {
		s.hook(m.prefix, ".begin")
	}
	err := m.fn(t)
	var rb errRollback
	switch {
	case err == nil:
		if t.sp == spTaken {
			if _, err := t.execNow("RELEASE member"); err != nil {
				return err
			}
		}
		m.savedPut, m.writeRef, m.writeRows, m.prevHead, m.ran = t.savedPut, t.writeRef, t.writeRows, t.prevHead, true
	case errors.As(err, &rb):
		switch t.sp {
		case spTaken:
			if _, err := t.execNow("ROLLBACK TO member"); err != nil {
				return err
			}
			if _, err := t.execNow("RELEASE member"); err != nil {
				return err
			}
		case spAtomic:
			return errMemberWrote
		}
		m.err = rb.err
	default:
		return err
	}
	if s.cfg.hook != nil {
		s.cfg.hook("sqlite.group.member")
	}
	return nil
}

// recordGroup records in the head cache what the committed members
// wrote. A thread two members wrote is left out of the cache (each
// member's record starts from the entry as it was before the group), so
// that it is read from the file next time.
func (s *Saver) recordGroup(g []*member) {
	var twice map[string]bool
	seen := make(map[string]bool, len(g))
	for _, m := range g {
		if !m.ran || m.op.thread == "" {
			continue
		}
		if seen[m.op.thread] {
			if twice == nil {
				twice = map[string]bool{}
			}
			twice[m.op.thread] = true
		}
		seen[m.op.thread] = true
	}
	for _, m := range g {
		if !m.ran {
			continue
		}
		if twice[m.op.thread] {
			s.heads.dropThread(m.op.thread)
			continue
		}
		switch {
		case m.savedPut != nil:
			s.heads.putRow(m.savedPut)
		case m.writeRef != nil:
			s.heads.addWrites(m.prevHead, *m.writeRef, m.writeRows)
		}
	}
}

// groupContext returns a context that ends when every member's context
// has ended (never, when one of them cannot end), and a function that
// releases it.
func groupContext(g []*member) (context.Context, func()) {
	for _, m := range g {
		if m.ctx.Done() == nil {
			return context.Background(), func() {}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int32
	left.Store(int32(len(g)))
	stops := make([]func() bool, len(g))
	for i, m := range g {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
