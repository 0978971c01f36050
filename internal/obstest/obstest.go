// Package obstest is an observe.Hook that records what it is told, for
// lockstep's own tests: every operation becomes a Span with its parent,
// every note an entry of its span, so that a test can compare the tree a
// run made with the one it expects.
package obstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lockstepgo/lockstep/observe"
)

// Span is one recorded operation.
type Span struct {
	ID     int
	Parent int // 0 for a root
	Start  observe.Event
	End    *observe.Event // nil while open
	Notes  []observe.Event
}

// Recorder records spans and notes. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	spans []*Span
	roots []observe.Event // notes outside any span
	// Trace is the trace ID (32 hex digits) of the traceparents
	// TraceParent makes; the zero value uses a fixed one.
	Trace string
}

type key struct{}

// Start records e as a new span under the one ctx carries.
func (r *Recorder) Start(ctx context.Context, e observe.Event) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := &Span{ID: len(r.spans) + 1, Start: e}
	if p, ok := ctx.Value(key{}).(int); ok {
		sp.Parent = p
	}
	r.spans = append(r.spans, sp)
	return context.WithValue(ctx, key{}, sp.ID)
}

// End records e as the end of the span ctx carries.
func (r *Recorder) End(ctx context.Context, e observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := ctx.Value(key{}).(int)
	if !ok {
		panic("obstest: End without a span")
	}
	sp := r.spans[id-1]
	if sp.End != nil {
		panic(fmt.Sprintf("obstest: span %d (%s) ended twice", id, sp.Start.Kind))
	}
	if sp.Start.Kind != e.Kind {
		panic(fmt.Sprintf("obstest: span %d started as %s ends as %s", id, sp.Start.Kind, e.Kind))
	}
	sp.End = &e
}

// Note records e in the span ctx carries.
func (r *Recorder) Note(ctx context.Context, e observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := ctx.Value(key{}).(int); ok {
		r.spans[id-1].Notes = append(r.spans[id-1].Notes, e)
		return
	}
	r.roots = append(r.roots, e)
}

// TraceParent returns a traceparent whose span ID is the span ctx
// carries.
func (r *Recorder) TraceParent(ctx context.Context) string {
	id, ok := ctx.Value(key{}).(int)
	if !ok {
		return ""
	}
	trace := r.Trace
	if trace == "" {
		trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	}
	return fmt.Sprintf("00-%s-%016x-01", trace, id)
}

// Spans returns copies of the recorded spans, in start order.
func (r *Recorder) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Span, len(r.spans))
	for i, sp := range r.spans {
		out[i] = *sp
		out[i].Notes = slices.Clone(sp.Notes)
	}
	return out
}

// Open returns the spans that have not ended.
func (r *Recorder) Open() []Span {
	var out []Span
	for _, sp := range r.Spans() {
		if sp.End == nil {
			out = append(out, sp)
		}
	}
	return out
}

// Tree draws the spans as an indented outline, one line per span:
// "kind name outcome [note-kind note-op]...", where name is what label
// returns for the span. Children are in start order, or sorted by their
// line when sorted is set (for operations that run in parallel).
func (r *Recorder) Tree(label func(Span) string, sorted bool) string {
	spans := r.Spans()
	kids := map[int][]Span{}
	for _, sp := range spans {
		kids[sp.Parent] = append(kids[sp.Parent], sp)
	}
	line := func(sp Span) string {
		out := "open"
		if sp.End != nil {
			out = sp.End.Outcome
		}
		s := fmt.Sprintf("%s %s %s", sp.Start.Kind, label(sp), out)
		for _, n := range sp.Notes {
			s += fmt.Sprintf(" [%s %s]", n.Kind, n.Op)
		}
		return s
	}
	var b strings.Builder
	var walk func(parent, depth int)
	walk = func(parent, depth int) {
		ks := kids[parent]
		if sorted {
			slices.SortStableFunc(ks, func(x, y Span) int { return strings.Compare(line(x), line(y)) })
		}
		for _, sp := range ks {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), line(sp))
			walk(sp.ID, depth+1)
		}
	}
	walk(0, 0)
	return b.String()
}
