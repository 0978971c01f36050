package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// dropIfEmpty deletes the thread of t, its root namespace's entry, when
// it holds nothing: no checkpoint in any namespace, no lease, no due work
// and no queued input (a record Claim, Hold or Enqueue created). The
// caller holds s.mu.
func (s *MemorySaver) dropIfEmpty(k threadKey, t *memThread) {
	if t.head != "" || len(t.ids) > 0 || t.leaseOwner != "" || !t.dueAt.IsZero() || len(s.queue[k.thread]) > 0 || s.hasCheckpoints(k.thread) {
		return
	}
	for key := range s.threads {
		if key.thread == k.thread {
			delete(s.threads, key)
		}
	}
}

// dueReason says why t is due at now, "" when it is not: a live lease
// holds nothing due.
func (t *memThread) dueReason(now time.Time) (DueReason, time.Time) {
	switch {
	case t.leaseOwner != "" && now.Before(t.leaseUntil):
		return "", time.Time{}
	case t.leaseOwner != "":
		return DueExpired, t.leaseUntil
	case !t.dueAt.IsZero() && !t.dueAt.After(now):
		return DueMarked, t.dueAt
	case t.isParked && t.parked != t.head:
		return DueParked, t.updated
	}
	return "", time.Time{}
}

// claimDue takes t for a claim of owner (the lease, the claimer, a due
// mark) and describes it. The caller holds s.mu.
func (s *MemorySaver) claimDue(k threadKey, t *memThread, l Lease, why DueReason, now time.Time) DueThread {
	takeLease(t, l, now, false, true)
	t.dueOwner = l.Owner
	if t.dueAt.IsZero() {
		t.dueAt = now
	}
	return DueThread{Thread: k.thread, Owner: l.Owner, Epoch: t.leaseEpoch, Head: t.head, Reason: why,
		Attempts: t.dueAttempts, Queued: len(s.queue[k.thread])}
}

