package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DueWork is implemented by savers that record, next to each thread,
// whether it has work due for a pool of workers (package workers): any
// number of workers, in any number of processes sharing the saver's
// database, claim due threads, run them and settle them, with no
// coordinator. Only root namespaces ("") have due work.
//
// A thread is due when no live lease holds it and one of these holds:
//
//   - its lease expired without being released: the runner holding it
//     died, or lost its database, in the middle of a run (DueExpired);
//   - it is marked due at or before now (DueMarked): a claim that was
//     never settled (its worker died, or handed the thread back on
//     shutdown), a retry whose time has come, or input queued for it
//     (InputQueue);
//   - input queued for it waits behind a head that has moved since it
//     was parked there (DueParked): the interrupt it waited behind was
//     answered.
//
// A claim (ClaimDue, Hold) takes the thread's lease for the claim's owner
// as Claim would, whatever the head is (growing the epoch), marks the
// thread due now unless it is marked due already, and records the owner
// as the thread's claimer. So a claim that is never settled leaves the
// thread due once its lease is released or lapses, and another worker
// claims it then. A later claim replaces the claimer: only a Settle by the
// current claimer changes anything.
type DueWork interface {
	// ClaimDue claims due threads, at most one per owner in q.Owners,
	// those due the longest first, in one transaction (on a shared
	// database, threads another worker is claiming at the same moment
	// are skipped, not waited for). It returns them with how long until
	// the next thread the saver knows of falls due. It returns an error
	// wrapping ErrInvalid for an empty owner or a TTL that is not
	// positive, and the store's error when it fails (nothing claimed).
	ClaimDue(ctx context.Context, q DueQuery) (DueBatch, error)

	// Hold claims thread now, due or not, for lease (which must have an
	// owner and a positive TTL; TakeBack applies as for Claim), and
	// reports what was due before the claim (DueThread.Reason "" when
	// nothing was) and how much input is queued. It creates the thread's
	// record when it has none. It returns a *BusyError, claiming nothing,
	// when another owner holds a live lease on the thread, and an error
	// wrapping ErrInvalid for an empty thread or owner.
	Hold(ctx context.Context, thread string, lease Lease) (DueThread, error)

	// Settle records what a claim's work left: it drops the queued input
	// the claim's run applied (s.Drop), sets what is due next (s.Next),
	// and releases the claim's lease if the owner still holds it, in one
	// transaction. It returns an error matching ErrClaimLost, writing
	// nothing, when s.Owner is no longer the thread's claimer (another
	// claim replaced it), nil when the thread is gone (deleted), and an
	// error wrapping ErrInvalid for an empty thread or owner or a
	// negative wait.
	Settle(ctx context.Context, s Settlement) error
}

// InputQueue is implemented by savers that keep input queued for threads,
// to be applied one after the other, oldest first, by a pool of workers
// (package workers), each exactly once: the run that applies an input
// carries its Key as its run key (graph.RunKey), so a worker that finds
// the key on the thread's input checkpoints knows it was applied even when
// the worker that applied it died before it could Settle.
type InputQueue interface {
	// Enqueue appends in (its Thread, Key and Input) to the thread's
	// queue and marks the thread due now (unless it is marked due
	// already, or parked), in one transaction, creating the thread's
	// record when it has none. It returns the stored input (ID and
	// CreatedAt set) and true; when the thread's queue already holds an
	// input with the same Key, it returns that one and false, and adds
	// nothing. It returns an error wrapping ErrInvalid for an input that
	// ValidateQueuedInput refuses.
	Enqueue(ctx context.Context, in QueuedInput) (QueuedInput, bool, error)

	// Queued returns up to limit (0: all) inputs queued for thread,
	// oldest first. It returns an error wrapping ErrInvalid for an empty
	// thread or a negative limit, and a *CorruptError for a stored input
	// that does not read back as it was written.
	Queued(ctx context.Context, thread string, limit int) ([]QueuedInput, error)
}

// InputBatcher is implemented by savers that queue input for many
// threads in one transaction (the memory, SQLite and Postgres savers): a
// caller that feeds a pool of workers many threads at once (package
// workers' Pool.EnqueueAll) pays one commit, not one a thread, and the
// workers see all of the batch or none of it.
type InputBatcher interface {
	// EnqueueAll queues ins in one transaction, each as Enqueue does, in
	// the order given (a thread's inputs are numbered in that order): an
	// input whose key its thread's queue already holds, or holds from
	// earlier in ins, is not added again. It returns, in the order of ins,
	// each input as stored and whether it was added. On an error nothing
	// is queued: an error wrapping ErrInvalid for an input
	// ValidateQueuedInput refuses (naming its index), ctx's error, and the
	// store's error when it fails. A *CorruptError says that an input
	// already queued under a key does not read back; a saver that reads
	// the batch back in the transaction's own round trip (Postgres) has
	// queued the batch's new inputs then, one that reads it first
	// (memory, SQLite) has not. An empty ins queues nothing and returns
	// no error.
	EnqueueAll(ctx context.Context, ins []QueuedInput) ([]QueuedInput, []bool, error)
}

