package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// DefaultRetention is how long a record is kept when Options.Retention is
// zero: Stripe's 24 hours.
const DefaultRetention = 24 * time.Hour

// Sentinel errors, matched with errors.Is.
var (
	// ErrKeyReuse: the key is recorded for another tool or other arguments.
	// Matches *KeyReuseError (the analog of Stripe's idempotency_error).
	ErrKeyReuse = errors.New("ledger: idempotency key reused with different arguments")
	// ErrInProgress: another holder, alive as far as the ledger can
	// tell, runs the operation now. Matches *InProgressError (the analog
	// of HTTP 409). It is a transient condition, never an outcome: retry
	// after InProgressError.LeaseUntil.
	ErrInProgress = errors.New("ledger: operation in progress")
	// ErrOutcomeUnknown: an intent lost its holder before its outcome was
	// recorded (its lease expired, or an earlier run of the same thread
	// left it). Matches *OutcomeUnknownError.
	ErrOutcomeUnknown = errors.New("ledger: outcome of an earlier attempt is unknown")
	// ErrNotHeld: Complete or Release by a caller that does not hold the
	// intent (it was never begun, was completed, or was taken over).
	ErrNotHeld = errors.New("ledger: intent not held by this owner")
	// ErrNotFound: no record under the key.
	ErrNotFound = errors.New("ledger: no such key")
	// ErrDuplicateMessage: the message ID was claimed before in the same
	// scope, with the same payload fingerprint (a redelivery).
	ErrDuplicateMessage = errors.New("ledger: message already claimed")
	// ErrDuplicateMismatch: the message ID was claimed before in the same
	// scope with a different payload fingerprint: the sender reused an ID
	// for another message. Matches *DuplicateMismatchError; it does not
	// match ErrDuplicateMessage, so a caller that skips redeliveries does
	// not silently drop it.
	ErrDuplicateMismatch = errors.New("ledger: message ID reused with a different payload")
	// ErrInvalid: an empty or oversized (MaxIDBytes) key, owner, message
	// scope, message ID or message fingerprint, or a bad option.
	ErrInvalid = errors.New("ledger: invalid argument")
	// ErrCorrupt matches every *CorruptError: a stored record or message
	// claim that only corruption can have written (it fails its checksum,
	// was copied from another key, or does not decode as the ledger writes
	// it). Nothing was written on it.
	ErrCorrupt = errors.New("ledger: stored row is corrupt")
	// ErrSchemaVersion: the database holds ledger tables of a newer
	// version than this code knows, or a stored version no code writes
	// (see NewSQL). Nothing was changed.
	ErrSchemaVersion = errors.New("ledger: unsupported schema version")
)

// CorruptError reports a stored record (or message claim) that cannot be
// trusted: its checksum does not match its key and contents (it was
// damaged, or copied from another idempotency key), or it holds what the
// ledger never writes (an outcome that is not JSON as json.Marshal writes
// it: null where a value must be, a duplicate, case-variant or unknown
// key, invalid UTF-8 or a lone surrogate escape; fields that disagree,
// such as a pending record with an outcome). It matches ErrCorrupt and
// unwraps to the cause. The ledger wrote nothing on it: the call it
// guards is neither run nor replayed until someone inspects the row and
// restores or removes it (Forget removes a corrupt record).
type CorruptError struct {
	// Key is the idempotency key of the record, or the ID of the message
	// whose claim is corrupt.
	Key string
	// Scope is the scope of a corrupt message claim ("" for a record).
	Scope string
	// What names the part: "record", "outcome", "failure", "message claim".
	What string
	Err  error // what is wrong
}

