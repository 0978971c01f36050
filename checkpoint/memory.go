package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// MemorySaver keeps checkpoints in memory. It implements Saver,
// ThreadLister, InterruptLister, Pruner, ChainPutter, LeaseInspector,
// TopologyStore, DueWork and InputQueue with the same rules as the SQLite
// saver (delta blobs, head compare-and-swap, leases), so tests and
// short-lived programs behave exactly as they would on disk. Everything is
// lost when the process exits. It is safe for concurrent use.
type MemorySaver struct {
	mu      sync.RWMutex
	now     Clock
	threads map[threadKey]*memThread
	seq     int64 // orders writes for PendingInterrupts

	topologies map[string]Topology // by fingerprint
	latest     map[string]string   // graph name → fingerprint stored last
	// queue holds the inputs queued per thread (InputQueue), oldest
	// first; inputs numbers them.
	queue  map[string][]QueuedInput
	inputs int64
}

var (
	_ Saver           = (*MemorySaver)(nil)
	_ ThreadLister    = (*MemorySaver)(nil)
	_ InterruptLister = (*MemorySaver)(nil)
	_ Pruner          = (*MemorySaver)(nil)
	_ ChainPutter     = (*MemorySaver)(nil)
	_ LeaseInspector  = (*MemorySaver)(nil)
	_ TopologyStore   = (*MemorySaver)(nil)
	_ DueWork         = (*MemorySaver)(nil)
	_ InputQueue      = (*MemorySaver)(nil)
	_ InputBatcher    = (*MemorySaver)(nil)
)

type threadKey struct{ thread, ns string }

type blobKey struct{ channel, version string }

// memThread is one namespace of a thread. The thread's lease lives on its
// root namespace's entry (see leaseOf); the lease fields of the other
// namespaces' entries stay empty.
type memThread struct {
	head        string
	ids         []string // sorted ascending
	checkpoints map[string]*memCheckpoint
	blobs       map[blobKey]Blob
	leaseOwner  string
	leaseRunner string
	leaseEpoch  uint64
	leaseUntil  time.Time
	updated     time.Time
	// The thread's due work (DueWork): when it is marked due (zero:
	// not), by whose claim, the failed attempts recorded, and, when its
	// queued input is parked, the head it is parked behind ("": no
	// checkpoint).
	dueAt       time.Time
	dueOwner    string
	dueAttempts int
	parked      string
	isParked    bool
}

type memCheckpoint struct {
	cp     Checkpoint // Channels is nil: blobs live in memThread.blobs
	writes []memWrite
}

type memWrite struct {
	PendingWrite
	idx int
	at  time.Time
	seq int64
}

// NewMemorySaver returns an empty saver that reads time from now (time.Now
// when nil) for leases and timestamps.
func NewMemorySaver(now Clock) *MemorySaver {
	if now == nil {
		now = time.Now
	}
	return &MemorySaver{now: now, threads: make(map[threadKey]*memThread), topologies: map[string]Topology{}, latest: map[string]string{},
		queue: make(map[string][]QueuedInput)}
}

func validThread(thread string) error {
	if thread == "" {
		return fmt.Errorf("%w: empty thread ID", ErrInvalid)
	}
	return nil
}

// checkLease applies the lease rule for owner to lt, the entry holding the
// thread's lease (nil: the thread has none yet, so the lease is free).
func (s *MemorySaver) checkLease(lt *memThread, thread, ns string, l Lease, now time.Time) error {
	if l.Owner == "" {
		return fmt.Errorf("%w: empty lease owner", ErrInvalid)
	}
	if l.Held && (lt == nil || lt.leaseOwner != l.Owner) {
		// Fenced (D17): the lease passed on since this owner took it, or
		// the thread is gone.
		if lt == nil {
			return &BusyError{Thread: thread, NS: ns}
		}
		return lt.busy(thread, ns, l)
	}
	if lt != nil && lt.leaseOwner != "" && lt.leaseOwner != l.Owner && now.Before(lt.leaseUntil) && !l.TakesBack(lt.leaseOwner, lt.leaseRunner) {
		return lt.busy(thread, ns, l)
	}
	return nil
}

// leaseOf returns the entry that holds the lease of thread: its root
// namespace's, created when create is set (nil otherwise when there is
// none). One lease covers every namespace of a thread: a subgraph's
// checkpoints are written by the run that holds its thread. The caller
// holds s.mu.
func (s *MemorySaver) leaseOf(thread string, create bool) *memThread {
	if create {
		return s.thread(threadKey{thread, ""})
	}
	return s.threads[threadKey{thread, ""}]
}

// hasCheckpoints reports whether any namespace of thread has a
// checkpoint. The caller holds s.mu.
func (s *MemorySaver) hasCheckpoints(thread string) bool {
	for k, t := range s.threads {
		if k.thread == thread && len(t.ids) > 0 {
			return true
		}
	}
	return false
}

// busy is the *BusyError of a request l refused by t's lease.
func (t *memThread) busy(thread, ns string, l Lease) *BusyError {
	return &BusyError{Thread: thread, NS: ns, Owner: t.leaseOwner, Runner: t.leaseRunner, Epoch: t.leaseEpoch, Until: t.leaseUntil,
		SameRunner: t.leaseOwner != "" && l.Runner != "" && l.Runner == t.leaseRunner}
}