// ValidateQueuedInputs checks every input of a batch with
// ValidateQueuedInput and returns the first refusal, an error wrapping
// ErrInvalid that names the input's index. Savers share this rule
// through it.
func ValidateQueuedInputs(ins []QueuedInput) error {
	for i, in := range ins {
		if err := ValidateQueuedInput(in); err != nil {
			return fmt.Errorf("input %d of the batch: %w", i, err)
		}
	}
	return nil
}

// DueReason says why a thread was due when it was claimed.
type DueReason string

// The reasons a thread is due (see DueWork).
const (
	// DueExpired: the thread's lease expired without being released.
	DueExpired DueReason = "expired"
	// DueMarked: the thread was marked due: an unsettled claim, a retry
	// whose time has come, or queued input.
	DueMarked DueReason = "marked"
	// DueParked: queued input was parked behind a head that has moved
	// since.
	DueParked DueReason = "parked"
)

// DueQuery asks ClaimDue for due threads.
type DueQuery struct {
	// Owners are the lease owners of the claims, one per thread claimed
	// (each must be unique to its claim: a claim's owner is its token for
	// Settle); len(Owners) bounds the threads claimed.
	Owners []string
	// Runner is the runner the claims' leases name (Lease.Runner): the
	// graph runtime's Runnable that runs the claimed threads, so that its
	// runs take the claim's lease over (Lease.TakeBack).
	Runner string
	// TTL is how long each claim's lease lasts unless renewed or taken
	// over.
	TTL time.Duration
}

// DueBatch is what ClaimDue claimed.
type DueBatch struct {
	// Threads are the claimed threads, those due the longest first.
	Threads []DueThread
	// Next is how long, from the claim, until the next thread falls due
	// as far as the saver knows (a scheduled retry, the end of a live
	// lease); 0 when it knows of none. Input queued after the claim, and
	// threads due at once that did not fit the claim, are not counted.
	Next time.Duration
}

// DueThread is a claimed thread.
type DueThread struct {
	Thread string
	// Owner is the claim's lease owner and its token for Settle.
	Owner string
	// Epoch is the thread's lease epoch under the claim.
	Epoch uint64
	// Head is the thread's head checkpoint ("" when it has none).
	Head string
	// Reason is why the thread was due ("" for a Hold of a thread that
	// was not).
	Reason DueReason
	// Attempts is the count of failed attempts the last Settle recorded.
	Attempts int
	// Queued is how many inputs are queued for the thread.
	Queued int
}

// DueNext says what is due on a thread after a claim's work.
type DueNext int

// The outcomes a Settle records.
const (
	// DueKeep leaves the thread as the claim marked it: due at once, for
	// the next claim once the lease is free (the claim's work was cut
	// short, as on shutdown: another worker takes it over at once).
	DueKeep DueNext = iota
	// DueNone: nothing more is due, unless input is queued: then the
	// thread is due at once.
	DueNone
	// DueLater: the thread is due again after Settlement.After (a retry).
	DueLater
	// DuePark: input queued for the thread waits until its head moves
	// from Settlement.Park (the thread waits on an interrupt); with no
	// input queued, as DueNone.
	DuePark
)

// String names the outcome: "keep", "none", "later" or "park".
func (n DueNext) String() string {
	switch n {
	case DueKeep:
		return "keep"
	case DueNone:
		return "none"
	case DueLater:
		return "later"
	case DuePark:
		return "park"
	}
	return fmt.Sprintf("DueNext(%d)", int(n))
}

// Settlement is what a claim's work left of a thread.
type Settlement struct {
	Thread string
	// Owner is the claim's owner (DueThread.Owner).
	Owner string
	// Drop is the ID of a queued input the claim's run applied, deleted
	// from the queue (0: none). Dropping an input that is not queued (any
	// more) is not an error.
	Drop int64
	// Next is what is due next.
	Next DueNext
	// After is the wait before the thread is due again (DueLater).
	After time.Duration
	// Attempts is the count of failed attempts to record (0 resets it).
	Attempts int
	// Park is the head that queued input waits behind (DuePark); "" is
	// a thread with no checkpoint, whose queue is due once it has one.
	Park string
}

