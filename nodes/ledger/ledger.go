package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DefaultRetention is how long a record is kept when Options.Retention is
// zero: Stripe's 24 hours.
const DefaultRetention = 24 * time.Hour

// Sentinel errors, matched with errors.Is.
var (
	// ErrKeyReuse: the key is recorded for another tool or other arguments.
	// Matches *KeyReuseError (the analog of Stripe's idempotency_error).
	ErrKeyReuse = errors.New("ledger: idempotency key reused with different arguments")
	// ErrInProgress: another holder runs the operation now. Matches
	// *InProgressError (the analog of HTTP 409).
	ErrInProgress = errors.New("ledger: operation in progress")
	// ErrOutcomeUnknown: an intent lost its holder before its outcome was
	// recorded. Matches *OutcomeUnknownError.
	ErrOutcomeUnknown = errors.New("ledger: outcome of an earlier attempt is unknown")
	// ErrNotHeld: Complete or Release by a caller that does not hold the
	// intent (it was never begun, was completed, or was taken over).
	ErrNotHeld = errors.New("ledger: intent not held by this owner")
	// ErrNotFound: no record under the key.
	ErrNotFound = errors.New("ledger: no such key")
	// ErrDuplicateMessage: the message ID was claimed before.
	ErrDuplicateMessage = errors.New("ledger: message already claimed")
	// ErrInvalid: an empty or oversized (MaxIDBytes) key, owner or message
	// ID, or a bad option.
	ErrInvalid = errors.New("ledger: invalid argument")
	// ErrSchemaVersion: the database holds ledger tables of a newer
	// version than this code knows.
	ErrSchemaVersion = errors.New("ledger: unsupported schema version")
)

// State is the state of a record.
type State string

// Record states.
const (
	// StatePending: the intent is recorded and the outcome is not.
	StatePending State = "pending"
	// StateDone: the outcome is recorded.
	StateDone State = "done"
)

// Intent is what Begin records before a call.
type Intent struct {
	Key      string // the idempotency key (required)
	Tool     string // the tool's name
	ArgsHash string // the fingerprint of the arguments (approval.ArgsHash)
	Owner    string // who runs the call (required; unique per execution)
	// Lease is how long the intent is held without an outcome before it
	// counts as abandoned (default one minute).
	Lease time.Duration
	// TakeOver lets Begin take over a pending intent whose lease expired
	// (instead of returning *OutcomeUnknownError). Set it only after a
	// reconcile found that the earlier attempt had no effect.
	TakeOver bool
}

// Failure is a stored permanent failure. Message must already be redacted.
type Failure struct {
	Class   string `json:"class"`            // the retry class ("permanent")
	Message string `json:"message"`          // redacted error text
	Status  int    `json:"status,omitempty"` // HTTP status, when there was one
}

// Outcome is what Complete stores: a result or a failure.
type Outcome struct {
	Result  json.RawMessage `json:"result,omitempty"`
	Failure *Failure        `json:"failure,omitempty"`
}

// Entry is a stored record.
type Entry struct {
	Key         string
	Tool        string
	ArgsHash    string
	State       State
	Outcome     Outcome // set when State is StateDone
	Owner       string
	LeaseUntil  time.Time
	CreatedAt   time.Time
	CompletedAt time.Time // zero while pending
}

// Ledger records intents and outcomes of side-effecting calls. Every method
// is safe for concurrent use.
type Ledger interface {
	// Begin records the intent, or reports what is already recorded under
	// the key (see the package doc). started is true when the caller now
	// holds the intent and must call Complete or Release. Errors:
	// *KeyReuseError, *InProgressError, *OutcomeUnknownError, ErrInvalid,
	// or a storage error.
	Begin(ctx context.Context, in Intent) (e Entry, started bool, err error)
	// Complete stores the outcome of an intent held by owner. It returns
	// ErrNotHeld when owner does not hold it.
	Complete(ctx context.Context, key, owner string, o Outcome) error
	// Release drops a pending intent held by owner (a transient failure:
	// the next Begin starts afresh). It returns ErrNotHeld when owner does
	// not hold it.
	Release(ctx context.Context, key, owner string) error
	// Resolve records the outcome of a pending intent whatever its holder:
	// what a reconcile found downstream. It returns ErrNotFound when there
	// is no record, and ErrNotHeld when the record is already done.
	Resolve(ctx context.Context, key string, o Outcome) error
	// Forget deletes the record under key in any state, so that the
	// operation may run again. Forgetting a missing key is not an error.
	Forget(ctx context.Context, key string) error
	// Get returns the record under key, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Prune deletes done records and message claims older than the
	// retention and returns how many it deleted. Pending records stay.
	Prune(ctx context.Context) (int, error)
	// ClaimMessage claims a message ID once. It returns ErrDuplicateMessage
	// when the ID was claimed within the retention, and ErrInvalid for an
	// empty ID or one over MaxIDBytes.
	ClaimMessage(ctx context.Context, id string) error
}

