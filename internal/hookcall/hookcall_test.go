package hookcall_test

import (
	"context"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/observe"
)

// stackHook records, for each call, whether it ran on the goroutine of
// the test that made it (its stack holds the test's function).
type stackHook struct {
	mu     sync.Mutex
	inline []bool
	panics bool
	// inlineAnswer is what Inline says; panicInline makes it panic.
	inlineAnswer, panicInline bool
}

func (h *stackHook) record() {
	on := strings.Contains(string(debug.Stack()), "hookcall_test.TestInline")
	h.mu.Lock()
	h.inline = append(h.inline, on)
	h.mu.Unlock()
	if h.panics {
		panic("observer bug")
	}
}

func (h *stackHook) Start(ctx context.Context, e observe.Event) context.Context {
	h.record()
	return ctx
}
func (h *stackHook) End(ctx context.Context, e observe.Event)  { h.record() }
func (h *stackHook) Note(ctx context.Context, e observe.Event) { h.record() }
func (h *stackHook) TraceParent(ctx context.Context) string    { h.record(); return "" }

// inlinerHook is a stackHook that answers Inline.
type inlinerHook struct{ *stackHook }

func (h inlinerHook) Inline() bool {
	if h.panicInline {
		panic("Inline bug")
	}
	return h.inlineAnswer
}

// TestInline: a hook that declares it never blocks is called on the
// caller's goroutine even under a context that can end (no goroutine per
// event), and its panics are still recovered; any other hook is called
// on a goroutine of its own bounded by that context.
func TestInline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name   string
		hook   func(*stackHook) observe.Hook
		inline bool
	}{
		{"plain hook", func(h *stackHook) observe.Hook { return h }, false},
		{"Inline() true", func(h *stackHook) observe.Hook { h.inlineAnswer = true; return inlinerHook{h} }, true},
		{"Inline() false", func(h *stackHook) observe.Hook { return inlinerHook{h} }, false},
		{"Inline panics", func(h *stackHook) observe.Hook { h.inlineAnswer, h.panicInline = true, true; return inlinerHook{h} }, false},
		{"observe.Inline", func(h *stackHook) observe.Hook { return observe.Inline(h) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, panics := range []bool{false, true} {
				h := &stackHook{panics: panics}
				c := hookcall.New(tc.hook(h), nil, nil)
				sp := c.Start(ctx, observe.Event{Kind: observe.KindRun})
				if sp.Open() == panics {
					t.Errorf("panics=%v: span open %v", panics, sp.Open())
				}
				c.End(sp, observe.Event{Kind: observe.KindRun})
				c.Note(ctx, observe.Event{Kind: observe.KindRetry})
				_ = c.TraceParent(ctx)
				if c.Off() {
					t.Errorf("panics=%v: the hook was given up on", panics)
				}
				want := 4
				if panics {
					want = 3 // End is not called for a Start that panicked
				}
				if len(h.inline) != want {
					t.Fatalf("panics=%v: %d calls, want %d", panics, len(h.inline), want)
				}
				for i, on := range h.inline {
					if on != tc.inline {
						t.Errorf("panics=%v: call %d on the caller's goroutine: %v, want %v", panics, i, on, tc.inline)
					}
				}
			}
		})
	}
	if observe.Inline(nil) != nil {
		t.Error("observe.Inline(nil) is not nil")
	}
}

type nopHook struct{}

func (nopHook) Start(ctx context.Context, e observe.Event) context.Context { return ctx }
func (nopHook) End(ctx context.Context, e observe.Event)                   {}
func (nopHook) Note(ctx context.Context, e observe.Event)                  {}
func (nopHook) TraceParent(ctx context.Context) string                     { return "" }

// TestDirectCallsAllocateNothing: a call made on the caller's goroutine
// (a context that cannot end, or a hook that never blocks) costs the
// hook's own work and nothing more: the event is not moved to the heap.
func TestDirectCallsAllocateNothing(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := observe.Event{Kind: observe.KindTask, Thread: "t", Node: "n", TaskID: "id", Step: 3}
	for _, tc := range []struct {
		name string
		h    observe.Hook
		ctx  context.Context
	}{
		{"context that cannot end", nopHook{}, context.Background()},
		{"hook that never blocks", observe.Inline(nopHook{}), cancelled},
	} {
		c := hookcall.New(tc.h, nil, nil)
		allocs := testing.AllocsPerRun(100, func() {
			sp := c.Start(tc.ctx, e)
			c.End(sp, e)
			c.Note(tc.ctx, e)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Start, End and Note, want 0", tc.name, allocs)
		}
	}
}