// takeLease applies a request that passed checkLease: release frees the
// lease; otherwise a live lease of the same owner is kept (renew extends
// it), and a free or expired one, or one taken back, is taken until now +
// TTL. The epoch grows whenever the lease passes to an owner that did not
// hold it, released at once or not.
func takeLease(t *memThread, l Lease, now time.Time, release, renew bool) {
	if t.leaseOwner != l.Owner {
		t.leaseEpoch++
	}
	switch {
	case release:
		t.leaseOwner, t.leaseRunner, t.leaseUntil = "", "", time.Time{}
	case t.leaseOwner == l.Owner && now.Before(t.leaseUntil) && !renew:
	default:
		t.leaseOwner, t.leaseRunner, t.leaseUntil = l.Owner, l.Runner, now.Add(l.TTL)
	}
}

// Get implements Saver. It returns an error wrapping ErrInvalid for an
// empty thread, ctx's error when ctx is done, an error matching ErrNotFound
// when the thread or checkpoint does not exist, and a *CorruptError when a
// channel's blob chain is broken.
func (s *MemorySaver) Get(ctx context.Context, ref Ref, opts GetOptions) (*Tuple, error) {
	if err := validThread(ref.Thread); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t := s.threads[threadKey{ref.Thread, ref.NS}]
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	id := ref.ID
	if id == "" {
		id = t.head
	}
	c := t.checkpoints[id]
	if c == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return s.tuple(ref.Thread, ref.NS, t, c, opts.Have)
}

// metadataTuple is c without its channels and pending writes
// (ListOptions.MetadataOnly).
func metadataTuple(thread, ns string, c *memCheckpoint) *Tuple {
	cp := c.cp
	cp.Versions = maps.Clone(c.cp.Versions)
	cp.Channels = nil
	cp.Metadata.Parents = cloneNonEmpty(cp.Metadata.Parents)
	if cp.Metadata.Parents == nil {
		cp.Metadata.Parents = map[string]string{}
	}
	cp.Metadata.Extra = cloneExtra(cp.Metadata.Extra)
	return &Tuple{Thread: thread, NS: ns, Checkpoint: cp}
}

func (s *MemorySaver) tuple(thread, ns string, t *memThread, c *memCheckpoint, have map[string]string) (*Tuple, error) {
	cp := c.cp
	cp.Versions = maps.Clone(c.cp.Versions)
	cp.Channels = make(map[string][]Blob, len(cp.Versions))
	for ch, v := range cp.Versions {
		// Skip a channel only when the caller named its version in Have:
		// with a bare have[ch] == v, a nil Have and an empty version would
		// leave the channel out without an error.
		if hv, ok := have[ch]; ok && hv == v {
			continue
		}
		chain, err := memChain(t, ch, v, have[ch])
		if err != nil {
			return nil, &CorruptError{Thread: thread, Checkpoint: cp.ID, What: "channel " + ch, Err: err}
		}
		cp.Channels[ch] = chain
	}
	cp.Metadata.Parents = cloneNonEmpty(cp.Metadata.Parents)
	if cp.Metadata.Parents == nil {
		cp.Metadata.Parents = map[string]string{}
	}
	cp.Metadata.Extra = cloneExtra(cp.Metadata.Extra)
	tp := &Tuple{Thread: thread, NS: ns, Checkpoint: cp}
	for _, w := range c.writes {
		tp.Pending = append(tp.Pending, w.PendingWrite)
	}
	return tp, nil
}

// memChain returns the blobs of channel ch at version, oldest first. When
// the walk reaches stop (a version the caller holds), it ends there.
func memChain(t *memThread, ch, version, stop string) ([]Blob, error) {
	var rev []Blob
	v := version
	for {
		if stop != "" && v == stop && len(rev) > 0 {
			break
		}
		b, ok := t.blobs[blobKey{ch, v}]
		if !ok {
			return nil, fmt.Errorf("missing blob for version %q", v)
		}
		rev = append(rev, b)
		if !b.Append || b.Base == "" {
			break
		}
		if len(rev) > len(t.blobs) {
			return nil, fmt.Errorf("cycle in blob chain at version %q", v)
		}
		v = b.Base
	}
	slices.Reverse(rev)
	return rev, nil
}

// List implements Saver. It returns an error wrapping ErrInvalid for an
// empty thread or a bad filter key, ctx's error when ctx is done, and a
// *CorruptError when a channel's blob chain is broken.
func (s *MemorySaver) List(ctx context.Context, thread string, opts ListOptions) ([]*Tuple, error) {
	if err := validThread(thread); err != nil {
		return nil, err
	}
	return s.list(ctx, func(t string) bool { return t == thread }, opts)
}

// Search implements Searcher: List over every thread, in one read. It
// fails as List does.
func (s *MemorySaver) Search(ctx context.Context, opts ListOptions) ([]*Tuple, error) {
	return s.list(ctx, func(string) bool { return true }, opts)
}

