package retry

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Defaults taken by zero Policy fields.
const (
	DefaultMaxAttempts = 3
	DefaultMultiplier  = 2.0
	DefaultMax         = 10 * time.Second
)

// Policy bounds the attempts of an operation and spaces them. Each zero
// field means what its doc says (see the package doc for the table);
// Validate refuses values that mean nothing.
type Policy struct {
	// MaxAttempts counts the first attempt: 1 means no retry, 0 means
	// DefaultMaxAttempts (3). Negative is refused.
	MaxAttempts int
	// Initial is the wait after the first failed attempt. 0 means no
	// wait: every retry starts at once (Multiplier and Max then do not
	// matter). Negative, or above Max, is refused.
	Initial time.Duration
	// Multiplier multiplies the wait after each further failed attempt: 1
	// keeps it constant, 0 means DefaultMultiplier (2). Below 1, NaN and
	// infinities are refused.
	Multiplier float64
	// Max caps every wait, the jitter included. 0 means DefaultMax (10s).
	// Negative is refused.
	Max time.Duration
	// Jitter spreads each wait evenly over [w × (1 − Jitter), w × (1 +
	// Jitter)], still capped at Max. 0 means none; it must be in [0, 1].
	Jitter float64
	// Rand is read (8 bytes a draw) for the jitter; nil means crypto/rand.
	// It is read only when a wait is spread (Jitter above 0 and a wait
	// above 0), and must be safe for concurrent use when the policy is
	// used from several goroutines at once. A failed or short read counts
	// as the middle of the range: the wait is not spread.
	Rand io.Reader
}

// ErrInvalidPolicy is matched by every error of Validate.
var ErrInvalidPolicy = errors.New("retry: invalid policy")

// PolicyError reports a Policy field that Validate refuses. It matches
// ErrInvalidPolicy.
type PolicyError struct {
	Field  string // "MaxAttempts", "Initial", "Multiplier", "Max" or "Jitter"
	Value  string // the field's value, as Go formats it
	Reason string // what the field accepts
}

// Error names the field, its value and what the field accepts.
func (e *PolicyError) Error() string {
	return fmt.Sprintf("retry: invalid policy: %s %s: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidPolicy) true.
func (e *PolicyError) Is(target error) bool { return target == ErrInvalidPolicy }

// Validate returns nil for a policy whose every field means something,
// and otherwise a *PolicyError for each field it refuses (joined with
// errors.Join when there are several). It never changes a field.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &PolicyError{Field: field, Value: value, Reason: reason})
	}
	if p.MaxAttempts < 0 {
		bad("MaxAttempts", strconv.Itoa(p.MaxAttempts), "want 1 or more (1: no retry), or 0 for 3")
	}
	if p.Initial < 0 {
		bad("Initial", p.Initial.String(), "want 0 (no wait) or more")
	}
	if m := p.Multiplier; m != 0 && !(m >= 1 && !math.IsInf(m, 1)) {
		bad("Multiplier", strconv.FormatFloat(m, 'g', -1, 64), "want a finite factor of 1 (constant waits) or more, or 0 for 2")
	}
	switch {
	case p.Max < 0:
		bad("Max", p.Max.String(), "want a positive cap, or 0 for 10s")
	case p.Initial > p.maxWait():
		bad("Initial", p.Initial.String(), fmt.Sprintf("above Max %v%s: no wait could be that long; raise Max", p.maxWait(), zeroMeans(p.Max)))
	}
	if j := p.Jitter; !(j >= 0 && j <= 1) {
		bad("Jitter", strconv.FormatFloat(j, 'g', -1, 64), "want a fraction in [0, 1] (0: none)")
	}
	return errors.Join(errs...)
}

func zeroMeans(max time.Duration) string {
	if max == 0 {
		return " (Max 0 means 10s)"
	}
	return ""
}

// Attempts returns how many attempts the policy allows, the first
// included: MaxAttempts, or DefaultMaxAttempts when it is 0 (or, for a
// policy Validate refuses, below 0).
func (p Policy) Attempts() int {
	if p.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return p.MaxAttempts
}

func (p Policy) maxWait() time.Duration {
	if p.Max <= 0 {
		return DefaultMax
	}
	return p.Max
}

// Delay returns the wait after the failed-th failed attempt (1: the wait
// before the second attempt), with u the jitter's uniform draw in [0, 1):
// min(Max, Initial × Multiplier^(failed−1)), spread by Jitter around
// itself (u = 0.5 does not move it) and capped at Max, zero fields
// meaning what Policy's doc says. failed below 1 counts as 1; u outside
// [0, 1] is clamped, and NaN counts as 0.5. Delay is pure. For a policy
// Validate refuses the result is still between 0 and the cap, but
// otherwise unspecified.
func (p Policy) Delay(failed int, u float64) time.Duration {
	limit := p.maxWait()
	if p.Initial <= 0 {
		return 0
	}
	m := p.Multiplier
	if m == 0 || !(m >= 1) || math.IsInf(m, 1) {
		m = DefaultMultiplier
	}
	failed = max(failed, 1)
	d := float64(p.Initial) * math.Pow(m, float64(failed-1))
	if j := p.Jitter; j > 0 && j <= 1 {
		if math.IsNaN(u) {
			u = 0.5
		}
		u = min(max(u, 0), 1)
		d = min(d, float64(limit)) * (1 + j*(2*u-1))
	}
	if !(d < float64(limit)) {
		return limit
	}
	return time.Duration(d)
}

// Wait returns Delay(failed, u) with u read from p.Rand (crypto/rand when
// nil); p.Rand is read only when the wait is spread (see Policy.Rand).
// It calls p.Rand's Read method on the calling goroutine: a caller that
// does not trust the reader contains the call.
func (p Policy) Wait(failed int) time.Duration {
	d := p.Delay(failed, 0.5)
	if p.Jitter <= 0 || d == 0 {
		return d
	}
	return p.Delay(failed, p.draw())
}

// draw returns a uniform number in [0, 1) from 53 random bits of p.Rand,
// or 0.5 when the read fails.
func (p Policy) draw() float64 {
	var b [8]byte
	if p.Rand == nil {
		_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	} else if _, err := io.ReadFull(p.Rand, b[:]); err != nil {
		return 0.5
	}
	return float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53)
}
