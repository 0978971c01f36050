package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/canon"
)

// Store records decisions: one per approval ID, ever. It is an
// operator-side API. Hand it to the code that serves reviewers (a CLI, a
// web page, the Inbox) and to the Worker; never to a model, a tool, or
// anything a tool can reach. The tool node needs only an OutcomeRecorder.
//
// Every implementation must be safe for concurrent use, across processes
// when it is backed by a shared database, and must keep these rules:
//
//   - Decide is first-wins: of any number of concurrent or later calls for
//     one ID, exactly one records a decision; every other one fails with an
//     *AlreadyDecidedError naming the winner, and changes nothing.
//   - A decision is checked against the rules of decide before it is
//     written (see the package documentation, "Deciding"), with the
//     store's clock: a refused verdict changes nothing.
//   - Recorded decisions, outcomes and completed resumes never change.
//   - Every time the store writes and every time it compares one with
//     "now" come from one clock, its own (Now). Callers pass durations
//     (a claim's lease, a retry's delay), never times, so a stored time
//     can never come from another clock than the one that reads it.
//   - A store that keeps its rows outside the process reads each of them
//     as strictly as it wrote it, and binds it to its approval ID: every
//     row (the decision with its request snapshot, the resume progress,
//     the outcome) carries a checksum over the approval ID and all it
//     holds; JSON is decoded as json.Marshal and package canon write it
//     (ParseRequest for the snapshot: no null, duplicate, case-variant or
//     unknown key, no invalid UTF-8 or lone surrogate escape); and the
//     record read passes Trail.Verify. A row that fails is a
//     *CorruptError (ErrCorrupt) naming the approval, from every method
//     that reads it (Decided and Unresumed included), never a decision
//     read as another one, and nothing is written on it: a decision
//     copied onto another approval ID must never approve that call. Decide
//     refuses, with ErrInvalidRequest, an item whose request would not
//     read back as itself, so that no store writes what it would report.
//
// MemoryStore and SQLStore implement it. Both have a Close method: after
// it (and, for a SQLStore, once its database was closed), every method
// fails with an *Error matching ErrClosed and changes nothing.
type Store interface {
	OutcomeRecorder

	// Decide records the decision that v makes on item, at the store's
	// clock, and returns it. It fails with an *AlreadyDecidedError when
	// the approval has a decision, and with an *Error matching
	// ErrInvalidDecision, ErrInvalidArgs, ErrInvalidRequest (also for an
	// item without a thread), ErrInvalidExpiry, ErrExpired, or ErrNotFound
	// (an empty ID) when the verdict is refused. The verdict is checked on
	// its own first (outcome, reviewer, note), then against an earlier
	// decision, then against the request. item should come from the Inbox,
	// which reads it from the paused thread.
	Decide(ctx context.Context, item Item, v Verdict) (Decision, error)

	// Get returns the decided approval id, or an error matching
	// ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)

	// Decided returns which of ids have a decision. It fails only when the
	// store does (ErrClosed, a database error, ctx's error).
	Decided(ctx context.Context, ids []string) (map[string]bool, error)

	// Unresumed returns up to limit decided approvals whose thread has not
	// been resumed and whose Resume.NotBefore has passed, oldest decision
	// first (limit <= 0: all). It fails only when the store does
	// (ErrClosed, a database error, ctx's error).
	Unresumed(ctx context.Context, limit int) ([]Record, error)

	// ClaimResume sets Resume.NotBefore to the store's now plus lease if
	// the approval is still unresumed and its Resume.NotBefore has passed,
	// so that one worker at a time resumes it. The claim names no holder
	// (see ResumeClaimer for claims that do): it is taken over only once
	// it lapses. It reports whether the claim was taken, and returns an
	// error matching ErrNotFound for an unknown ID and an *Error matching
	// ErrInvalidConfig for a lease that is not positive.
	ClaimResume(ctx context.Context, id string, lease time.Duration) (bool, error)

	// FinishResume marks the approval resumed now with note. Finishing a
	// finished approval changes nothing and is not an error.
	FinishResume(ctx context.Context, id, note string) error

	// RetryResume records a failed resume attempt (reason, truncated),
	// and that the next may start after the delay after, from the store's
	// now (Resume.NotBefore; 0: at once, which also hands back a claim).
	// The wait names no holder: FinishResume and RetryResume clear
	// Resume.Claimant and Resume.Claim.
	// A negative delay is an *Error matching ErrInvalidConfig.
	RetryResume(ctx context.Context, id, reason string, after time.Duration) error

	// Audit returns the whole trail of a decided approval, or an error
	// matching ErrNotFound.
	Audit(ctx context.Context, id string) (Trail, error)

	// Now reads the store's clock: the one that stamps its decisions,
	// claims and retries and judges expiry. An Inbox reads time from it.
	Now() time.Time
}