// list is List over the threads thread selects.
func (s *MemorySaver) list(ctx context.Context, thread func(string) bool, opts ListOptions) ([]*Tuple, error) {
	if err := ValidateFilter(opts.Filter); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []threadKey
	for k := range s.threads {
		if thread(k.thread) && (opts.AllNamespaces || k.ns == opts.NS) {
			keys = append(keys, k)
		}
	}
	type item struct {
		key threadKey
		c   *memCheckpoint
	}
	var items []item
	for _, k := range keys {
		t := s.threads[k]
		for _, id := range t.ids {
			if opts.Before != "" && id >= opts.Before {
				continue
			}
			c := t.checkpoints[id]
			if !MetadataMatches(c.cp.Metadata, opts.Filter) {
				continue
			}
			items = append(items, item{k, c})
		}
	}
	// Newest first; the same ID in several threads or namespaces by
	// thread, then namespace, as the SQLite saver orders them.
	sort.Slice(items, func(i, j int) bool {
		if a, b := items[i].c.cp.ID, items[j].c.cp.ID; a != b {
			return a > b
		}
		if a, b := items[i].key.thread, items[j].key.thread; a != b {
			return a < b
		}
		return items[i].key.ns < items[j].key.ns
	})
	if opts.Limit > 0 && len(items) > opts.Limit {
		items = items[:opts.Limit]
	}
	out := make([]*Tuple, 0, len(items))
	for _, it := range items {
		if opts.MetadataOnly {
			out = append(out, metadataTuple(it.key.thread, it.key.ns, it.c))
			continue
		}
		tp, err := s.tuple(it.key.thread, it.key.ns, s.threads[it.key], it.c, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, tp)
	}
	return out, nil
}

func (s *MemorySaver) thread(k threadKey) *memThread {
	t := s.threads[k]
	if t == nil {
		t = &memThread{ids: make([]string, 0, 16), checkpoints: make(map[string]*memCheckpoint, 16), blobs: make(map[blobKey]Blob, 32)}
		s.threads[k] = t
	}
	return t
}

// validatePut checks the shape of a PutRequest. It is shared by savers
// through ValidatePut.
func validatePut(req *PutRequest) error {
	if err := validThread(req.Thread); err != nil {
		return err
	}
	if err := validJoins(req.Joins); err != nil {
		return err
	}
	cp := &req.Checkpoint
	if cp.ID == "" {
		return fmt.Errorf("%w: empty checkpoint ID", ErrInvalid)
	}
	// Stored as text (and passed through JSON by a saver's queries), an ID
	// that is not UTF-8 would not come back as itself.
	if !utf8.ValidString(cp.ID) || !utf8.ValidString(cp.ParentID) {
		return fmt.Errorf("%w: checkpoint ID %q or its parent's is not valid UTF-8", ErrInvalid, cp.ID)
	}
	if y := cp.CreatedAt.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("%w: checkpoint %q: creation time %v is outside years 0 to 9999 (RFC 3339)", ErrInvalid, cp.ID, cp.CreatedAt)
	}
	if err := validateMetadata(cp.ID, cp.Metadata); err != nil {
		return err
	}
	if cp.ParentID != "" && cp.ParentID >= cp.ID {
		return fmt.Errorf("%w: checkpoint ID %q does not sort after its parent %q", ErrInvalid, cp.ID, cp.ParentID)
	}
	if req.Lease.Owner == "" {
		return fmt.Errorf("%w: empty lease owner", ErrInvalid)
	}
	for ch, blobs := range cp.Channels {
		if len(blobs) != 1 || blobs[0].Version != cp.ID || cp.Versions[ch] != cp.ID {
			return fmt.Errorf("%w: channel %q: a put carries exactly one blob per changed channel, versioned with the checkpoint ID", ErrInvalid, ch)
		}
		// Refused here rather than reported as corrupt when read: JSON
		// that json.Marshal never writes (a lone surrogate escape, a
		// duplicate key, invalid UTF-8).
		if err := strictjson.CheckJSON(blobs[0].Data); err != nil {
			return fmt.Errorf("%w: checkpoint %q channel %q: blob is not valid JSON: %w", ErrInvalid, cp.ID, ch, err)
		}
	}
	for ch, v := range cp.Versions {
		if v == "" {
			// A version is the ID of the checkpoint that wrote the
			// channel; an empty one names no blob and can never be read.
			return fmt.Errorf("%w: channel %q has an empty version", ErrInvalid, ch)
		}
		if v == cp.ID {
			if _, ok := cp.Channels[ch]; !ok {
				return fmt.Errorf("%w: channel %q has the new version but no blob", ErrInvalid, ch)
			}
		}
	}
	if err := checkCheckpoint(cp); err != nil {
		return fmt.Errorf("%w: checkpoint %q: %w", ErrInvalid, cp.ID, err)
	}
	if err := validateTaskWrites(req.ParentWrites); err != nil {
		return err
	}
	return validateTaskWrites(req.Writes)
}

// ValidatePut checks a PutRequest's shape (thread, IDs, one blob per changed
// channel, JSON as json.Marshal writes it) and what a reader would report
// as corrupt (VerifyCheckpoint, and every write as VerifyPending checks
// it), and returns an error wrapping ErrInvalid when it is malformed.
// Savers call it before touching storage; the rules that need the stored
// thread (the parent's step, the interrupt IDs already saved) are the
// saver's to check (see Saver).
func ValidatePut(req *PutRequest) error { return validatePut(req) }

