package safe

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Panic is a panic recovered from application code.
type Panic struct {
	// Value is what the code panicked with.
	Value any
	// Stack is the stack of the goroutine that panicked (debug.Stack).
	Stack []byte
}

// String formats Value as fmt does: a panic in the value's own Error or
// String method is caught by fmt and shown in the text.
func (p *Panic) String() string { return fmt.Sprint(p.Value) }

// Call runs fn and returns the panic it raised, or nil when it returned.
func Call(fn func()) (p *Panic) {
	defer func() {
		if r := recover(); r != nil {
			p = &Panic{Value: r, Stack: debug.Stack()}
		}
	}()
	fn()
	return nil
}

// Text returns err.Error() ("" for a nil err), or the panic that call
// raised.
func Text(err error) (s string, p *Panic) {
	if err == nil {
		return "", nil
	}
	p = Call(func() { s = err.Error() })
	return s, p
}

// Error is an application error read once (see Wrap). It answers Error
// with the text the application's Error method returned then, and
// errors.Is and errors.As by asking the application's error under
// recover. It has no Unwrap method, so that errors.Is and errors.As never
// walk into the application's error unprotected.
type Error struct {
	err error
	msg string
}

// Wrap returns err contained: nil for nil, err itself when it is an *Error
// already, and otherwise an *Error holding err and its text. When err's
// Error method panics, Wrap returns the panic and a nil error, and the
// caller reports the panic as a typed error of the call that returned
// err.
func Wrap(err error) (*Panic, error) {
	if err == nil {
		return nil, nil
	}
	if e, ok := err.(*Error); ok {
		return nil, e
	}
	msg, p := Text(err)
	if p != nil {
		return p, nil
	}
	return nil, &Error{err: err, msg: msg}
}

// Error returns the application error's text, as read by Wrap.
func (e *Error) Error() string { return e.msg }

// Is reports errors.Is(application error, target); false when that
// panics.
func (e *Error) Is(target error) (ok bool) {
	if Call(func() { ok = errors.Is(e.err, target) }) != nil {
		return false
	}
	return ok
}

// As reports errors.As(application error, target); false when that
// panics.
func (e *Error) As(target any) (ok bool) {
	if Call(func() { ok = errors.As(e.err, target) }) != nil {
		return false
	}
	return ok
}

// Inner returns the application's error, for code that must look at it
// itself (under Call).
func (e *Error) Inner() error { return e.err }

// TypeName is fmt's %T of err, or of the application's error when err is
// an *Error.
func TypeName(err error) string {
	if e, ok := err.(*Error); ok {
		err = e.err
	}
	return fmt.Sprintf("%T", err)
}

// ErrAbandoned matches every *AbandonedError: a call into application
// code did not return before its context ended and was left running.
var ErrAbandoned = errors.New("a call into application code did not return before its context ended and was left running")

// AbandonedError reports a call that Bound gave up on. It matches
// ErrAbandoned, and the context's error through Unwrap
// (context.DeadlineExceeded, context.Canceled or the context's cause).
type AbandonedError struct {
	What string // the call, e.g. `the reducer of field "Log"`
	Err  error  // context.Cause of the context that ended
}

// Error names the call and why its context ended.
func (e *AbandonedError) Error() string {
	return fmt.Sprintf("%s did not return before the context ended and was left running: %v", e.What, e.Err)
}

// Unwrap returns the context's cause.
func (e *AbandonedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrAbandoned) true.
func (e *AbandonedError) Is(target error) bool { return target == ErrAbandoned }

// Grace is how long Bound still waits for a call once its context has
// ended, so that a call that was about to return, or that finishes work
// which already happened after its context ended, still returns its
// result.
const Grace = 100 * time.Millisecond

// Counter counts the calls that were given up on: those Bound abandoned,
// and any other its owner reports with Add and Done. The zero Counter is
// ready to use.
type Counter struct {
	total   atomic.Int64
	running atomic.Int64
}

// Add counts one more call given up on and still running.
func (c *Counter) Add() {
	c.total.Add(1)
	c.running.Add(1)
}

// Done records that a call counted by Add has returned.
func (c *Counter) Done() { c.running.Add(-1) }

// Total returns how many calls were given up on, ever.
func (c *Counter) Total() int64 { return c.total.Load() }

// Running returns how many calls given up on have not returned yet.
func (c *Counter) Running() int64 { return c.running.Load() }

// Bound calls fn and returns what it returned, or the panic it raised.
// When ctx can end, fn runs on a goroutine of its own, and when it has
// not returned Grace after ctx ended Bound gives up on it: it returns an
// *AbandonedError naming what, and c (when not nil) counts fn until it
// returns. fn must not touch what its caller uses once it is given up on:
// results come back only through its return value. When ctx cannot end,
// fn runs on the caller's goroutine.
func Bound[T any](ctx context.Context, c *Counter, what string, fn func() T) (T, *Panic, error) {
	if ctx.Done() == nil {
		var v T
		p := Call(func() { v = fn() })
		return v, p, nil
	}
	type result struct {
		v T
		p *Panic
	}
	var (
		mu   sync.Mutex // orders fn's answer against its abandonment
		gone bool       // given up on: nobody receives from done
		done = make(chan result, 1)
	)
	go func() {
		var r result
		r.p = Call(func() { r.v = fn() })
		mu.Lock()
		g := gone
		if !g {
			done <- r // buffered: never blocks
		}
		mu.Unlock()
		if g && c != nil {
			c.Done()
		}
	}()
	select {
	case r := <-done:
		return r.v, r.p, nil
	case <-ctx.Done():
	}
	t := time.NewTimer(Grace)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.p, nil
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done:
		return r.v, r.p, nil
	default:
	}
	gone = true
	if c != nil {
		c.Add()
	}
	var zero T
	return zero, nil, &AbandonedError{What: what, Err: context.Cause(ctx)}
}

// module is lockstep's module path.
const module = "github.com/lockstepgo/lockstep"

// trustedPackages are the standard library packages whose types have
// JSON or text methods that call no application code.
var trustedPackages = map[string]bool{"time": true, "encoding/json": true, "math/big": true, "net": true, "net/netip": true}

// Foreign reports whether encoding/json, encoding or decoding a value of
// type t, may call application code: a JSON or text method of a type
// outside lockstep and the standard library's time, encoding/json,
// math/big, net and net/netip packages, or of a type it cannot know in
// advance (t is nil, or holds an interface). Types declared in test
// packages are foreign. The walk costs time proportional to the type's
// size; callers that ask often keep the answer.
func Foreign(t reflect.Type) bool {
	if t == nil {
		return true
	}
	return foreign(t, map[reflect.Type]bool{})
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func custom(t reflect.Type) bool {
	return t.Implements(jsonMarshaler) || t.Implements(jsonUnmarshaler) || t.Implements(textMarshaler) || t.Implements(textUnmarshaler)
}

func foreign(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if custom(t) || t.Kind() != reflect.Pointer && custom(reflect.PointerTo(t)) {
		return !trusted(t)
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return foreign(t.Elem(), seen)
	case reflect.Map:
		return foreign(t.Key(), seen) || foreign(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if (f.IsExported() || f.Anonymous) && foreign(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// trusted reports whether t (through pointers) is declared in lockstep,
// outside its tests, or in one of trustedPackages.
func trusted(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if trustedPackages[p] {
		return true
	}
	return (p == module || strings.HasPrefix(p, module+"/")) && !strings.HasSuffix(p, "_test")
}