// ResumeClaimer is a Store whose resume claims name their holder: the
// worker (WorkerOptions.Name) and the claim. A Worker over a store that
// implements it takes back at once a claim that a killed process of its
// own name left (SIGKILL, a crash, a lost machine), instead of waiting
// out the claim's lease; over a store that does not, such a claim lapses
// after its lease. MemoryStore, SQLStore and the PostgreSQL store of
// package postgres implement it.
//
// The store applies the rule in the write that takes the claim: a claim
// is taken over only while the very claim it names holds the approval,
// so that one decision is never resumed by two workers at once. Which
// claims have ended is the worker's knowledge, not the store's: a worker
// names only a claim of its own name that none of its attempts holds,
// which is why no two workers that run at the same time may share a name.
type ResumeClaimer interface {
	// ClaimResumeAs is ClaimResume that records c.Worker and c.ID as the
	// holder of the claim (Resume.Claimant, Resume.Claim). With
	// c.TakeBack set, it also takes the approval while it is still
	// claimed, if that claim is c.Worker's claim c.TakeBack. It reports
	// whether the claim was taken, and returns an error matching
	// ErrNotFound for an unknown ID and an *Error matching
	// ErrInvalidConfig for an invalid c (see Claim).
	ClaimResumeAs(ctx context.Context, id string, c Claim) (bool, error)

	// Claims returns up to limit unresumed approvals (limit <= 0: all)
	// whose claim by worker is still live, oldest decision first: those
	// its attempts hold, and those a killed process of its name left. It
	// fails only when the store does (ErrClosed, a database error, ctx's
	// error), or, for a worker name that is not valid (see Claim), with
	// an *Error matching ErrInvalidConfig.
	Claims(ctx context.Context, worker string, limit int) ([]Record, error)
}

// MaxClaimBytes caps a worker's name and a claim ID (Claim).
const MaxClaimBytes = 256

// Claim is a worker's claim on resuming one approval (ResumeClaimer).
type Claim struct {
	// Worker is the claiming worker's name (WorkerOptions.Name): 1 to
	// MaxClaimBytes bytes of UTF-8.
	Worker string
	// ID names this claim among the worker's claims, never reused: 1 to
	// MaxClaimBytes bytes of UTF-8.
	ID string
	// Lease is how long the claim holds, from the store's now; it must
	// be positive.
	Lease time.Duration
	// TakeBack, if not "", is the ID of a claim of Worker that holds the
	// approval and has ended without finishing: its process was killed,
	// or one of the worker's attempts ended without handing it back. The
	// worker states that nothing runs under it any more.
	TakeBack string
}

// checkClaim refuses a claim that is not valid (see Claim).
func checkClaim(id string, c Claim) error {
	if err := checkWorkerName(id, c.Worker); err != nil {
		return err
	}
	if c.ID == "" || len(c.ID) > MaxClaimBytes || !utf8.ValidString(c.ID) || len(c.TakeBack) > MaxClaimBytes || !utf8.ValidString(c.TakeBack) {
		return newError(id, ErrInvalidConfig, "a resume claim needs an ID of 1 to %d bytes of UTF-8 (and a TakeBack of at most as many)", MaxClaimBytes)
	}
	return checkLease(id, c.Lease)
}

// checkWorkerName refuses a worker name that is not 1 to MaxClaimBytes
// bytes of UTF-8.
func checkWorkerName(id, name string) error {
	if name == "" || len(name) > MaxClaimBytes || !utf8.ValidString(name) {
		return newError(id, ErrInvalidConfig, "a worker name of %d bytes: want 1 to %d bytes of UTF-8", len(name), MaxClaimBytes)
	}
	return nil
}

// claim applies claim c (its lease stamped at now) to r, and reports
// whether it was taken: r is unresumed and either not claimed any more
// (its NotBefore has passed) or held by the claim c takes back. c.Worker
// == "" is a claim of ClaimResume, which names no holder.
func (r *Resume) claim(c Claim, now time.Time) bool {
	if !r.At.IsZero() {
		return false
	}
	back := c.TakeBack != "" && c.Worker != "" && r.Claimant == c.Worker && r.Claim == c.TakeBack
	if r.NotBefore.After(now) && !back {
		return false
	}
	r.NotBefore = now.Add(c.Lease).UTC()
	r.Claimant, r.Claim = c.Worker, c.ID
	return true
}