// ValidateChain checks that reqs can be saved as one chain: at least one
// request, each valid for Put (ValidatePut), all on one thread and
// namespace with one lease owner, each after the first the child of the
// one before and not a fork, and none but the last releasing the lease.
// It returns an error wrapping ErrInvalid when they cannot.
func ValidateChain(reqs []PutRequest) error {
	if len(reqs) == 0 {
		return fmt.Errorf("%w: an empty chain of checkpoints", ErrInvalid)
	}
	first := &reqs[0]
	for i := range reqs {
		req := &reqs[i]
		if err := validatePut(req); err != nil {
			return err
		}
		if i == 0 {
			continue
		}
		prev := &reqs[i-1]
		switch {
		case req.Thread != first.Thread || req.NS != first.NS:
			return fmt.Errorf("%w: checkpoint %q: a chain stays on thread %q namespace %q", ErrInvalid, req.Checkpoint.ID, first.Thread, first.NS)
		case req.Lease.Owner != first.Lease.Owner:
			return fmt.Errorf("%w: checkpoint %q: a chain has one lease owner", ErrInvalid, req.Checkpoint.ID)
		case req.Fork || req.Checkpoint.ParentID != prev.Checkpoint.ID:
			return fmt.Errorf("%w: checkpoint %q: its parent must be %q, the checkpoint before it in the chain", ErrInvalid, req.Checkpoint.ID, prev.Checkpoint.ID)
		case prev.Release:
			return fmt.Errorf("%w: checkpoint %q: only the last checkpoint of a chain may release the lease", ErrInvalid, prev.Checkpoint.ID)
		case req.Checkpoint.Metadata.Step <= prev.Checkpoint.Metadata.Step:
			return fmt.Errorf("%w: checkpoint %q: step %d does not follow its parent %q's step %d", ErrInvalid, req.Checkpoint.ID, req.Checkpoint.Metadata.Step, prev.Checkpoint.ID, prev.Checkpoint.Metadata.Step)
		}
	}
	return nil
}

// ValidateWrites checks a WritesRequest's shape and every write as
// VerifyPending checks it (special writes decode strictly, interrupt IDs
// are unique across the request's tasks), and returns an error wrapping
// ErrInvalid when it is malformed.
func ValidateWrites(req *WritesRequest) error {
	if err := validThread(req.Ref.Thread); err != nil {
		return err
	}
	if req.Ref.ID == "" {
		return fmt.Errorf("%w: pending writes need a checkpoint ID", ErrInvalid)
	}
	if !utf8.ValidString(req.Ref.ID) {
		return fmt.Errorf("%w: checkpoint ID %q is not valid UTF-8", ErrInvalid, req.Ref.ID)
	}
	if req.Lease.Owner == "" {
		return fmt.Errorf("%w: empty lease owner", ErrInvalid)
	}
	if err := validJoins(req.Joins); err != nil {
		return err
	}
	return validateTaskWrites(req.Tasks)
}

// validJoins refuses a nil Join.
func validJoins(joins []Join) error {
	for _, j := range joins {
		if j == nil {
			return fmt.Errorf("%w: a nil Join", ErrInvalid)
		}
	}
	return nil
}

// refuseJoins is the MemorySaver's answer to a request with Joins: it
// has no transaction another store could share (it is not a Joiner).
func refuseJoins(thread string, joins []Join) error {
	if len(joins) == 0 {
		return nil
	}
	return fmt.Errorf("%w: thread %q: the in-memory saver has no transaction another store's work could join (nothing was written)", ErrNotJoinable, thread)
}

func validateTaskWrites(tasks []TaskWrites) error {
	var raisedBy map[string]string // interrupt ID → task
	for _, tw := range tasks {
		if tw.TaskID == "" {
			return fmt.Errorf("%w: pending write with empty task ID", ErrInvalid)
		}
		if !utf8.ValidString(tw.TaskID) || !utf8.ValidString(tw.Node) || !utf8.ValidString(tw.Path) {
			return fmt.Errorf("%w: task %q: its ID, node or path is not valid UTF-8", ErrInvalid, tw.TaskID)
		}
		for _, w := range tw.Writes {
			if w.Channel == "" {
				return fmt.Errorf("%w: task %q: write with empty channel", ErrInvalid, tw.TaskID)
			}
			if !utf8.ValidString(w.Channel) {
				return fmt.Errorf("%w: task %q: channel %q is not valid UTF-8", ErrInvalid, tw.TaskID, w.Channel)
			}
			var err error
			if w.Channel != ChannelInterrupt {
				err = checkWrite(w.Channel, w.Value)
			} else {
				if raisedBy == nil {
					raisedBy = map[string]string{}
				}
				err = interruptIDs(raisedBy, tw.TaskID, w.Value) // decodes it strictly
			}
			if err != nil {
				return fmt.Errorf("%w: task %q channel %q: %w", ErrInvalid, tw.TaskID, w.Channel, err)
			}
		}
	}
	return nil
}

