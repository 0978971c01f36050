package approval

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Typed errors below match them with errors.Is; never
// compare messages.
var (
	// ErrNotFound: no pending approval and no decision has this ID.
	ErrNotFound = errors.New("approval: not found")
	// ErrAlreadyDecided matches every *AlreadyDecidedError: the approval
	// has a decision, and decisions never change.
	ErrAlreadyDecided = errors.New("approval: already decided")
	// ErrExpired: the request expired (now >= ExpiresAt) before a human
	// decided it. An *AlreadyDecidedError whose winner is an expiry matches
	// it too.
	ErrExpired = errors.New("approval: expired")
	// ErrInvalidDecision: an unknown outcome (outcomes are exact, lower
	// case: "approved", "rejected", "edited"), an empty or reserved
	// reviewer, an oversized note, or arguments on a decision that takes
	// none.
	ErrInvalidDecision = errors.New("approval: invalid decision")
	// ErrInvalidArgs: edited arguments that are not valid JSON, fail the
	// schema stored in the request, exceed MaxArgsBytes, or name another
	// tool, and an edit of a request that cannot be edited (one of
	// KindOutcomeUnknown, or one without a schema); see Request.CheckEdit.
	ErrInvalidArgs = errors.New("approval: invalid edited arguments")
	// ErrInvalidRequest: a request that cannot be decided as is: wrong
	// type, no tool, an ArgsHash that does not match its arguments, an
	// unknown risk tier.
	ErrInvalidRequest = errors.New("approval: invalid request")
	// ErrInvalidExpiry: a request whose CreatedAt or ExpiresAt is zero, out
	// of range, not in order, or further apart than MaxTTL.
	ErrInvalidExpiry = errors.New("approval: invalid expiry")
	// ErrInvalidFilter: a malformed inbox filter or cursor.
	ErrInvalidFilter = errors.New("approval: invalid filter")
	// ErrNotApproved: an outcome recorded for an approval whose decision
	// does not let the call run.
	ErrNotApproved = errors.New("approval: not approved")
	// ErrArgsMismatch: the call that ran is not the call that was approved
	// (its arguments hash differs from the decision's).
	ErrArgsMismatch = errors.New("approval: executed arguments differ from approved arguments")
	// ErrOutcomeRecorded: a different outcome was already recorded for the
	// approval; outcomes, like decisions, are written once.
	ErrOutcomeRecorded = errors.New("approval: a different outcome is already recorded")
	// ErrChannel matches every *ChannelError: the confirmation channel
	// failed, so the turn must abort.
	ErrChannel = errors.New("approval: confirmation channel failed")
	// ErrSchemaVersion: the database holds approval tables of a newer
	// schema than this build knows, or a schema version no build writes
	// (see OpenSQLStore). Nothing was changed.
	ErrSchemaVersion = errors.New("approval: unsupported schema version")
	// ErrInvalidConfig: Rules, WorkerOptions, WaitOptions or an argument
	// of the same kind (a claim's lease) holds a value outside its range.
	// A zero value means the default; nothing else is ever replaced by it.
	ErrInvalidConfig = errors.New("approval: invalid configuration")
	// ErrCorrupt matches every *CorruptError: a stored decision, resume
	// record or outcome that only corruption can have written (it fails
	// its checksum, was copied from another approval, or does not decode
	// as the store writes it). Nothing was written on it.
	ErrCorrupt = errors.New("approval: stored row is corrupt")
	// ErrClosed: the store was closed (MemoryStore.Close, SQLStore.Close),
	// or the database under a SQLStore was closed by its owner (the
	// checkpoint saver's Close). Nothing was read or written.
	ErrClosed = errors.New("approval: store is closed")
)

// Error is a refused operation on one approval. It matches its Kind (one of
// the sentinels above). Its message names the approval ID and says what is
// wrong, never the arguments, note or context, which may hold data only the
// reviewer should see.
type Error struct {
	ID     string // the approval ID
	Kind   error  // the sentinel it matches
	Reason string // what is wrong
	Err    error  // the cause, if any (a *retry.PolicyError for WorkerOptions.Retry)
	// Problems lists, for edited arguments that fail the tool's schema
	// (ErrInvalidArgs), every problem at its path, in path order (at most
	// MaxArgsProblems); Reason names the first few.
	Problems []ArgsProblem
}

