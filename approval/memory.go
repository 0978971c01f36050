package approval

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore is a Store that keeps decisions in memory, for tests and
// single-process programs whose threads do not outlive the process. It is
// safe for concurrent use. The zero value is not usable; call
// NewMemoryStore. After Close every method fails with an *Error matching
// ErrClosed, as a SQLStore's do.
type MemoryStore struct {
	now    func() time.Time
	mu     sync.Mutex
	recs   map[string]*memRecord
	closed bool
}

type memRecord struct {
	rec  Record
	exec *Execution
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store that reads time from now (nil
// means time.Now).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	return &MemoryStore{now: clockOrNow(now), recs: map[string]*memRecord{}}
}

// Close closes the store and drops its decisions: every later call of a
// method fails with an *Error matching ErrClosed. Closing a closed store
// does nothing and returns nil; Close always returns nil.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.recs = true, nil
	return nil
}

// closedError returns the error of a call on approval id ("" for none)
// after Close, or nil while the store is open. s.mu must be held.
func (s *MemoryStore) closedError(id string) error {
	if s.closed {
		return newError(id, ErrClosed, "")
	}
	return nil
}

// Decide implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) Decide(ctx context.Context, item Item, v Verdict) (Decision, error) {
	s.mu.Lock()
	err := s.closedError(item.ID)
	s.mu.Unlock()
	if err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if err := checkVerdict(item.ID, v); err != nil {
		return Decision{}, err
	}
	if err := checkItem(item); err != nil {
		return Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(item.ID); err != nil {
		return Decision{}, err // closed while the verdict was checked
	}
	if r, ok := s.recs[item.ID]; ok {
		return Decision{}, &AlreadyDecidedError{ID: item.ID, Winner: cloneDecision(r.rec.Decision)}
	}
	d, late, err := decide(item, v, s.now())
	if err != nil {
		return Decision{}, err
	}
	// The snapshot a SQLStore would keep must read back as the request,
	// so that both stores refuse the same items.
	if _, err := encodeRequest(item.ID, item.Request); err != nil {
		return Decision{}, err
	}
	s.recs[item.ID] = &memRecord{rec: Record{
		ID: item.ID, Thread: item.Thread, Checkpoint: item.Checkpoint,
		Request: cloneRequest(item.Request), Decision: cloneDecision(d),
	}}
	if late != nil {
		return Decision{}, late // the expiry that the late verdict observed is recorded
	}
	return d, nil
}

// Get implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) Get(ctx context.Context, id string) (Record, error) {
	t, err := s.Audit(ctx, id)
	return t.Record, err
}

// Decided implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) Decided(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(""); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range ids {
		if _, ok := s.recs[id]; ok {
			out[id] = true
		}
	}
	return out, nil
}

// Unresumed implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) Unresumed(ctx context.Context, limit int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.list(limit, func(r Resume, now time.Time) bool { return r.At.IsZero() && !r.NotBefore.After(now) })
}

// list returns up to limit records whose resume progress passes keep at
// the store's now, oldest decision first (limit <= 0: all).
func (s *MemoryStore) list(limit int, keep func(r Resume, now time.Time) bool) ([]Record, error) {
	now := s.now()
	s.mu.Lock()
	if err := s.closedError(""); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	var out []Record
	for _, r := range s.recs {
		if keep(r.rec.Resume, now) {
			out = append(out, cloneRecord(r.rec))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Record) int {
		if c := a.Decision.DecidedAt.Compare(b.Decision.DecidedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ClaimResume implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) ClaimResume(ctx context.Context, id string, lease time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkLease(id, lease); err != nil {
		return false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return false, err
	}
	r, ok := s.recs[id]
	if !ok {
		return false, newError(id, ErrNotFound, "no decision")
	}
	return r.rec.Resume.claim(Claim{Lease: lease}, now), nil
}

var _ ResumeClaimer = (*MemoryStore)(nil)

// ClaimResumeAs implements ResumeClaimer. After Close it fails with an
// *Error matching ErrClosed.
func (s *MemoryStore) ClaimResumeAs(ctx context.Context, id string, c Claim) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkClaim(id, c); err != nil {
		return false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return false, err
	}
	r, ok := s.recs[id]
	if !ok {
		return false, newError(id, ErrNotFound, "no decision")
	}
	return r.rec.Resume.claim(c, now), nil
}

// Claims implements ResumeClaimer. After Close it fails with an *Error
// matching ErrClosed.
func (s *MemoryStore) Claims(ctx context.Context, worker string, limit int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkWorkerName("", worker); err != nil {
		return nil, err
	}
	return s.list(limit, func(r Resume, now time.Time) bool { return r.claimedBy(worker, now) })
}

// FinishResume implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) FinishResume(ctx context.Context, id, note string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return err
	}
	r, ok := s.recs[id]
	if !ok {
		return newError(id, ErrNotFound, "no decision")
	}
	if r.rec.Resume.At.IsZero() {
		r.rec.Resume.At, r.rec.Resume.Note, r.rec.Resume.NotBefore = now.UTC(), truncate(note, maxErrorBytes), time.Time{}
		r.rec.Resume.Claimant, r.rec.Resume.Claim = "", ""
	}
	return nil
}

// RetryResume implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) RetryResume(ctx context.Context, id, reason string, after time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDelay(id, after); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return err
	}
	r, ok := s.recs[id]
	if !ok {
		return newError(id, ErrNotFound, "no decision")
	}
	if r.rec.Resume.At.IsZero() {
		r.rec.Resume.Attempts++
		r.rec.Resume.LastError, r.rec.Resume.NotBefore = truncate(reason, maxErrorBytes), now.Add(after).UTC()
		r.rec.Resume.Claimant, r.rec.Resume.Claim = "", ""
	}
	return nil
}

// RecordOutcome implements OutcomeRecorder. After Close it fails with an
// *Error matching ErrClosed.
func (s *MemoryStore) RecordOutcome(ctx context.Context, id string, e Execution) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return err
	}
	r, ok := s.recs[id]
	if !ok {
		return newError(id, ErrNotFound, "no decision")
	}
	e, err := checkExecution(r.rec, e, now)
	if err != nil {
		return err
	}
	if r.exec != nil {
		if sameExecution(*r.exec, e) {
			return nil
		}
		return newError(id, ErrOutcomeRecorded, "")
	}
	r.exec = &e
	return nil
}

// Audit implements Store. After Close it fails with an *Error matching
// ErrClosed.
func (s *MemoryStore) Audit(ctx context.Context, id string) (Trail, error) {
	if err := ctx.Err(); err != nil {
		return Trail{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closedError(id); err != nil {
		return Trail{}, err
	}
	r, ok := s.recs[id]
	if !ok {
		return Trail{}, newError(id, ErrNotFound, "no decision")
	}
	t := Trail{Record: cloneRecord(r.rec)}
	if r.exec != nil {
		e := *r.exec
		e.Result = slices.Clone(e.Result)
		t.Execution = &e
	}
	return t, nil
}

// Now implements Store: it reads the clock the store was made with.
func (s *MemoryStore) Now() time.Time { return s.now() }

func cloneRequest(r Request) Request {
	r.Args, r.Context, r.Schema = cloneRaw(r.Args), cloneRaw(r.Context), cloneRaw(r.Schema)
	return r
}

func cloneDecision(d Decision) Decision {
	d.Args = cloneRaw(d.Args)
	return d
}

func cloneRecord(r Record) Record {
	r.Request, r.Decision = cloneRequest(r.Request), cloneDecision(r.Decision)
	return r
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return slices.Clone(b)
}
