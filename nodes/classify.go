package nodes

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
)

// Class is the retry class of an error. Classes are read from error types,
// never from error text.
type Class int

// Retry classes.
const (
	// ClassNone: no type in the error's tree says. Not retried (a tool
	// that wants retries wraps its errors with Transient or returns an
	// *HTTPError) and not stored by the ledger.
	ClassNone Class = iota
	// ClassPermanent: retrying cannot help (authentication, permission,
	// not found, invalid arguments). Stored by the ledger and replayed.
	ClassPermanent
	// ClassTransient: a later attempt may succeed (timeouts, 5xx, 429).
	// Retried up to the policy's bound; never stored by the ledger.
	ClassTransient
	// ClassPause: an interrupt or a *ConfirmationRequired. Never retried
	// and never a failure.
	ClassPause
)

// String returns the class's name: permanent, transient, pause or
// unclassified.
func (c Class) String() string {
	switch c {
	case ClassPermanent:
		return "permanent"
	case ClassTransient:
		return "transient"
	case ClassPause:
		return "pause"
	}
	return "unclassified"
}

// Classifier is implemented by errors that know their retry class. A tool
// may return its own error types implementing it.
type Classifier interface {
	RetryClass() Class
}

// Classify returns the retry class of err by walking its tree (Unwrap()
// error and Unwrap() []error):
//
//   - the outermost error whose type declares a class decides for its
//     branch: a Classifier, an interrupt or a *ConfirmationRequired
//     (ClassPause), a schema validation error (ClassPermanent), a
//     net.Error that timed out or context.DeadlineExceeded
//     (ClassTransient);
//   - in a join (errors.Join, or several %w), ClassPause wins, then
//     ClassPermanent, then ClassTransient;
//   - a typed nil pointer in the tree classifies as nothing and does not
//     panic, and neither does an error whose methods (Unwrap, RetryClass,
//     Timeout) panic: it classifies as nothing.
//
// context.Canceled is ClassNone: a cancelled call is not retried.
func Classify(err error) (c Class) {
	if safe.Call(func() { c = classify(err, 0) }) != nil {
		return ClassNone
	}
	return c
}

// classifyUnsafe is Classify letting a panic of err's methods through, for
// contain, which reports it.
func classifyUnsafe(err error) Class { return classify(err, 0) }

func classify(err error, depth int) Class {
	if err == nil || depth > 64 || isNilPointer(err) {
		return ClassNone
	}
	if c, ok := ownClass(err); ok {
		return c
	}
	switch u := err.(type) {
	case *safe.Error:
		// An application error the runtime read once (package graph
		// holds nodes' errors so): classified as what it holds.
		return classify(u.Inner(), depth+1)
	case interface{ Unwrap() []error }:
		best := ClassNone
		for _, e := range u.Unwrap() {
			c := classify(e, depth+1)
			if rank(c) > rank(best) {
				best = c
			}
		}
		return best
	case interface{ Unwrap() error }:
		return classify(u.Unwrap(), depth+1)
	}
	return ClassNone
}

func rank(c Class) int {
	switch c {
	case ClassPause:
		return 3
	case ClassPermanent:
		return 2
	case ClassTransient:
		return 1
	}
	return 0
}

// ownClass is the class err's own type declares (not its wrapped errors').
func ownClass(err error) (Class, bool) {
	switch e := err.(type) {
	case Classifier:
		return e.RetryClass(), true
	case *interrupt.Error, *interrupt.NodeInterrupt:
		return ClassPause, true
	case *jsonschema.ValidationError:
		return ClassPermanent, true
	case net.Error:
		if e.Timeout() {
			return ClassTransient, true
		}
	}
	if err == context.DeadlineExceeded {
		return ClassTransient, true
	}
	return ClassNone, false
}

func isNilPointer(err error) bool {
	v := reflect.ValueOf(err)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// retryAfter returns the largest server-requested delay in err's tree.
func retryAfter(err error) time.Duration {
	var d time.Duration
	var walk func(error, int)
	walk = func(e error, depth int) {
		if e == nil || depth > 64 || isNilPointer(e) {
			return
		}
		switch x := e.(type) {
		case *HTTPError:
			d = max(d, x.RetryAfter)
		case *TransientError:
			d = max(d, x.RetryAfter)
		case *bodyError:
			d = max(d, x.after) // read when the body returned it
			return
		case *safe.Error:
			walk(x.Inner(), depth+1)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c, depth+1)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		}
	}
	walk(err, 0)
	return d
}

// HTTPError is a downstream API's HTTP failure. Its class follows the
// status: 408, 425, 429 and 5xx are Transient (RetryAfter, from the
// Retry-After header, sets the least wait), every other status Permanent
// (401 authentication, 403 permission, 404 not found, 400 and 422 invalid
// arguments).
type HTTPError struct {
	Status     int
	RetryAfter time.Duration
	// Err is the underlying error, if any. Its text is redacted like any
	// tool error before it is logged or shown.
	Err error
}

// NewHTTPError returns an *HTTPError for resp's status with its Retry-After
// header (seconds or an HTTP date, read against now) parsed. It does not
// read or close the body.
func NewHTTPError(resp *http.Response, now time.Time) *HTTPError {
	e := &HTTPError{Status: resp.StatusCode}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
			if secs > int64(math.MaxInt64/time.Second) {
				secs = int64(math.MaxInt64 / time.Second)
			}
			e.RetryAfter = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(v); err == nil && t.After(now) {
			e.RetryAfter = t.Sub(now)
		}
	}
	return e
}

// Error returns the status and the underlying error's text.
func (e *HTTPError) Error() string {
	s := fmt.Sprintf("http status %d %s", e.Status, http.StatusText(e.Status))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *HTTPError) Unwrap() error { return e.Err }

// RetryClass implements Classifier.
func (e *HTTPError) RetryClass() Class {
	switch {
	case e.Status == http.StatusRequestTimeout, e.Status == http.StatusTooEarly,
		e.Status == http.StatusTooManyRequests, e.Status >= 500 && e.Status <= 599:
		return ClassTransient
	}
	return ClassPermanent
}

// PermanentError marks its error as not worth retrying. Build it with
// Permanent.
type PermanentError struct{ Err error }

// Permanent marks err as Permanent (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the marked error.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryClass implements Classifier.
func (e *PermanentError) RetryClass() Class { return ClassPermanent }

// TransientError marks its error as worth retrying, optionally not before
// RetryAfter. Build it with Transient or RetryAfter.
type TransientError struct {
	Err        error
	RetryAfter time.Duration
}

// Transient marks err as Transient (nil stays nil).
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err}
}

// RetryAfter marks err as Transient with a least wait of d before the next
// attempt (still capped by the tool's MaxRetryAfter).
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err, RetryAfter: d}
}

// Error returns the wrapped error's text.
func (e *TransientError) Error() string { return e.Err.Error() }

// Unwrap returns the marked error.
func (e *TransientError) Unwrap() error { return e.Err }

// RetryClass implements Classifier.
func (e *TransientError) RetryClass() Class { return ClassTransient }
