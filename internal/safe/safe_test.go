package safe_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/internal/safe"
)

// nilDeref is the common tool bug: a typed nil whose methods read their
// receiver.
type nilDeref struct{ msg string }

func (e *nilDeref) Error() string        { return e.msg }
func (e *nilDeref) Is(target error) bool { return e.msg == target.Error() }
func (e *nilDeref) As(target any) bool   { return e.msg != "" }
func (e *nilDeref) Unwrap() error        { return errors.New(e.msg) }

// badIs has a working Error but an Is and an As that panic.
type badIs struct{}

func (badIs) Error() string      { return "bad is" }
func (badIs) Is(error) bool      { panic("Is") }
func (badIs) As(target any) bool { panic("As") }

func TestWrap(t *testing.T) {
	var typedNil *nilDeref
	base := errors.New("base")
	for _, tc := range []struct {
		name     string
		err      error
		panics   bool
		msg      string
		is       error // errors.Is(wrapped, is) must hold
		notIs    error // and this must not (nor panic)
		typeName string
	}{
		{"nil", nil, false, "", nil, nil, ""},
		{"plain", base, false, "base", base, fs.ErrNotExist, "*errors.errorString"},
		{"wrapped", errWrap{base}, false, "wrap: base", base, fs.ErrNotExist, "safe_test.errWrap"},
		{"typed nil whose Error reads its receiver", typedNil, true, "", nil, nil, ""},
		{"Is and As panic", badIs{}, false, "bad is", nil, base, "safe_test.badIs"},
		{"a context error", context.DeadlineExceeded, false, "context deadline exceeded", context.DeadlineExceeded, context.Canceled, "context.deadlineExceededError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w := safe.Wrap(tc.err)
			if (p != nil) != tc.panics {
				t.Fatalf("panic %v, want panic %v", p, tc.panics)
			}
			if p != nil {
				if w != nil || len(p.Stack) == 0 || !strings.Contains(p.String(), "nil pointer") {
					t.Errorf("Wrap = %v, %+v; want no error and the nil dereference with its stack", w, p)
				}
				return
			}
			if tc.err == nil {
				if w != nil {
					t.Errorf("safe.Wrap(nil) = %v", w)
				}
				return
			}
			if w.Error() != tc.msg {
				t.Errorf("text %q, want %q", w.Error(), tc.msg)
			}
			if tc.is != nil && !errors.Is(w, tc.is) {
				t.Errorf("errors.Is(%v, %v) is false", w, tc.is)
			}
			if tc.notIs != nil && errors.Is(w, tc.notIs) {
				t.Errorf("errors.Is(%v, %v) is true", w, tc.notIs)
			}
			var target *nilDeref
			if errors.As(w, &target) {
				t.Errorf("errors.As found a *nilDeref in %v", w)
			}
			if got := safe.TypeName(w); got != tc.typeName {
				t.Errorf("TypeName %q, want %q", got, tc.typeName)
			}
			if _, again := safe.Wrap(w); again != w {
				t.Errorf("Wrap of an *Error wrapped it again")
			}
		})
	}
}

type errWrap struct{ err error }

func (e errWrap) Error() string { return "wrap: " + e.err.Error() }
func (e errWrap) Unwrap() error { return e.err }

// TestWrapAs: errors.As sees the application's error through *Error.
func TestWrapAs(t *testing.T) {
	pe := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	_, w := safe.Wrap(errWrap{pe})
	var got *fs.PathError
	if !errors.As(w, &got) || got != pe || !errors.Is(w, fs.ErrNotExist) {
		t.Errorf("errors.As through *Error: %v", got)
	}
}

func TestCall(t *testing.T) {
	if p := safe.Call(func() {}); p != nil {
		t.Errorf("Call of a function that returns: %v", p)
	}
	p := safe.Call(func() { panic("boom") })
	if p == nil || p.Value != "boom" || !strings.Contains(string(p.Stack), "TestCall") {
		t.Errorf("Call of a panicking function: %+v", p)
	}
	var typedNil *nilDeref
	if p := safe.Call(func() { panic(typedNil) }); p == nil || p.String() != "<nil>" {
		t.Errorf("a panic with a typed nil error formats as %q", p)
	}
}

func TestBound(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		fn        func() int
		want      int
		panics    bool
		abandoned bool
	}{
		{"no deadline: on the caller's goroutine", context.Background(), func() int { return 1 }, 1, false, false},
		{"no deadline: a panic", context.Background(), func() int { panic("x") }, 0, true, false},
		{"a context that can end", expired, func() int { return 2 }, 2, false, false},
		{"a context that can end: a panic", expired, func() int { panic("y") }, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c safe.Counter
			v, p, err := safe.Bound(tc.ctx, &c, "the call", tc.fn)
			if v != tc.want || (p != nil) != tc.panics || err != nil || c.Total() != 0 {
				t.Errorf("Bound = %v, %v, %v (%d abandoned); want %v, panic %v", v, p, err, c.Total(), tc.want, tc.panics)
			}
		})
	}
}

// TestBoundAbandons: a call that blocks past its context's end is given
// up on, counted while it runs, and its caller gets a typed error that
// matches the context's.
func TestBoundAbandons(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var c safe.Counter
	release := make(chan struct{})
	returned := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := safe.Bound(ctx, &c, "the slow encoder", func() int {
			defer close(returned)
			<-release
			return 1
		})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Bound did not return after its context ended")
	}
	var ae *safe.AbandonedError
	if !errors.As(err, &ae) || ae.What != "the slow encoder" || !errors.Is(err, safe.ErrAbandoned) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want an *safe.AbandonedError matching ErrAbandoned and the deadline", err)
	}
	if c.Total() != 1 || c.Running() != 1 {
		t.Errorf("counted %d abandoned, %d running; want 1, 1", c.Total(), c.Running())
	}
	close(release)
	<-returned
	for deadline := time.Now().Add(time.Minute); c.Running() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if c.Total() != 1 || c.Running() != 0 {
		t.Errorf("after it returned: %d abandoned, %d running; want 1, 0", c.Total(), c.Running())
	}
}

type (
	plain     struct{ A, B string }
	withAny   struct{ V any }
	ownJSON   struct{}
	ownText   int
	nested    struct{ P *[]map[string]ownJSON }
	trustedOK struct {
		T   time.Time
		R   json.RawMessage
		N   json.Number
		Big *big.Int
	}
	recursive struct {
		Next *recursive
		Name string
	}
	hidden struct {
		v any // unexported: encoding/json never sees it
	}
)

var _ = hidden{v: 1} // the field exists, unexported

func (ownJSON) MarshalJSON() ([]byte, error) { return []byte("{}"), nil }
func (*ownText) UnmarshalText([]byte) error  { return nil }

func TestForeign(t *testing.T) {
	for _, tc := range []struct {
		t    reflect.Type
		want bool
	}{
		{nil, true},
		{reflect.TypeFor[string](), false},
		{reflect.TypeFor[plain](), false},
		{reflect.TypeFor[[]plain](), false},
		{reflect.TypeFor[withAny](), true},
		{reflect.TypeFor[any](), true},
		{reflect.TypeFor[error](), true},
		{reflect.TypeFor[ownJSON](), true},
		{reflect.TypeFor[ownText](), true}, // pointer receiver
		{reflect.TypeFor[map[ownText]string](), true},
		{reflect.TypeFor[nested](), true},
		{reflect.TypeFor[trustedOK](), false},
		{reflect.TypeFor[recursive](), false},
		{reflect.TypeFor[hidden](), false},
	} {
		if got := safe.Foreign(tc.t); got != tc.want {
			t.Errorf("safe.Foreign(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}