// CheckInterruptIDs returns an error wrapping ErrInvalid when the
// interrupt writes of tasks raise an interrupt ID that existing (the
// interrupt IDs already saved on the checkpoint, by task) holds for
// another task: interrupt IDs are unique within a checkpoint. A task's
// new interrupt write replaces its old one, so its own IDs do not count.
// Savers call it in PutWrites and Put with what they hold.
func CheckInterruptIDs(existing map[string]string, tasks []TaskWrites) error {
	if len(existing) == 0 {
		return nil
	}
	for _, tw := range tasks {
		for _, w := range tw.Writes {
			if w.Channel != ChannelInterrupt {
				continue
			}
			list, err := DecodeInterrupts(w.Value)
			if err != nil {
				return fmt.Errorf("%w: task %q channel %q: %w", ErrInvalid, tw.TaskID, w.Channel, err)
			}
			for _, in := range list {
				if other, dup := existing[in.ID]; dup && other != tw.TaskID {
					return fmt.Errorf("%w: task %q: interrupt %q is one task %q raised on this checkpoint already", ErrInvalid, tw.TaskID, in.ID, other)
				}
			}
		}
	}
	return nil
}

// HasInterruptWrite reports whether tasks hold an __interrupt__ write
// (for which a saver calls CheckInterruptIDs).
func HasInterruptWrite(tasks []TaskWrites) bool {
	for _, tw := range tasks {
		for _, w := range tw.Writes {
			if w.Channel == ChannelInterrupt {
				return true
			}
		}
	}
	return false
}

// Put implements Saver: a chain of one checkpoint. It returns what
// PutChain returns.
func (s *MemorySaver) Put(ctx context.Context, req PutRequest) error {
	return s.PutChain(ctx, []PutRequest{req})
}

// PutChain implements ChainPutter: reqs are checked as a chain, the first
// against the thread as Put would, and then all applied under one lock.
// The others cannot fail once the first passes: each is the child of the
// head the one before made, its ID sorts after every existing one, and the
// lease is the chain's owner's. It returns an error wrapping ErrInvalid
// when reqs are not a valid chain (ValidateChain), an error matching
// ErrNotJoinable when one has Joins (the MemorySaver is no Joiner), ctx's
// error when ctx is done, a *BusyError when another owner holds the lease, and a
// *ConflictError when the first parent is not the head (or a fork's parent
// does not exist), the ID is taken, or a fork's ID does not sort after the
// head. Nothing is stored on any error.
func (s *MemorySaver) PutChain(ctx context.Context, reqs []PutRequest) error {
	if err := ValidateChain(reqs); err != nil {
		return err
	}
	for i := range reqs {
		if err := refuseJoins(reqs[i].Thread, reqs[i].Joins); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if err := s.checkPut(&reqs[0], now); err != nil {
		return err
	}
	for i := range reqs {
		s.applyPut(&reqs[i], now)
	}
	return nil
}

// checkPut applies Put's rules (lease, parent is the head or a fork's
// parent exists, the ID is new and could become the head) to a valid
// request; the caller holds s.mu.
func (s *MemorySaver) checkPut(req *PutRequest, now time.Time) error {
	t := s.threads[threadKey{req.Thread, req.NS}]
	head := ""
	if t != nil {
		head = t.head
	}
	if lt := s.leaseOf(req.Thread, false); lt == nil && req.Lease.Held {
		// The run held a lease on a thread that is gone (deleted).
		return &ConflictError{Thread: req.Thread, NS: req.NS, Expected: req.Checkpoint.ParentID, Head: head}
	}
	if err := s.checkLease(s.leaseOf(req.Thread, false), req.Thread, req.NS, req.Lease, now); err != nil {
		return err
	}
	cp := &req.Checkpoint
	conflict := func() error {
		return &ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: head}
	}
	if req.Fork {
		if cp.ParentID != "" && (t == nil || t.checkpoints[cp.ParentID] == nil) {
			return conflict()
		}
		if cp.ID <= head { // it could never be the head (the latest checkpoint)
			return conflict()
		}
	} else if head != cp.ParentID {
		return conflict()
	}
	if t != nil && t.checkpoints[cp.ID] != nil {
		return conflict()
	}
	if t != nil && cp.ParentID != "" {
		parent := t.checkpoints[cp.ParentID]
		if parent != nil && cp.Metadata.Step <= parent.cp.Metadata.Step {
			return fmt.Errorf("%w: checkpoint %q: step %d does not follow its parent %q's step %d", ErrInvalid, cp.ID, cp.Metadata.Step, cp.ParentID, parent.cp.Metadata.Step)
		}
		if parent != nil && HasInterruptWrite(req.ParentWrites) {
			if err := CheckInterruptIDs(memInterruptIDs(parent.writes), req.ParentWrites); err != nil {
				return fmt.Errorf("checkpoint %q: parent %q: %w", cp.ID, cp.ParentID, err)
			}
		}
	}
	return nil
}

// memInterruptIDs returns the interrupt IDs the writes raise, by task.
func memInterruptIDs(writes []memWrite) map[string]string {
	ids := map[string]string{}
	for _, w := range writes {
		if w.Channel != ChannelInterrupt {
			continue
		}
		list, _ := DecodeInterrupts(w.Value) // checked when saved
		for _, in := range list {
			ids[in.ID] = w.TaskID
		}
	}
	return ids
}