// claimedBy reports whether r is unresumed and held, at now, by a claim
// of worker.
func (r Resume) claimedBy(worker string, now time.Time) bool {
	return r.At.IsZero() && r.Claimant == worker && r.NotBefore.After(now)
}

// OutcomeRecorder is the one part of a Store the tool node needs: it
// records what ran after an approved call executed. It cannot decide.
type OutcomeRecorder interface {
	// RecordOutcome stores what ran for approval id, at the store's clock.
	// It fails with ErrNotFound when there is no decision, ErrNotApproved
	// when the decision does not allow the call, ErrArgsMismatch when
	// e.ArgsHash is not the decision's, ErrInvalidArgs when e.Result is
	// not JSON, and ErrOutcomeRecorded when a different outcome is already
	// stored. Recording the same outcome again is not an error.
	RecordOutcome(ctx context.Context, id string, e Execution) error
}

// Execution is what ran for an approved call, as the tool node reports it.
type Execution struct {
	// IdempotencyKey is the key the call ran under (see the ledger).
	IdempotencyKey string `json:"idempotency_key"`
	// ArgsHash is ArgsHash(tool, arguments that ran); it must equal the
	// decision's.
	ArgsHash string `json:"args_hash"`
	// Result is the tool's result as JSON, if it succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the tool's failure, if it failed (at most MaxNoteBytes).
	Error string `json:"error,omitempty"`
	// At is when the outcome was recorded; set by the store.
	At time.Time `json:"at"`
}

// Trail is the audit of one approval: who decided what and when, what they
// were shown, how the thread was resumed, and what ran.
type Trail struct {
	Record
	// Execution is what ran, once the tool node recorded it; nil before,
	// and always nil for rejections and expiries.
	Execution *Execution `json:"execution,omitempty"`
	// Consumed is when the decision was consumed: saved into its thread,
	// as the answer of its interrupt, in the transaction of the save that
	// carries it (ResumeGraphConsuming, D16). Zero when no consuming
	// resume saved it (a resume by ResumeGraph, a store that is no
	// Consumer, or the decision is still to be delivered).
	Consumed time.Time `json:"consumed,omitzero"`
}

// maxErrorBytes caps a stored resume error.
const maxErrorBytes = 1 << 10

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// checkExecution validates an outcome against the decision rec and returns
// it in stored form (canonical result, time at).
func checkExecution(rec Record, e Execution, at time.Time) (Execution, error) {
	id := rec.ID
	if !rec.Decision.Allows() {
		return e, newError(id, ErrNotApproved, "the decision is %s", rec.Decision.Outcome)
	}
	if e.ArgsHash != rec.Decision.ArgsHash {
		return e, newError(id, ErrArgsMismatch, "")
	}
	if len(e.Result) > 0 {
		c, err := canon.JSON(e.Result)
		if err != nil {
			return e, newError(id, ErrInvalidArgs, "the result is not JSON")
		}
		e.Result = c
	}
	if len(e.Error) > MaxNoteBytes || !utf8.ValidString(e.Error) || len(e.IdempotencyKey) > MaxReviewerBytes {
		return e, newError(id, ErrInvalidArgs, "oversized or malformed error or idempotency key")
	}
	e.At = at.UTC()
	return e, nil
}

// sameExecution reports whether two outcomes record the same run (the time
// aside).
func sameExecution(a, b Execution) bool {
	return a.IdempotencyKey == b.IdempotencyKey && a.ArgsHash == b.ArgsHash && a.Error == b.Error && bytes.Equal(a.Result, b.Result)
}

// checkLease refuses a claim's lease that is not positive.
func checkLease(id string, lease time.Duration) error {
	if lease <= 0 {
		return newError(id, ErrInvalidConfig, "a resume claim needs a positive lease, not %v", lease)
	}
	return nil
}

// checkDelay refuses a negative retry delay.
func checkDelay(id string, after time.Duration) error {
	if after < 0 {
		return newError(id, ErrInvalidConfig, "a retry delay of %v is negative", after)
	}
	return nil
}

// clockOrNow returns now, or time.Now when now is nil.
func clockOrNow(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