// ClaimDue implements DueWork. It returns an error wrapping ErrInvalid
// for a query ValidateDueQuery refuses and ctx's error when ctx is done.
func (s *MemorySaver) ClaimDue(ctx context.Context, q DueQuery) (DueBatch, error) {
	if err := ValidateDueQuery(q); err != nil {
		return DueBatch{}, err
	}
	if err := ctx.Err(); err != nil {
		return DueBatch{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	type cand struct {
		k   threadKey
		t   *memThread
		why DueReason
		at  time.Time
	}
	var due []cand
	var next time.Time
	later := func(at time.Time) {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for k, t := range s.threads {
		if k.ns != "" {
			continue
		}
		if why, at := t.dueReason(now); why != "" {
			due = append(due, cand{k, t, why, at})
			continue
		}
		if t.leaseOwner != "" {
			later(t.leaseUntil)
		}
		if !t.dueAt.IsZero() {
			later(t.dueAt)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].at.Equal(due[j].at) {
			return due[i].at.Before(due[j].at)
		}
		return due[i].k.thread < due[j].k.thread
	})
	var out DueBatch
	for i, c := range due {
		if i == len(q.Owners) {
			break
		}
		l := Lease{Owner: q.Owners[i], Runner: q.Runner, TTL: q.TTL}
		out.Threads = append(out.Threads, s.claimDue(c.k, c.t, l, c.why, now))
	}
	if !next.IsZero() {
		out.Next = next.Sub(now)
	}
	return out, nil
}

// Hold implements DueWork. It returns an error wrapping ErrInvalid for an
// empty thread or owner or a TTL that is not positive, ctx's error when
// ctx is done, and a *BusyError when another owner holds a live lease.
func (s *MemorySaver) Hold(ctx context.Context, thread string, lease Lease) (DueThread, error) {
	if err := validThread(thread); err != nil {
		return DueThread{}, err
	}
	if lease.TTL <= 0 {
		return DueThread{}, fmt.Errorf("%w: hold thread %q: lease TTL %v is not positive", ErrInvalid, thread, lease.TTL)
	}
	if err := ctx.Err(); err != nil {
		return DueThread{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := threadKey{thread, ""}
	t := s.thread(k)
	now := s.now()
	if err := s.checkLease(t, thread, "", lease, now); err != nil {
		s.dropIfEmpty(k, t)
		return DueThread{}, err
	}
	var why DueReason
	switch {
	case t.leaseOwner != "" && t.leaseOwner != lease.Owner:
		why = DueExpired // expired, or one of the runner's own taken back
	case !t.dueAt.IsZero() && !t.dueAt.After(now):
		why = DueMarked
	case t.isParked && t.parked != t.head:
		why = DueParked
	}
	l := lease
	l.Held = false
	return s.claimDue(k, t, l, why, now), nil
}

// Settle implements DueWork. It returns an error wrapping ErrInvalid for a
// settlement ValidateSettlement refuses, ctx's error when ctx is done, and
// one matching ErrClaimLost when s.Owner is not the thread's claimer.
func (s *MemorySaver) Settle(ctx context.Context, st Settlement) error {
	if err := ValidateSettlement(st); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := threadKey{st.Thread, ""}
	t := s.threads[k]
	if t == nil {
		return nil
	}
	if t.dueOwner != st.Owner {
		return fmt.Errorf("%w: thread %q: claim %q is not the thread's claimer any more", ErrClaimLost, st.Thread, st.Owner)
	}
	now := s.now()
	if st.Drop != 0 {
		q := s.queue[st.Thread]
		if i := slices.IndexFunc(q, func(in QueuedInput) bool { return in.ID == st.Drop }); i >= 0 {
			q = slices.Delete(slices.Clone(q), i, i+1)
			if len(q) == 0 {
				delete(s.queue, st.Thread)
			} else {
				s.queue[st.Thread] = q
			}
		}
	}
	queued := len(s.queue[st.Thread]) > 0
	switch st.Next {
	case DueNone:
		t.dueAt, t.parked, t.isParked = time.Time{}, "", false
		if queued {
			t.dueAt = now
		}
	case DueLater:
		t.dueAt, t.parked, t.isParked = now.Add(st.After), "", false
	case DuePark:
		t.dueAt, t.parked, t.isParked = time.Time{}, st.Park, queued
	}
	if st.Next != DueKeep {
		t.dueAttempts = st.Attempts
	}
	t.dueOwner = ""
	if t.leaseOwner == st.Owner {
		t.leaseOwner, t.leaseRunner, t.leaseUntil = "", "", time.Time{}
	}
	s.dropIfEmpty(k, t)
	return nil
}

// Enqueue implements InputQueue. It returns an error wrapping ErrInvalid
// for an input ValidateQueuedInput refuses and ctx's error when ctx is
// done.
func (s *MemorySaver) Enqueue(ctx context.Context, in QueuedInput) (QueuedInput, bool, error) {
	if err := ValidateQueuedInput(in); err != nil {
		return QueuedInput{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return QueuedInput{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, added := s.enqueueLocked(in, s.now())
	return q, added, nil
}

// EnqueueAll implements InputBatcher: every input under one lock. It
// returns an error wrapping ErrInvalid for an input ValidateQueuedInput
// refuses and ctx's error when ctx is done, queueing nothing then.
func (s *MemorySaver) EnqueueAll(ctx context.Context, ins []QueuedInput) ([]QueuedInput, []bool, error) {
	if err := ValidateQueuedInputs(ins); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out, added := make([]QueuedInput, len(ins)), make([]bool, len(ins))
	for i, in := range ins {
		out[i], added[i] = s.enqueueLocked(in, now)
	}
	return out, added, nil
}

// enqueueLocked queues in at now (see Enqueue); s.mu is held.
func (s *MemorySaver) enqueueLocked(in QueuedInput, now time.Time) (QueuedInput, bool) {
	for _, q := range s.queue[in.Thread] {
		if q.Key == in.Key {
			return cloneInput(q), false
		}
	}
	s.inputs++
	in.ID, in.CreatedAt = s.inputs, now
	in.Input = bytes.Clone(in.Input)
	s.queue[in.Thread] = append(s.queue[in.Thread], in)
	t := s.thread(threadKey{in.Thread, ""})
	if t.dueAt.IsZero() && !t.isParked {
		t.dueAt = now
	}
	return cloneInput(in), true
}

// Queued implements InputQueue. It returns an error wrapping ErrInvalid
// for an empty thread or a negative limit and ctx's error when ctx is
// done.
func (s *MemorySaver) Queued(ctx context.Context, thread string, limit int) ([]QueuedInput, error) {
	if err := validThread(thread); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("%w: queued inputs of thread %q: negative limit %d", ErrInvalid, thread, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	q := s.queue[thread]
	if limit > 0 && len(q) > limit {
		q = q[:limit]
	}
	out := make([]QueuedInput, len(q))
	for i, in := range q {
		out[i] = cloneInput(in)
	}
	return out, nil
}

func cloneInput(in QueuedInput) QueuedInput {
	in.Input = bytes.Clone(in.Input)
	return in
}

var _ RunnerLeases = (*MemorySaver)(nil)

// LeasedBy implements RunnerLeases. It returns an error wrapping
// ErrInvalid for an empty runner or a negative limit, and ctx's error
// when ctx is done.
func (s *MemorySaver) LeasedBy(ctx context.Context, runner string, limit int) ([]LeaseInfo, error) {
	if err := ValidateLeasedBy(runner, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	now := s.now()
	var out []LeaseInfo
	for k, t := range s.threads {
		if k.ns != "" || t.leaseRunner != runner {
			continue
		}
		l := LeaseInfo{Thread: k.thread, Owner: t.leaseOwner, Runner: t.leaseRunner, Epoch: t.leaseEpoch, Until: t.leaseUntil}
		if l.Live(now) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b LeaseInfo) int { return strings.Compare(a.Thread, b.Thread) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