// Error names the key (bounded), says that the row is corrupt, and what to
// do; it never shows arguments or outcomes.
func (e *CorruptError) Error() string {
	var s string
	if e.What == "message claim" {
		s = fmt.Sprintf("ledger: the stored claim of message %q in scope %q is corrupt", quoteID(e.Key), quoteID(e.Scope))
	} else {
		s = fmt.Sprintf("ledger: the stored %s under idempotency key %s is corrupt", e.What, short(e.Key))
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + " (nothing was written, and the call was neither run nor replayed: inspect the row, restore it from a backup, or remove it with Forget)"
}

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

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
	// TakeOver lets Begin take over a pending intent whose holder is gone
	// (its lease expired, or it was an earlier run of Thread) instead of
	// returning *OutcomeUnknownError. Set it only after a reconcile found
	// that the earlier attempt had no effect, or when a human decided to
	// run it again, or when the service dedupes by the key.
	TakeOver bool
	// Thread and Run name the graph run that makes the call, when it
	// holds the thread's lease: the thread, and the run's ID (its lease
	// owner). They are recorded with the intent. A pending intent recorded
	// by another run of the same thread was left by a run that no longer
	// holds the thread (the caller does), which can never record its
	// outcome: it counts as abandoned at once, whatever its lease (see
	// Begin). Leave both empty outside a leased graph run (at most
	// MaxIDBytes each).
	Thread string
	Run    string
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

// failureJSON is the strict form of a stored failure.
var failureJSON = strictjson.For(reflect.TypeFor[Failure]())

// Validate reports whether a ledger can record o and read it back as it
// is: its Result, when set, must be JSON as json.Marshal writes it (no
// syntax error, duplicate key, invalid UTF-8 or lone surrogate escape). It
// returns an error matching ErrInvalid otherwise. Complete and Resolve
// refuse such an outcome with it and write nothing, so that no record is
// written that a reader would report as a *CorruptError.
func (o Outcome) Validate() error {
	if o.Result != nil {
		if err := strictjson.CheckJSON(o.Result); err != nil {
			return fmt.Errorf("%w: the result is not JSON as json.Marshal writes it: %v", ErrInvalid, err)
		}
	}
	return nil
}

// DecodeFailure decodes a stored failure (the JSON of a Failure) as
// strictly as json.Marshal writes it: null, a duplicate, case-variant or
// unknown key, invalid UTF-8, a lone surrogate escape or a value of the
// wrong kind is an error, never a failure read as another one.
func DecodeFailure(b []byte) (*Failure, error) {
	if err := failureJSON.Check(b); err != nil {
		return nil, err
	}
	var f *Failure
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("null, which the ledger never writes for a failure")
	}
	return f, nil
}

// Verify reports whether e is a record a ledger can have written: it
// returns nil, or a *CorruptError naming e.Key. A ledger that keeps its
// records outside the process (SQL, and any other implementation) checks
// every record it reads with it, besides the checksum that binds the row
// to its key, and writes nothing on a record that fails. The rules: a key
// and an owner, non-empty and at most MaxIDBytes, as are Thread and Run; a
// known state; a pending record has no outcome and no completion time, a
// done one has its completion time; an outcome passes Outcome.Validate.
func (e Entry) Verify() error {
	fail := func(format string, args ...any) error {
		return &CorruptError{Key: e.Key, What: "record", Err: fmt.Errorf(format, args...)}
	}
	switch {
	case e.Key == "" || len(e.Key) > MaxIDBytes:
		return fail("a key of %d bytes", len(e.Key))
	case e.Owner == "" || len(e.Owner) > MaxIDBytes:
		return fail("an owner of %d bytes", len(e.Owner))
	case len(e.Thread) > MaxIDBytes || len(e.Run) > MaxIDBytes:
		return fail("an oversized thread or run")
	}
	switch e.State {
	case StatePending:
		if e.Outcome.Result != nil || e.Outcome.Failure != nil || !e.CompletedAt.IsZero() {
			return fail("a pending record with an outcome")
		}
	case StateDone:
		if e.CompletedAt.IsZero() {
			return fail("a done record without its completion time")
		}
	default:
		return fail("unknown state %q", quoteID(string(e.State)))
	}
	if err := e.Outcome.Validate(); err != nil {
		return &CorruptError{Key: e.Key, What: "outcome", Err: err}
	}
	return nil
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
	// Thread and Run are the Intent's of the holder that recorded it (or
	// took it over last); empty outside a leased graph run.
	Thread string
	Run    string
}