// QueuedInput is input queued for a thread (InputQueue).
type QueuedInput struct {
	// ID orders the inputs of the saver: a later input has a larger ID.
	// Set by Enqueue; IDs are never reused.
	ID     int64
	Thread string
	// Key identifies the input within its thread: its run key
	// (graph.RunKey), 1 to MaxRunKeyBytes of UTF-8 without control
	// characters.
	Key string
	// Input is the input's JSON object, as the pool encoded it.
	Input json.RawMessage
	// CreatedAt is when Enqueue stored it, on the saver's clock.
	CreatedAt time.Time
}

// ErrClaimLost is matched by the error of a Settle whose owner is no
// longer the thread's claimer: another worker claimed the thread since,
// and its settle counts instead.
var ErrClaimLost = errors.New("checkpoint: the claim on the thread passed to another worker")

// ValidateQueuedInput checks what Enqueue stores: a thread, a key of 1 to
// MaxRunKeyBytes of UTF-8 without control characters, and a JSON object.
// It returns an error wrapping ErrInvalid that says which is wrong.
// Savers share this rule through it.
func ValidateQueuedInput(in QueuedInput) error {
	switch {
	case in.Thread == "":
		return fmt.Errorf("%w: queued input: empty thread ID", ErrInvalid)
	case in.Key == "" || len(in.Key) > MaxRunKeyBytes || !utf8.ValidString(in.Key) || strings.IndexFunc(in.Key, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: queued input for thread %q: its key is 1 to %d bytes of UTF-8 without control characters", ErrInvalid, in.Thread, MaxRunKeyBytes)
	}
	var obj map[string]json.RawMessage
	if !json.Valid(in.Input) || json.Unmarshal(in.Input, &obj) != nil || obj == nil {
		return fmt.Errorf("%w: queued input %q for thread %q: the input is not a JSON object", ErrInvalid, in.Key, in.Thread)
	}
	return nil
}

// ValidateDueQuery checks a DueQuery: at least one owner, none empty, and
// a positive TTL. It returns an error wrapping ErrInvalid.
func ValidateDueQuery(q DueQuery) error {
	if q.TTL <= 0 {
		return fmt.Errorf("%w: due query: lease TTL %v is not positive", ErrInvalid, q.TTL)
	}
	for _, o := range q.Owners {
		if o == "" {
			return fmt.Errorf("%w: due query: empty lease owner", ErrInvalid)
		}
	}
	return nil
}

// ValidateSettlement checks a Settlement: a thread, an owner, a known
// Next and no negative wait. It returns an error wrapping ErrInvalid.
func ValidateSettlement(s Settlement) error {
	switch {
	case s.Thread == "":
		return fmt.Errorf("%w: settle: empty thread ID", ErrInvalid)
	case s.Owner == "":
		return fmt.Errorf("%w: settle thread %q: empty claim owner", ErrInvalid, s.Thread)
	case s.Next < DueKeep || s.Next > DuePark:
		return fmt.Errorf("%w: settle thread %q: unknown outcome %v", ErrInvalid, s.Thread, s.Next)
	case s.After < 0:
		return fmt.Errorf("%w: settle thread %q: negative wait %v", ErrInvalid, s.Thread, s.After)
	case s.Attempts < 0:
		return fmt.Errorf("%w: settle thread %q: negative attempt count %d", ErrInvalid, s.Thread, s.Attempts)
	}
	return nil
}

// RunnerLeases is implemented by savers that find the threads leased
// under a runner name (the memory, SQLite and Postgres savers). A pool of
// workers (package workers) uses it when it starts, to take back at once
// the threads that an earlier process of its runner name (one that was
// killed, or is paused or cut off from the database) left leased, rather
// than wait out their leases.
type RunnerLeases interface {
	// LeasedBy returns the root threads whose lease names runner
	// (Lease.Runner) and is live at the saver's now, with their owner,
	// epoch and end, in thread order, at most limit of them (0: all). It
	// returns an error wrapping ErrInvalid for an empty runner or a
	// negative limit, ctx's error, and the store's error when it fails.
	LeasedBy(ctx context.Context, runner string, limit int) ([]LeaseInfo, error)
}

// ValidateLeasedBy checks the arguments of RunnerLeases.LeasedBy: a
// runner and a limit that is not negative. It returns an error wrapping
// ErrInvalid. Savers share this rule through it.
func ValidateLeasedBy(runner string, limit int) error {
	switch {
	case runner == "":
		return fmt.Errorf("%w: leases of a runner: empty runner name", ErrInvalid)
	case limit < 0:
		return fmt.Errorf("%w: leases of runner %q: negative limit %d", ErrInvalid, runner, limit)
	}
	return nil
}