// applyPut stores a request that passed checkPut; the caller holds s.mu.
func (s *MemorySaver) applyPut(req *PutRequest, now time.Time) {
	t := s.thread(threadKey{req.Thread, req.NS})
	cp := req.Checkpoint
	for ch, blobs := range cp.Channels {
		b := blobs[0]
		b.Data = bytes.Clone(b.Data)
		t.blobs[blobKey{ch, cp.ID}] = b
	}
	stored := cp
	stored.Channels = nil
	stored.Versions = maps.Clone(cp.Versions)
	stored.Metadata.Parents = cloneNonEmpty(cp.Metadata.Parents)
	stored.Metadata.Extra = storedExtra(cp.Metadata) // as SQLite reads it back
	if stored.CreatedAt.IsZero() {
		stored.CreatedAt = now
	}
	mc := &memCheckpoint{cp: stored}
	t.checkpoints[cp.ID] = mc
	i, _ := slices.BinarySearch(t.ids, cp.ID)
	t.ids = slices.Insert(t.ids, i, cp.ID)
	if p := t.checkpoints[cp.ParentID]; p != nil {
		s.addWrites(p, req.ParentWrites, now)
	}
	s.addWrites(mc, req.Writes, now)
	t.head = cp.ID
	t.updated = now
	lt := s.leaseOf(req.Thread, true)
	lt.updated = now
	takeLease(lt, req.Lease, now, req.Release, false)
}

func (s *MemorySaver) addWrites(c *memCheckpoint, tasks []TaskWrites, now time.Time) {
	n, size := 0, 0
	for _, tw := range tasks {
		for _, w := range tw.Writes {
			n++
			size += len(w.Value)
		}
	}
	if n == 0 {
		return
	}
	c.writes = slices.Grow(c.writes, n)
	// The values are copied (the caller may reuse its slices) into one
	// array: they belong to c and go when it goes. Each is capped so that
	// an append to one cannot reach the next.
	arena := make([]byte, 0, size)
	for _, tw := range tasks {
		for pos, w := range tw.Writes {
			idx := WriteIndex(w.Channel, pos)
			var value json.RawMessage
			if w.Value != nil {
				start := len(arena)
				arena = append(arena, w.Value...)
				value = arena[start:len(arena):len(arena)]
			}
			pw := PendingWrite{TaskID: tw.TaskID, Node: tw.Node, Path: tw.Path, Channel: w.Channel, Value: value}
			found := -1
			for i, old := range c.writes {
				if old.TaskID == tw.TaskID && old.idx == idx {
					found = i
					break
				}
			}
			switch {
			case found < 0:
				s.seq++
				c.writes = append(c.writes, memWrite{PendingWrite: pw, idx: idx, at: now, seq: s.seq})
			case IsSpecial(w.Channel):
				// A write saved again keeps its time and place, so that
				// paging through PendingInterrupts never repeats it.
				old := c.writes[found]
				c.writes[found] = memWrite{PendingWrite: pw, idx: idx, at: old.at, seq: old.seq}
			}
		}
	}
	order := func(a, b memWrite) int {
		if c := strings.Compare(a.TaskID, b.TaskID); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	}
	if !slices.IsSortedFunc(c.writes, order) {
		slices.SortStableFunc(c.writes, order)
	}
}