// Ledger records intents and outcomes of side-effecting calls. Every method
// is safe for concurrent use.
//
// A ledger that keeps its records outside the process reads each of them
// as strictly as it wrote it, and binds it to its key: every stored record
// and message claim carries a checksum over its key (a claim's scope and
// ID) and all it holds; a failure is decoded as json.Marshal writes a
// Failure (DecodeFailure), a result checked as JSON json.Marshal can write;
// and the record read passes Entry.Verify. A row that fails is a
// *CorruptError (ErrCorrupt) naming the key, from every method that reads
// it (Begin, Complete, Release, Resolve, Get, Prune, ClaimMessage), never
// a record read as another one, and nothing is written on it: an outcome
// copied to another key must never be replayed as that call's result.
// Forget alone deletes a record without reading it, which is how a
// corrupt one is removed. Complete and Resolve refuse, with ErrInvalid,
// an outcome that fails Outcome.Validate, so that no ledger writes what it
// would report.
type Ledger interface {
	// Begin records the intent, or reports what is already recorded under
	// the key (see the package doc). started is true when the caller now
	// holds the intent and must call Complete or Release. Errors:
	// *KeyReuseError, *InProgressError (transient: another live holder),
	// *OutcomeUnknownError, ErrInvalid, a *CorruptError (the record under
	// the key does not verify: the call must neither run nor replay), or a
	// storage error.
	Begin(ctx context.Context, in Intent) (e Entry, started bool, err error)
	// Complete stores the outcome of an intent held by owner. It returns
	// ErrNotHeld when owner does not hold it, and ErrInvalid for an
	// outcome that fails Outcome.Validate.
	Complete(ctx context.Context, key, owner string, o Outcome) error
	// Release drops a pending intent held by owner (a transient failure:
	// the next Begin starts afresh). It returns ErrNotHeld when owner does
	// not hold it.
	Release(ctx context.Context, key, owner string) error
	// Resolve records the outcome of a pending intent whatever its holder:
	// what a reconcile found downstream. It returns ErrNotFound when there
	// is no record, ErrNotHeld when the record is already done, and
	// ErrInvalid for an outcome that fails Outcome.Validate.
	Resolve(ctx context.Context, key string, o Outcome) error
	// Forget deletes the record under key in any state, corrupt or not,
	// so that the operation may run again. Forgetting a missing key is not
	// an error.
	Forget(ctx context.Context, key string) error
	// Get returns the record under key, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Prune deletes done records and message claims older than the
	// retention and returns how many it deleted. Pending records stay. It
	// fails only with ctx's or the storage's error.
	Prune(ctx context.Context) (int, error)
	// ClaimMessage claims a message once: the first claim of c.ID in
	// c.Scope within the retention wins (nil) and records c.Fingerprint.
	// A later claim of the same scope and ID returns an error matching
	// ErrDuplicateMessage when its fingerprint is the same, and a
	// *DuplicateMismatchError (ErrDuplicateMismatch) when it differs;
	// neither writes anything. It returns an error matching ErrInvalid for
	// an empty or oversized scope, ID or fingerprint (nothing is written),
	// or a storage error.
	ClaimMessage(ctx context.Context, c Claim) error
}

// Claim names one delivered message for ClaimMessage. Every field is
// compared as exact bytes: no case folding, trimming or Unicode
// normalization, so "evt_1", "EVT_1" and "evt_1 " are three messages.
// Every field is required and at most MaxIDBytes long.
type Claim struct {
	// Scope is the namespace in which the sender guarantees that message
	// IDs are unique: typically the tenant and the channel (the webhook
	// endpoint, queue or topic) the message came from. The same ID in two
	// scopes is two messages. Build it with MessageScope when it has
	// several parts, so that the parts cannot run into each other.
	Scope string
	// ID is the sender's message ID (a webhook event ID, a queue message
	// ID).
	ID string
	// Fingerprint is a hash of the message's payload, computed by the
	// caller (MessageFingerprint). It is stored instead of the payload, and
	// tells a redelivery (same fingerprint) from the reuse of an ID for
	// another message (ErrDuplicateMismatch).
	Fingerprint string
}

// MessageScope joins parts (say, a tenant and a channel) into a
// Claim.Scope. Each part is path-escaped before the parts are joined with
// "/", so that different parts never give the same scope ("a/b", "c" and
// "a", "b/c" differ); a part without special characters stays readable
// ("acme/stripe-webhooks"). It never fails; with no parts it returns "",
// which ClaimMessage refuses with ErrInvalid.
func MessageScope(parts ...string) string {
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = url.PathEscape(p)
	}
	return strings.Join(esc, "/")
}

// MessageFingerprint returns the hex SHA-256 (under a domain prefix of
// this package) of a message's payload as delivered, for
// Claim.Fingerprint. The bytes are hashed as they are: a sender that
// re-encodes its payload between deliveries (JSON key order, whitespace)
// needs a fingerprint of a canonical form instead, such as
// approval.ArgsHash of the payload. It never fails.
func MessageFingerprint(payload []byte) string {
	return canon.Hash([]byte("lockstep/ledger/message/v1"), payload)
}

// DuplicateMismatchError reports a message ID claimed before in the same
// scope with a different payload fingerprint. It matches
// ErrDuplicateMismatch. It names the scope and the ID, never the payload
// or its fingerprint.
type DuplicateMismatchError struct {
	Scope string
	ID    string
	// ClaimedAt is when the first claim was recorded.
	ClaimedAt time.Time
}

