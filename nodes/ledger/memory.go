package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is a Ledger in process memory: for tests and single-process
// agents whose dedup need not survive a restart.
type Memory struct {
	opts     Options
	mu       sync.Mutex
	entries  map[string]Entry
	messages map[messageKey]claimed
}

// messageKey is a message's identity: its scope and ID, as exact bytes.
type messageKey struct{ scope, id string }

// claimed is a recorded claim.
type claimed struct {
	fingerprint string
	at          time.Time
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an empty in-memory ledger. It returns an error wrapping
// ErrInvalid for a negative retention and for a Fence (see Options.Fence).
func NewMemory(opts Options) (*Memory, error) {
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	if o.Fence != nil {
		return nil, fmt.Errorf("%w: Options.Fence: the memory ledger shares no transaction with a saver, so it cannot be fenced by a thread's lease (use the SQL ledger on the saver's database)", ErrInvalid)
	}
	return &Memory{opts: o, entries: map[string]Entry{}, messages: map[messageKey]claimed{}}, nil
}

// Begin implements Ledger. It returns an error matching ErrInvalid for an
// empty or oversized key or owner or a negative lease, ctx's error when
// ctx is done, and a *KeyReuseError, *InProgressError or
// *OutcomeUnknownError as Ledger.Begin says.
func (m *Memory) Begin(ctx context.Context, in Intent) (Entry, bool, error) {
	if err := checkIntent(&in); err != nil {
		return Entry{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, false, err
	}
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[in.Key]; ok {
		restart, err := decide(e, in, now, m.opts.Retention)
		if err != nil {
			return Entry{}, false, err
		}
		if !restart {
			return cloneEntry(e), false, nil
		}
		if e.State == StatePending { // taken over: keep its age
			e.Owner, e.LeaseUntil, e.Thread, e.Run = in.Owner, now.Add(in.Lease), in.Thread, in.Run
			m.entries[in.Key] = e
			return cloneEntry(e), true, nil
		}
	}
	e := Entry{Key: in.Key, Tool: in.Tool, ArgsHash: in.ArgsHash, State: StatePending, Owner: in.Owner, LeaseUntil: now.Add(in.Lease), CreatedAt: now,
		Thread: in.Thread, Run: in.Run}
	m.entries[in.Key] = e
	return cloneEntry(e), true, nil
}

// Complete implements Ledger. It returns ctx's error when ctx is done, an
// error matching ErrInvalid for an outcome that fails Outcome.Validate,
// and one matching ErrNotHeld when owner does not hold a pending intent
// under key.
func (m *Memory) Complete(ctx context.Context, key, owner string, o Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || e.State != StatePending || e.Owner != owner {
		return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
	}
	e.State, e.Outcome, e.CompletedAt = StateDone, cloneOutcome(o), m.opts.Now()
	m.entries[key] = e
	return nil
}

// Release implements Ledger. It fails as Complete does.
func (m *Memory) Release(ctx context.Context, key, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || e.State != StatePending || e.Owner != owner {
		return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
	}
	delete(m.entries, key)
	return nil
}

// Resolve implements Ledger. It returns ctx's error when ctx is done, an
// error matching ErrInvalid for an outcome that fails Outcome.Validate,
// one matching ErrNotFound when there is no record under key, and one
// matching ErrNotHeld when the record is already done.
func (m *Memory) Resolve(ctx context.Context, key string, o Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	switch {
	case !ok:
		return fmt.Errorf("%w (key %s)", ErrNotFound, short(key))
	case e.State != StatePending:
		return fmt.Errorf("%w: key %s already has an outcome", ErrNotHeld, short(key))
	}
	e.State, e.Outcome, e.CompletedAt = StateDone, cloneOutcome(o), m.opts.Now()
	m.entries[key] = e
	return nil
}

// Forget implements Ledger. It fails only with ctx's error when ctx is
// done.
func (m *Memory) Forget(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
	return nil
}

// Get implements Ledger. It returns ctx's error when ctx is done and an
// error matching ErrNotFound when there is no record under key.
func (m *Memory) Get(ctx context.Context, key string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return Entry{}, fmt.Errorf("%w (key %s)", ErrNotFound, short(key))
	}
	return cloneEntry(e), nil
}

// Prune implements Ledger. It fails only with ctx's error when ctx is
// done.
func (m *Memory) Prune(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cut := m.opts.Now().Add(-m.opts.Retention)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, e := range m.entries {
		if e.State == StateDone && !e.CreatedAt.After(cut) {
			delete(m.entries, k)
			n++
		}
	}
	for k, c := range m.messages {
		if !c.at.After(cut) {
			delete(m.messages, k)
			n++
		}
	}
	return n, nil
}

// ClaimMessage implements Ledger. The claim is in memory only: it does not
// survive the process. It returns an error matching ErrInvalid for a bad
// claim, ctx's error when ctx is done, and an error matching
// ErrDuplicateMessage or a *DuplicateMismatchError for a claim already
// made within the retention.
func (m *Memory) ClaimMessage(ctx context.Context, c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := m.opts.Now()
	k := messageKey{scope: c.Scope, id: c.ID}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.messages[k]; ok && now.Before(prev.at.Add(m.opts.Retention)) {
		return duplicate(c, prev.fingerprint, prev.at)
	}
	m.messages[k] = claimed{fingerprint: c.Fingerprint, at: now}
	return nil
}

// Entries returns a copy of every record, ordered by key (for inspection
// and tests).
func (m *Memory) Entries() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Entry, 0, len(m.entries))
	for _, e := range m.entries {
		out = append(out, cloneEntry(e))
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	return out
}

func cloneEntry(e Entry) Entry {
	e.Outcome = cloneOutcome(e.Outcome)
	return e
}

func cloneOutcome(o Outcome) Outcome {
	o.Result = slices.Clone(o.Result)
	if o.Failure != nil {
		f := *o.Failure
		o.Failure = &f
	}
	return o
}

// quoteID bounds a message ID for error messages.
func quoteID(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
