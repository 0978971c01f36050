package postgres

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Group commit: a Put, PutChain or PutWrites whose statements need no
// transaction of their own (the root namespace, no interrupt writes, no
// joins: one statement a checkpoint, see PutChain) and that arrives while
// the Saver already has Config.GroupCommitLeaders batches in flight waits
// in a queue; the next caller to get a slot (the leader) takes whatever
// waits, bounded by Config.GroupCommitMax and Config.GroupCommitBytes, and
// sends every member's statements in one batch: one round trip and one
// implicit transaction, one commit (one WAL flush with synchronous_commit
// on) for all of them. A lone writer finds a free slot and runs exactly as
// before: there is no timer, nothing waits for company.
//
// Each member keeps its own compare-and-swap result. A member the rules
// refuse (the parent is not the head, another owner's lease, a fenced
// epoch) is a statement that matches no row: it writes nothing and
// returns a count of 0, and the others commit. When PostgreSQL itself
// refuses a statement (a checkpoint ID that exists, a value JSONB cannot
// hold, a deadlock), the whole batch is rolled back and every member runs
// again alone, so that a failure is reported by the member it belongs to.
// When the connection breaks, every member gets the indeterminate error a
// lone write would. A crash before the commit loses the whole group,
// after it none of it.
//
// Members are sent in the order of their thread IDs (a thread's own
// members in the order they came), so that two groups, of this process or
// another, take the threads' row locks in one order and never deadlock
// each other.

// member is one write waiting to be sent, alone or in a group.
type member struct {
	ctx    context.Context
	thread string
	batch  *pgx.Batch // its statements, each returning one count
	size   int        // bytes of its parameters, for GroupCommitBytes
	done   chan groupResult
}

// groupResult is what a member's statements returned.
type groupResult struct {
	counts []int64
	err    error
}

// groupQueue holds the members waiting for a slot.
type groupQueue struct {
	mu    sync.Mutex
	queue []*member
	slots chan struct{} // one token a batch in flight

	// Counters, for tests and benchmarks: batches that carried two or more
	// members and the members they carried.
	groups, grouped atomic.Int64
}

// GroupStats reports how many transactions carried more than one write
// (group commit) and how many writes they carried in all, since Open. It
// never fails.
func (s *Saver) GroupStats() (groups, members int64) {
	return s.group.groups.Load(), s.group.grouped.Load()
}

// batchSize is the bytes of b's parameters that are strings (the JSON of
// the checkpoints and writes), for Config.GroupCommitBytes.
func batchSize(b *pgx.Batch) int {
	n := 0
	for _, q := range b.QueuedQueries {
		for _, a := range q.Arguments {
			if s, ok := a.(string); ok {
				n += len(s)
			}
		}
	}
	return n
}

// sendGrouped sends b (statements that each return one count) in one
// implicit transaction, alone or with other members (see above), and
// returns its counts.
func (s *Saver) sendGrouped(ctx context.Context, thread string, b *pgx.Batch) ([]int64, error) {
	q := &s.group
	if s.db.cfg.GroupCommitMax <= 1 {
		return s.sendCounts(ctx, b)
	}
	m := &member{ctx: ctx, thread: thread, batch: b, size: batchSize(b), done: make(chan groupResult, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, m)
	q.mu.Unlock()
	select {
	case r := <-m.done:
		return r.counts, r.err
	case q.slots <- struct{}{}:
		r := s.lead(m)
		<-q.slots
		return r.counts, r.err
	case <-ctx.Done():
		if q.remove(m) {
			return nil, ctx.Err()
		}
		// A leader took it: its batch runs to the end.
		r := <-m.done
		return r.counts, r.err
	}
}

// remove takes m out of the queue and reports whether it was still there.
func (q *groupQueue) remove(m *member) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.queue {
		if x == m {
			q.queue = slices.Delete(q.queue, i, i+1)
			return true
		}
	}
	return false
}

// take removes the next group from the front of the queue: at most max
// members and no more than maxBytes in all unless the first alone is
// larger; none when the queue is empty.
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
	g := slices.Clone(q.queue[:n])
	q.queue = slices.Delete(q.queue, 0, n)
	return g
}

// lead sends groups from the front of the queue, holding a slot, until m
// has its result, and returns it.
func (s *Saver) lead(m *member) groupResult {
	for {
		select {
		case r := <-m.done:
			return r // another leader's group carried it
		default:
		}
		g := s.group.take(s.db.cfg.GroupCommitMax, s.db.cfg.GroupCommitBytes)
		if len(g) == 0 {
			// Another leader took m and has not answered yet.
			return <-m.done
		}
		s.sendGroup(g)
	}
}

// sendGroup sends g's statements in one batch and gives each member its
// counts (see above).
func (s *Saver) sendGroup(g []*member) {
	// Members whose context ended while they waited fail alone.
	live := g[:0:0]
	for _, m := range g {
		if err := m.ctx.Err(); err != nil {
			m.done <- groupResult{err: err}
			continue
		}
		live = append(live, m)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		m := live[0]
		counts, err := s.sendCounts(m.ctx, m.batch)
		m.done <- groupResult{counts, err}
		return
	}
	slices.SortStableFunc(live, func(a, b *member) int { return cmp.Compare(a.thread, b.thread) })
	all := &pgx.Batch{}
	for _, m := range live {
		for _, q := range m.batch.QueuedQueries {
			// A copy: pgx keeps the connection's prepared statement on
			// the queued query, and a member that runs again alone may
			// run on another connection.
			all.Queue(q.SQL, q.Arguments...)
		}
	}
	ctx, stop := groupContext(live)
	counts, err := s.sendCounts(ctx, all)
	stop()
	switch {
	case err == nil:
		s.group.groups.Add(1)
		s.group.grouped.Add(int64(len(live)))
		for _, m := range live {
			n := m.batch.Len()
			m.done <- groupResult{counts: counts[:n:n]}
			counts = counts[n:]
		}
	case sqlState(err) != "" && !connectionLost(err):
		// PostgreSQL refused a statement: the batch's transaction rolled
		// back, nothing of it is written. Each member runs again alone
		// and reports its own outcome.
		for _, m := range live {
			counts, err := s.sendCounts(m.ctx, m.batch)
			m.done <- groupResult{counts, err}
		}
	default:
		// The connection broke or every member gave up: whether the
		// batch committed is unknown, for each of them.
		for _, m := range live {
			m.done <- groupResult{err: err}
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