// ArgsProblem is one way edited arguments fail the tool's schema: where,
// as a JSON path ("$.amount", "$.items[2].sku"), and what is wrong there.
type ArgsProblem struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// MaxArgsProblems caps Error.Problems: a hostile edit (a million unknown
// fields) cannot make an unbounded report.
const MaxArgsProblems = 100

// reasonProblems is how many problems an Error's Reason names.
const reasonProblems = 3

// Error says what was refused and why, naming the approval.
func (e *Error) Error() string {
	s := e.Kind.Error()
	if e.ID != "" {
		s += " (approval " + quoteShort(e.ID) + ")"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is matches the error's Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

func newError(id string, kind error, format string, args ...any) *Error {
	return &Error{ID: id, Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// AlreadyDecidedError is what the loser of a race to decide learns: who won
// and what they decided. It matches ErrAlreadyDecided, and ErrExpired when
// the winner is the expiry sweeper.
type AlreadyDecidedError struct {
	ID     string
	Winner Decision
}

// Error names the approval and the winning outcome, reviewer and time.
func (e *AlreadyDecidedError) Error() string {
	return fmt.Sprintf("approval %s: already %s by %s at %s",
		quoteShort(e.ID), e.Winner.Outcome, quoteShort(e.Winner.Reviewer), e.Winner.DecidedAt.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrAlreadyDecided) true, and errors.Is(err,
// ErrExpired) when the winning decision is an expiry.
func (e *AlreadyDecidedError) Is(target error) bool {
	return target == ErrAlreadyDecided || (target == ErrExpired && e.Winner.Outcome == Expired)
}

// CorruptError reports a stored row of one approval that cannot be
// trusted: its checksum does not match its key and contents (it was
// damaged, or copied from another approval ID), or it holds what the store
// never writes (JSON with null, a duplicate or case-variant key, invalid
// UTF-8 or a lone surrogate escape; fields that disagree with each other).
// It matches ErrCorrupt and unwraps to the cause. The store wrote nothing
// on it; the row stays as it is for an operator to inspect, restore from a
// backup or delete.
type CorruptError struct {
	ID   string // the approval ID the row is stored under
	What string // which row or column: "decision", "request", "resume", "execution"
	Err  error  // what is wrong
}

// Error names the approval and the row, and says that the row is corrupt.
func (e *CorruptError) Error() string {
	s := "approval: stored " + e.What + " of approval " + quoteShort(e.ID) + " is corrupt"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + " (nothing was written; inspect the row, restore it from a backup, or delete it)"
}

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(id, what string, err error) *CorruptError {
	return &CorruptError{ID: id, What: what, Err: err}
}

// PanicError is a panic recovered from application code that the
// approval package called and that has no error of its own to fail with
// (In names it: the onPublish of a MemoryChannel). Value and Stack are the
// panic's.
type PanicError struct {
	ID    string // the approval concerned
	In    string // what panicked
	Value any
	Stack []byte
}

// Error names what panicked, the approval, and the panic's value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("approval: %s panicked (approval %s): %v", e.In, quoteShort(e.ID), e.Value)
}

// ChannelError reports a failure of the confirmation channel during Wait:
// subscribing, publishing or receiving. It matches ErrChannel and unwraps to
// the channel's error.
type ChannelError struct {
	ID  string // the approval ID
	Op  string // "subscribe", "publish" or "receive"
	Err error
}

// Error names the approval, the failed operation and the channel's error.
func (e *ChannelError) Error() string {
	return fmt.Sprintf("approval: confirmation channel failed to %s (approval %s): %v", e.Op, quoteShort(e.ID), e.Err)
}

// Unwrap returns the channel's error.
func (e *ChannelError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrChannel) true.
func (e *ChannelError) Is(target error) bool { return target == ErrChannel }

const maxQuoted = 80

// quoteShort quotes an ID or a name for a message, truncated so that hostile
// input (a megabyte, control characters) cannot flood logs.
func quoteShort(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...(%d bytes)", s[:cut], len(s))
	}
	return fmt.Sprintf("%q", s)
}