// Options configure a ledger. The zero value is usable.
type Options struct {
	// Retention is how long records and message claims are kept (default
	// DefaultRetention).
	Retention time.Duration
	// Now reads the time (default time.Now).
	Now func() time.Time
}

func (o Options) resolved() (Options, error) {
	if o.Retention < 0 {
		return o, fmt.Errorf("%w: negative retention %v", ErrInvalid, o.Retention)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

const defaultLease = time.Minute

// KeyReuseError reports a key recorded for a different operation. It
// matches ErrKeyReuse.
type KeyReuseError struct {
	Key  string
	Tool string // the tool of the new call
	// StoredTool is the tool of the recorded operation.
	StoredTool string
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *KeyReuseError) Error() string {
	return fmt.Sprintf("ledger: idempotency key %s of tool %q is recorded for a different call (tool %q or other arguments); the call was not run", short(e.Key), e.Tool, e.StoredTool)
}

// Is makes errors.Is(err, ErrKeyReuse) true.
func (e *KeyReuseError) Is(target error) bool { return target == ErrKeyReuse }

// InProgressError reports a concurrent duplicate. It matches ErrInProgress.
type InProgressError struct {
	Key        string
	Tool       string
	LeaseUntil time.Time // when the holder's lease ends
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("ledger: call of tool %q with idempotency key %s is in progress elsewhere (lease until %s); retry later", e.Tool, short(e.Key), e.LeaseUntil.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// OutcomeUnknownError reports an intent whose holder vanished before
// recording the outcome. It matches ErrOutcomeUnknown.
type OutcomeUnknownError struct {
	Key   string
	Tool  string
	Since time.Time // when the intent was recorded
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("ledger: an earlier call of tool %q with idempotency key %s (begun %s) has no recorded outcome; it is not run again until it is reconciled (Resolve, Forget, or a reconcile hook)",
		e.Tool, short(e.Key), e.Since.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

func short(key string) string {
	if len(key) > 16 {
		return key[:16] + "…"
	}
	return key
}

// MaxIDBytes caps idempotency keys, owners and message IDs. Longer ones
// are refused with ErrInvalid before anything is stored (the keys package
// nodes derives are 64 bytes).
const MaxIDBytes = 1024

// checkID refuses an empty or oversized identifier.
func checkID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: %s of %d bytes (at most %d)", ErrInvalid, what, len(id), MaxIDBytes)
	}
	return nil
}

func checkIntent(in *Intent) error {
	if err := checkID("idempotency key", in.Key); err != nil {
		return err
	}
	if err := checkID("owner", in.Owner); err != nil {
		return err
	}
	switch {
	case in.Lease < 0:
		return fmt.Errorf("%w: negative lease %v", ErrInvalid, in.Lease)
	}
	if in.Lease == 0 {
		in.Lease = defaultLease
	}
	return nil
}

// decide applies the rules of Begin to an existing record. It returns
// restart when the record must be replaced by a fresh intent.
func decide(e Entry, in Intent, now time.Time, retention time.Duration) (restart bool, err error) {
	expired := !now.Before(e.CreatedAt.Add(retention))
	if e.State == StateDone && expired {
		return true, nil
	}
	if e.Tool != in.Tool || e.ArgsHash != in.ArgsHash {
		return false, &KeyReuseError{Key: in.Key, Tool: in.Tool, StoredTool: e.Tool}
	}
	if e.State == StateDone {
		return false, nil
	}
	if e.Owner == in.Owner {
		// The holder begins again (its earlier Begin failed in a way that
		// may have come after the commit): it still holds the intent.
		return true, nil
	}
	if now.Before(e.LeaseUntil) {
		return false, &InProgressError{Key: in.Key, Tool: in.Tool, LeaseUntil: e.LeaseUntil}
	}
	if in.TakeOver {
		return true, nil
	}
	return false, &OutcomeUnknownError{Key: in.Key, Tool: in.Tool, Since: e.CreatedAt}
}
