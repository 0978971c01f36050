package ledger

import (
	"fmt"
	"time"
)

// The functions in this file are the rules every Ledger applies, exported
// for implementations outside this package (the PostgreSQL ledger in
// package postgres), so that every backend answers exactly as Memory and
// SQL do. Applications do not need them.

// ResolveOptions returns o with its defaults applied (DefaultRetention,
// time.Now), or an error matching ErrInvalid for a negative retention.
func ResolveOptions(o Options) (Options, error) { return o.resolved() }

// CheckIntent refuses an intent Begin must not record (ErrInvalid: an
// empty or oversized key, owner, thread or run, a negative lease) and
// sets its default lease.
func CheckIntent(in *Intent) error { return checkIntent(in) }

// Judge applies Begin's rules to the record e found under in.Key at now:
// restart is true when the caller takes the key (a fresh intent over an
// expired or released record, or one taken over); otherwise a nil error
// means e's outcome is replayed, and an error is a *KeyReuseError,
// *InProgressError or *OutcomeUnknownError.
func Judge(e Entry, in Intent, now time.Time, retention time.Duration) (restart bool, err error) {
	return decide(e, in, now, retention)
}

// CheckClaim refuses a message claim with an empty or oversized field
// (ErrInvalid).
func CheckClaim(c Claim) error { return checkClaim(c) }

// DuplicateError is the error of a claim that lost to an earlier one of
// the same scope and ID whose fingerprint is stored and that was made at
// at: ErrDuplicateMessage, or a *DuplicateMismatchError.
func DuplicateError(c Claim, stored string, at time.Time) error { return duplicate(c, stored, at) }

// NotHeldError is the error of a Complete, Release or Resolve of key
// that the caller does not hold (ErrNotHeld); detail may be "".
func NotHeldError(key, detail string) error {
	if detail != "" {
		return fmt.Errorf("%w: key %s %s", ErrNotHeld, short(key), detail)
	}
	return fmt.Errorf("%w (key %s)", ErrNotHeld, short(key))
}

// NotFoundError is the error of a Get or Resolve of a key with no record
// (ErrNotFound).
func NotFoundError(key string) error { return fmt.Errorf("%w (key %s)", ErrNotFound, short(key)) }

// ShortKey is how errors name a key: its first 16 bytes.
func ShortKey(key string) string { return short(key) }
