package approval

import "time"

// The functions in this file are the rules every Store applies, exported
// for Store implementations outside this package (the PostgreSQL store in
// package postgres), so that every backend decides exactly as MemoryStore
// and SQLStore do. Applications do not need them.

// CheckVerdict checks what a verdict on item says on its own (outcome,
// reviewer, note) and what a Store needs of the item (an ID, a thread):
// the first checks of Store.Decide, before any earlier decision is looked
// up. It returns nil or an *Error (ErrInvalidDecision, ErrInvalidRequest,
// ErrNotFound for an empty ID).
func CheckVerdict(item Item, v Verdict) error {
	if err := checkVerdict(item.ID, v); err != nil {
		return err
	}
	return checkItem(item)
}

// Judge turns a verdict on item into the decision to record at now (see
// "Deciding" in the package doc), once CheckVerdict passed and no earlier
// decision exists. A human verdict on an expired request returns the
// Expired decision to record as d and the refusal to return once it is
// recorded as late (an *Error matching ErrExpired). It returns an *Error
// for a verdict the rules refuse.
func Judge(item Item, v Verdict, now time.Time) (d Decision, late error, err error) {
	d, l, err := decide(item, v, now)
	if l != nil {
		late = l
	}
	return d, late, err
}

// CheckExecution validates an outcome against the decision rec and
// returns it as a Store records it (a canonical result, At set to at in
// UTC). It returns an *Error matching ErrNotApproved, ErrArgsMismatch or
// ErrInvalidArgs.
func CheckExecution(rec Record, e Execution, at time.Time) (Execution, error) {
	return checkExecution(rec, e, at)
}

// SameExecution reports whether two outcomes record the same run (their
// times aside): recording the same outcome again is not an error.
func SameExecution(a, b Execution) bool { return sameExecution(a, b) }

// CheckResumeLease refuses a ClaimResume lease that is not positive with
// an *Error matching ErrInvalidConfig.
func CheckResumeLease(id string, lease time.Duration) error { return checkLease(id, lease) }

// CheckRetryDelay refuses a negative RetryResume delay with an *Error
// matching ErrInvalidConfig.
func CheckRetryDelay(id string, after time.Duration) error { return checkDelay(id, after) }

// TruncateReason cuts a resume note or error to what a Store keeps (1
// KiB, on a rune boundary).
func TruncateReason(s string) string { return truncate(s, maxErrorBytes) }

// CheckClaim refuses a ResumeClaimer claim that is not valid (see Claim:
// a worker name and an ID of 1 to MaxClaimBytes bytes of UTF-8, a
// TakeBack of at most as many, a positive lease) with an *Error matching
// ErrInvalidConfig.
func CheckClaim(id string, c Claim) error { return checkClaim(id, c) }

// CheckWorkerName refuses a worker name given to ResumeClaimer.Claims
// that is not 1 to MaxClaimBytes bytes of UTF-8 with an *Error matching
// ErrInvalidConfig.
func CheckWorkerName(name string) error { return checkWorkerName("", name) }