// cloneExtra copies stored caller metadata for a reader, nil when empty.
func cloneExtra(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

// cloneNonEmpty copies m, returning nil for an empty map.
func cloneNonEmpty[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// PutWrites implements Saver. It returns an error wrapping ErrInvalid for
// a request ValidateWrites rejects, ctx's error when ctx is done, a
// *ConflictError when req.Ref.ID is not the head, and a *BusyError when
// another owner holds the lease, and an error matching ErrNotJoinable
// for a request with Joins (the MemorySaver is no Joiner). Nothing is
// stored on any error.
func (s *MemorySaver) PutWrites(ctx context.Context, req WritesRequest) error {
	if err := ValidateWrites(&req); err != nil {
		return err
	}
	if err := refuseJoins(req.Ref.Thread, req.Joins); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[threadKey{req.Ref.Thread, req.Ref.NS}]
	if t == nil || t.head != req.Ref.ID {
		head := ""
		if t != nil {
			head = t.head
		}
		return &ConflictError{Thread: req.Ref.Thread, NS: req.Ref.NS, Expected: req.Ref.ID, Head: head}
	}
	now := s.now()
	if err := s.checkLease(s.leaseOf(req.Ref.Thread, false), req.Ref.Thread, req.Ref.NS, req.Lease, now); err != nil {
		return err
	}
	head := t.checkpoints[t.head]
	if HasInterruptWrite(req.Tasks) {
		if err := CheckInterruptIDs(memInterruptIDs(head.writes), req.Tasks); err != nil {
			return fmt.Errorf("%s: %w", req.Ref, err)
		}
	}
	s.addWrites(head, req.Tasks, now)
	t.updated = now
	lt := s.leaseOf(req.Ref.Thread, true)
	lt.updated = now
	takeLease(lt, req.Lease, now, req.Release, false)
	return nil
}

// Claim implements Saver. It returns an error wrapping ErrInvalid for an
// empty thread or owner, ctx's error when ctx is done, a *ConflictError
// when ref.ID is not the head, and a *BusyError when another owner holds
// the lease (or, with lease.Held, when owner no longer holds it).
func (s *MemorySaver) Claim(ctx context.Context, ref Ref, lease Lease) error {
	if err := validThread(ref.Thread); err != nil {
		return err
	}
	if lease.Held && lease.Owner == "" {
		return fmt.Errorf("%w: empty lease owner", ErrInvalid) // as the SQLite saver
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := threadKey{ref.Thread, ref.NS}
	t := s.threads[key]
	head := ""
	if t != nil {
		head = t.head
	}
	if head != ref.ID {
		return &ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: head}
	}
	now := s.now()
	lt := s.leaseOf(ref.Thread, false)
	if lease.Held && (lt == nil || lt.leaseOwner != lease.Owner) {
		if lt == nil {
			return &BusyError{Thread: ref.Thread, NS: ref.NS}
		}
		return lt.busy(ref.Thread, ref.NS, lease)
	}
	if err := s.checkLease(lt, ref.Thread, ref.NS, lease, now); err != nil {
		return err
	}
	if t == nil {
		s.thread(key) // a claimed thread (or namespace) with no checkpoint yet
	}
	takeLease(s.leaseOf(ref.Thread, true), lease, now, false, true)
	return nil
}

// Release implements Saver: it drops the thread's lease (the one every
// namespace shares) if owner holds it; ns is not needed to find it. It
// fails only with ctx's error when ctx is done.
func (s *MemorySaver) Release(ctx context.Context, thread, ns, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lt := s.leaseOf(thread, false)
	if lt == nil || lt.leaseOwner != owner {
		return nil
	}
	lt.leaseOwner, lt.leaseRunner, lt.leaseUntil = "", "", time.Time{}
	s.dropIfEmpty(threadKey{thread, ""}, lt)
	return nil
}

// Lease implements LeaseInspector: the thread's lease, which every
// namespace shares (LeaseInfo.NS is ns as asked). It returns an error
// wrapping ErrInvalid for an empty thread, ctx's error when ctx is done,
// and one matching ErrNotFound when the saver holds nothing of the
// thread.
func (s *MemorySaver) Lease(ctx context.Context, thread, ns string) (LeaseInfo, error) {
	if err := validThread(thread); err != nil {
		return LeaseInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return LeaseInfo{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t := s.leaseOf(thread, false)
	if t == nil {
		return LeaseInfo{}, fmt.Errorf("%w: thread %q", ErrNotFound, thread)
	}
	return LeaseInfo{Thread: thread, NS: ns, Owner: t.leaseOwner, Runner: t.leaseRunner, Epoch: t.leaseEpoch, Until: t.leaseUntil}, nil
}

// DeleteThread implements Saver. It returns an error wrapping ErrInvalid
// for an empty thread and ctx's error when ctx is done.
func (s *MemorySaver) DeleteThread(ctx context.Context, thread string) error {
	if err := validThread(thread); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.threads {
		if k.thread == thread {
			delete(s.threads, k)
		}
	}
	delete(s.queue, thread)
	return nil
}

// PutTopology implements TopologyStore. It returns what TopologyStore
// says, and ctx's error when ctx is done.
func (s *MemorySaver) PutTopology(ctx context.Context, t Topology) error {
	if err := ValidateTopology(&t); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	old, ok := s.topologies[t.Fingerprint]
	switch {
	case ok && old.Name != t.Name:
		return fmt.Errorf("%w: topology %s is stored as graph %q, not %q", ErrInvalid, t.Fingerprint, old.Name, t.Name)
	case ok:
		old.StoredAt = now
	default:
		old = Topology{Fingerprint: t.Fingerprint, Name: t.Name, Data: bytes.Clone(t.Data), CreatedAt: now, StoredAt: now}
	}
	s.topologies[t.Fingerprint] = old
	s.latest[t.Name] = t.Fingerprint
	return nil
}

// Topology implements TopologyStore. It returns what TopologyStore says,
// and ctx's error when ctx is done.
func (s *MemorySaver) Topology(ctx context.Context, fingerprint string) (Topology, error) {
	if !ValidFingerprint(fingerprint) {
		return Topology{}, fmt.Errorf("%w: %q is not a topology fingerprint", ErrInvalid, fingerprint)
	}
	if err := ctx.Err(); err != nil {
		return Topology{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.topologies[fingerprint]
	if !ok {
		return Topology{}, fmt.Errorf("%w: no topology %s", ErrNotFound, fingerprint)
	}
	t.Data = bytes.Clone(t.Data)
	return t, nil
}

// LatestTopology implements TopologyStore. It returns what TopologyStore
// says, and ctx's error when ctx is done.
func (s *MemorySaver) LatestTopology(ctx context.Context, name string) (Topology, error) {
	if name == "" {
		return Topology{}, fmt.Errorf("%w: empty graph name", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return Topology{}, err
	}
	s.mu.RLock()
	fp, ok := s.latest[name]
	s.mu.RUnlock()
	if !ok {
		return Topology{}, fmt.Errorf("%w: no topology of graph %q", ErrNotFound, name)
	}
	return s.Topology(ctx, fp)
}

// Threads implements ThreadLister. It fails only with ctx's error when ctx
// is done.
func (s *MemorySaver) Threads(ctx context.Context, offset, limit int) ([]ThreadInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []ThreadInfo
	for k, t := range s.threads {
		if k.ns != "" || t.head == "" {
			continue
		}
		c := t.checkpoints[t.head]
		out = append(out, ThreadInfo{Thread: k.thread, NS: k.ns, Head: t.head, Step: c.cp.Metadata.Step, Source: c.cp.Metadata.Source, UpdatedAt: t.updated})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].UpdatedAt.Equal(out[j].UpdatedAt) {
			return out[i].UpdatedAt.After(out[j].UpdatedAt)
		}
		return out[i].Thread < out[j].Thread
	})
	return page(out, offset, limit), nil
}

func page[T any](xs []T, offset, limit int) []T {
	if offset > len(xs) {
		return nil
	}
	xs = xs[max(offset, 0):]
	if limit > 0 && len(xs) > limit {
		xs = xs[:limit]
	}
	return xs
}

// PendingInterrupts implements InterruptLister. The cursor is the position
// key (first save of the interrupt write, thread, interrupt ID) of the
// last item returned. It returns an error wrapping ErrInvalid for a
// malformed cursor.
func (s *MemorySaver) PendingInterrupts(ctx context.Context, q InterruptQuery) ([]PendingInterrupt, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if !interruptCursorValid(q.After) {
		return nil, "", fmt.Errorf("%w: malformed interrupt cursor %q", ErrInvalid, q.After)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	s.mu.RLock()
	type keyed struct {
		key string
		pi  PendingInterrupt
	}
	var all []keyed
	for k, t := range s.threads {
		if k.ns != "" || t.head == "" {
			continue
		}
		c := t.checkpoints[t.head]
		var writes []PendingWrite
		at := map[string]memWrite{}
		for _, w := range c.writes {
			writes = append(writes, w.PendingWrite)
			if w.Channel == ChannelInterrupt {
				at[w.TaskID] = w
			}
		}
		pis, err := PendingInterrupts(k.thread, t.head, writes)
		if err != nil {
			s.mu.RUnlock()
			return nil, "", err // unreachable: every write was checked when saved
		}
		for _, pi := range pis {
			w := at[pi.TaskID]
			pi.Thread, pi.NS, pi.CheckpointID, pi.CreatedAt = k.thread, k.ns, t.head, w.at
			key := fmt.Sprintf("%020d|%s|%s", w.seq, k.thread, pi.InterruptID)
			all = append(all, keyed{key, pi})
		}
	}
	s.mu.RUnlock()
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	var out []PendingInterrupt
	next := ""
	for _, it := range all {
		if q.After != "" && it.key <= q.After {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, it.pi)
		next = it.key
	}
	if len(out) < limit || (len(all) > 0 && all[len(all)-1].key == next) {
		next = ""
	}
	return out, next, nil
}

// Prune implements Pruner. It returns an error wrapping ErrInvalid for an
// empty thread or keep < 1, ctx's error when ctx is done, and a
// *CorruptError (deleting nothing) when a kept checkpoint's blob chain is
// broken.
func (s *MemorySaver) Prune(ctx context.Context, thread, ns string, keep int) (int, error) {
	if err := validThread(thread); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if keep < 1 {
		return 0, fmt.Errorf("%w: prune must keep at least 1 checkpoint, got %d", ErrInvalid, keep)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[threadKey{thread, ns}]
	if t == nil {
		return 0, nil
	}
	hasChild := map[string]bool{}
	for _, c := range t.checkpoints {
		hasChild[c.cp.ParentID] = true
	}
	kept := map[string]bool{}
	if t.head != "" { // a thread that is only claimed has no head yet
		kept[t.head] = true
	}
	for i := len(t.ids) - 1; i >= 0 && len(t.ids)-i <= keep; i-- {
		kept[t.ids[i]] = true
	}
	for id, c := range t.checkpoints {
		if len(c.writes) > 0 && !hasChild[id] {
			kept[id] = true // uncommitted pending writes or interrupts
		}
	}
	needed := map[blobKey]bool{}
	for id := range kept {
		for ch, v := range t.checkpoints[id].cp.Versions {
			chain, err := memChain(t, ch, v, "")
			if err != nil {
				return 0, &CorruptError{Thread: thread, Checkpoint: id, What: "channel " + ch, Err: err}
			}
			for _, b := range chain {
				needed[blobKey{ch, b.Version}] = true
			}
		}
	}
	deleted := 0
	var ids []string
	gone := map[string]bool{}
	for _, id := range t.ids {
		if kept[id] {
			ids = append(ids, id)
			continue
		}
		delete(t.checkpoints, id)
		gone[id] = true
		deleted++
	}
	t.ids = ids
	for k := range t.blobs {
		if !needed[k] {
			delete(t.blobs, k)
		}
	}
	// The namespaces of subgraphs run by tasks of deleted checkpoints go
	// with them (see Pruner).
	for k, nt := range s.threads {
		if k.thread != thread || !NestedIn(k.ns, ns) || len(nt.ids) == 0 {
			continue
		}
		if gone[nt.checkpoints[nt.ids[0]].cp.Metadata.Parents[ns]] {
			deleted += len(nt.ids)
			delete(s.threads, k)
		}
	}
	return deleted, nil
}

// interruptCursorValid reports whether a cursor has the memory saver's shape.
func interruptCursorValid(c string) bool {
	if c == "" {
		return true
	}
	n, _, ok := strings.Cut(c, "|")
	if !ok {
		return false
	}
	_, err := strconv.ParseInt(n, 10, 64)
	return err == nil
}