// Error describes the failure, naming the scope and the ID (bounded) and
// never the payload.
func (e *DuplicateMismatchError) Error() string {
	return fmt.Sprintf("ledger: message %q in scope %q was claimed at %s with a different payload; the message was not processed",
		quoteID(e.ID), quoteID(e.Scope), e.ClaimedAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrDuplicateMismatch) true.
func (e *DuplicateMismatchError) Is(target error) bool { return target == ErrDuplicateMismatch }

// checkClaim refuses a claim with an empty or oversized field.
func checkClaim(c Claim) error {
	if err := checkID("message scope", c.Scope); err != nil {
		return err
	}
	if err := checkID("message ID", c.ID); err != nil {
		return err
	}
	return checkID("message fingerprint", c.Fingerprint)
}

// duplicate is the error of a claim that lost to an earlier claim whose
// fingerprint is stored (an empty stored fingerprint is a claim migrated
// from schema version 1, whose payload is unknown: a duplicate).
func duplicate(c Claim, stored string, at time.Time) error {
	if stored != "" && stored != c.Fingerprint {
		return &DuplicateMismatchError{Scope: c.Scope, ID: c.ID, ClaimedAt: at}
	}
	return fmt.Errorf("%w (message %q in scope %q)", ErrDuplicateMessage, quoteID(c.ID), quoteID(c.Scope))
}

// Options configure a ledger. The zero value is usable.
type Options struct {
	// Retention is how long records and message claims are kept (default
	// DefaultRetention).
	Retention time.Duration
	// Now reads the time (default time.Now).
	Now func() time.Time
	// Fence, if set, is the checkpoint saver the ledger shares its
	// database with (a checkpoint.Joiner: the SQLite saver whose DB the
	// SQL ledger is opened on; package postgres's Saver for its ledger).
	// Every intent of a leased graph run (Intent.Thread and Intent.Run
	// set) is then begun, completed and released only while that run
	// still holds the thread's lease, checked in the same transaction
	// (D17): a run that lost the thread (it was paused past its lease and
	// another run took over) gets an error matching
	// checkpoint.ErrThreadBusy, and nothing of it lands, so that it can
	// neither start a call its successor owns nor record what its
	// successor must reconcile. With a Fence the SQL ledger also offers
	// CompleteJoin, which records an outcome in the transaction of the
	// write that saves the call's result (D16). A ledger that cannot be
	// fenced by it refuses it with ErrInvalid: the Memory ledger (it
	// shares no transaction with a saver), and a SQL ledger whose
	// database is not the Fence's (an error that matches
	// checkpoint.ErrNotJoinable as well, as does the work of a SQL
	// ledger run in a transaction on another database).
	//
	// Package postgres's ledger is fenced by its DB's saver by default
	// (Fence nil means that saver there; Unfenced turns it off). NewSQL
	// cannot find the saver on its own: pass the saver whose DB it is
	// opened on.
	Fence Fencer
	// Unfenced turns off the default fence of a ledger that has one
	// (package postgres's, fenced by its DB's saver). Set it only when
	// the graphs that use the ledger save their checkpoints to another
	// database, whose leases the ledger's database does not hold: their
	// leased intents would otherwise be refused with an error matching
	// checkpoint.ErrThreadBusy. A ledger then judges an earlier run's
	// intent as unfenced ledgers do (see the package doc), and a run that
	// lost its thread can record what its successor must reconcile.
	// Unfenced with a Fence is ErrInvalid; for NewSQL and NewMemory,
	// which have no default fence, it changes nothing.
	Unfenced bool
}

// Joiner is a Ledger that can be fenced by a saver (Options.Fence) and
// record an outcome in the saver's transaction (D16). The SQL ledger and
// package postgres's implement it.
type Joiner interface {
	Ledger
	// Fenced reports whether the ledger has a Fence: whether its intents
	// of leased graph runs are fenced by their thread's lease.
	Fenced() bool
	// CompleteJoin returns the work of Complete(key, owner, o), to run in
	// the transaction of a write of the saver the ledger is fenced by
	// (graph.JoinWrite), or nil when the ledger is not fenced.
	CompleteJoin(key, owner string, o Outcome) func(ctx context.Context, tx any) error
}

// Fencer is the saver side of a fenced ledger (Options.Fence): the
// method of checkpoint.Joiner, which the SQLite and Postgres savers
// implement. Fenced runs work in one transaction of the saver after
// checking in it that owner holds thread's lease at the epoch it took it,
// and fails with a *checkpoint.BusyError (checkpoint.ErrThreadBusy),
// running nothing, otherwise; work's error rolls everything back and is
// returned as it is. tx is the saver's transaction (checkpoint.SQLTx on
// database/sql).
type Fencer interface {
	Fenced(ctx context.Context, thread, owner string, work func(ctx context.Context, tx any) error) error
}

func (o Options) resolved() (Options, error) {
	if o.Retention < 0 {
		return o, fmt.Errorf("%w: negative retention %v", ErrInvalid, o.Retention)
	}
	if o.Unfenced && o.Fence != nil {
		return o, fmt.Errorf("%w: Options.Unfenced with a Fence: set one or the other", ErrInvalid)
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

// InProgressError reports a concurrent duplicate: another holder, alive as
// far as the ledger can tell, runs the operation now. It matches
// ErrInProgress. It is transient: the caller retries after LeaseUntil (by
// then the holder has recorded the outcome, which a retry replays, or its
// intent counts as abandoned), and must not record it as the operation's
// outcome.
type InProgressError struct {
	Key        string
	Tool       string
	LeaseUntil time.Time // when the holder's lease ends
	// Thread and Run name the holder's graph run, when it recorded them.
	Thread string
	Run    string
}

// Error describes the failure, naming the tool, key and holder (never a
// secret), and says when to retry.
func (e *InProgressError) Error() string {
	where := "elsewhere"
	if e.Run != "" {
		where = fmt.Sprintf("in run %s of thread %q", e.Run, e.Thread)
	}
	until := e.LeaseUntil.UTC()
	after := until.Truncate(time.Second)
	if after.Before(until) {
		after = after.Add(time.Second)
	}
	return fmt.Sprintf("ledger: call of tool %q with idempotency key %s is in progress %s (its lease on the call ends at %s); do not start it again: retry after %s",
		e.Tool, short(e.Key), where, until.Format(time.RFC3339), after.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// OutcomeUnknownError reports an intent whose holder is gone without
// recording the outcome: its lease expired, or it was an earlier run of
// the caller's thread (EarlierRun). It matches ErrOutcomeUnknown. The
// operation may or may not have taken effect.
type OutcomeUnknownError struct {
	Key   string
	Tool  string
	Since time.Time // when the intent was recorded
	// Thread and Run name the holder's graph run, when it recorded them.
	Thread string
	Run    string
	// EarlierRun reports that the holder was an earlier run of the
	// caller's thread (it was stopped or killed), so the intent counted as
	// abandoned without waiting for its lease.
	EarlierRun bool
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *OutcomeUnknownError) Error() string {
	who := "an earlier call"
	if e.EarlierRun {
		who = fmt.Sprintf("an earlier run (%s) of thread %q, which was stopped or killed before it recorded the outcome, made a call", e.Run, e.Thread)
	}
	return fmt.Sprintf("ledger: %s of tool %q with idempotency key %s (begun %s) that has no recorded outcome: it may or may not have taken effect; it is not run again until it is reconciled (Resolve, Forget, a reconcile hook, or a human's decision to run it again)",
		who, e.Tool, short(e.Key), e.Since.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

func short(key string) string {
	if len(key) > 16 {
		return key[:16] + "…"
	}
	return key
}

// MaxIDBytes caps idempotency keys, owners, and message scopes, IDs and
// fingerprints. Longer ones are refused with ErrInvalid before anything is
// stored (the keys package nodes derives are 64 bytes).
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
	for _, f := range []struct{ what, v string }{{"thread", in.Thread}, {"run", in.Run}} {
		if len(f.v) > MaxIDBytes {
			return fmt.Errorf("%w: %s of %d bytes (at most %d)", ErrInvalid, f.what, len(f.v), MaxIDBytes)
		}
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
	// The caller's run holds the thread's lease, so another run of the
	// thread no longer does: it ended or lost the thread, and cannot
	// record the outcome (D17: the lease holder is the successor of every
	// earlier run). Its intent is abandoned now, whatever its lease says.
	earlier := in.Thread != "" && in.Run != "" && e.Thread == in.Thread && e.Run != in.Run
	if !earlier && now.Before(e.LeaseUntil) {
		return false, &InProgressError{Key: in.Key, Tool: in.Tool, LeaseUntil: e.LeaseUntil, Thread: e.Thread, Run: e.Run}
	}
	if in.TakeOver {
		return true, nil
	}
	return false, &OutcomeUnknownError{Key: in.Key, Tool: in.Tool, Since: e.CreatedAt, Thread: e.Thread, Run: e.Run, EarlierRun: earlier}
}
