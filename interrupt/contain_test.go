package interrupt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/interrupt"
)

// nilErr is returned as a typed nil: its Error reads the receiver.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// typedNilJSON's JSON methods return a typed nil *nilErr.
type typedNilJSON struct{}

func (typedNilJSON) MarshalJSON() ([]byte, error) {
	var e *nilErr
	return nil, e
}

func (*typedNilJSON) UnmarshalJSON([]byte) error {
	var e *nilErr
	return e
}

// panicJSON's UnmarshalJSON panics.
type panicJSON struct{}

func (*panicJSON) UnmarshalJSON([]byte) error { panic("UnmarshalJSON exploded") }

// blockJSON's JSON methods block until its channel is closed.
type blockJSON struct{ ch chan struct{} }

func (b blockJSON) MarshalJSON() ([]byte, error) { <-b.ch; return []byte("1"), nil }

// brokenAs has an As and an Unwrap that panic.
type brokenAs struct{}

func (brokenAs) Error() string { return "broken" }
func (brokenAs) As(any) bool   { panic("As exploded") }

// counting is a Resumer that counts what Ask gave up on.
type counting struct {
	fakeResumer
	abandoned, running atomic.Int64
}

func (c *counting) Abandoned() func() {
	c.abandoned.Add(1)
	c.running.Add(1)
	return func() { c.running.Add(-1) }
}

// TestApplicationCodeInAsk (issue 16 items 1 and 7): what Ask calls of the
// application's (the question's MarshalJSON, the answer type's
// UnmarshalJSON, a filter, and the errors they return) cannot panic out
// of it, and a call that blocks is given up on when ctx ends.
func TestApplicationCodeInAsk(t *testing.T) {
	ctx := context.Background()
	r := &fakeResumer{task: "t", answers: map[string]json.RawMessage{}}
	rctx := interrupt.NewContext(ctx, r)

	// A MarshalJSON returning a typed nil error: a *ValueError whose
	// message reads.
	_, err := interrupt.Ask[string](rctx, typedNilJSON{})
	var ve *interrupt.ValueError
	if !errors.As(err, &ve) || !errors.Is(err, interrupt.ErrNotSerializable) || !strings.Contains(err.Error(), "Error method panicked") {
		t.Errorf("typed nil from MarshalJSON: %v", err)
	}

	// The answer's UnmarshalJSON panics, or returns a typed nil: an
	// *AnswerError, so that the runtime takes the answer back.
	r.answers[interrupt.KeyID("t", "p")] = json.RawMessage(`{}`)
	if _, err := interrupt.AskKey[panicJSON](rctx, "p", "q"); !isAnswerError(err, "UnmarshalJSON panicked") {
		t.Errorf("UnmarshalJSON panics: %v", err)
	}
	r.answers[interrupt.KeyID("t", "n")] = json.RawMessage(`{}`)
	if _, err := interrupt.AskKey[typedNilJSON](rctx, "n", "q"); !isAnswerError(err, "Error method panicked") {
		t.Errorf("UnmarshalJSON returns a typed nil: %v", err)
	}

	// A filter that panics: a *ValueError, nothing raised.
	fctx := interrupt.WithFilter(rctx, func(json.RawMessage) json.RawMessage { panic("filter exploded") })
	before := len(r.raised)
	if _, err := interrupt.AskKey[string](fctx, "f", "q"); !errors.As(err, &ve) || len(r.raised) != before {
		t.Errorf("panicking filter: %v, raised %d", err, len(r.raised)-before)
	}

	// Is on an error whose As panics: not a pause.
	if interrupt.Is(brokenAs{}) || interrupt.Is(fmt.Errorf("w: %w", brokenAs{})) {
		t.Error("an error whose As panics is a pause")
	}

	// Decode with a panicking UnmarshalJSON: an error.
	var pj panicJSON
	if err := (interrupt.Interrupt{ID: "i", Value: json.RawMessage(`{}`)}).Decode(&pj); err == nil || !strings.Contains(err.Error(), "UnmarshalJSON panicked") {
		t.Errorf("Decode: %v", err)
	}
}

func isAnswerError(err error, text string) bool {
	var ae *interrupt.AnswerError
	return errors.As(err, &ae) && strings.Contains(err.Error(), text)
}

// TestAskGivesUp (issue 16 item 7): a question whose MarshalJSON blocks
// holds Ask no longer than its context: Ask returns an error matching
// ErrAbandoned and the context's, raises nothing, and tells the Resumer,
// which counts the call until it returns.
func TestAskGivesUp(t *testing.T) {
	r := &counting{fakeResumer: fakeResumer{task: "t"}}
	ctx, cancel := context.WithTimeout(interrupt.NewContext(context.Background(), r), 20*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := interrupt.AskKey[int](ctx, "k", blockJSON{ch: release})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Ask did not return after its context ended")
	}
	if !errors.Is(err, interrupt.ErrAbandoned) || !errors.Is(err, context.DeadlineExceeded) || interrupt.Is(err) || len(r.raised) != 0 {
		t.Errorf("err = %v, raised %d; want ErrAbandoned and the deadline, nothing raised", err, len(r.raised))
	}
	if r.abandoned.Load() != 1 || r.running.Load() != 1 {
		t.Errorf("counted %d abandoned, %d running; want 1, 1", r.abandoned.Load(), r.running.Load())
	}
	close(release)
	for deadline := time.Now().Add(time.Minute); r.running.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned encoding never reported its return")
		}
	}
}
