package graph

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Reserved node names.
const (
	// START is the virtual node a run begins at: edges from START choose
	// the first nodes.
	START = "__start__"
	// END is the virtual node that finishes a branch: edges to END add no
	// task.
	END = "__end__"
)

// MaxNameBytes caps node names and thread IDs.
const MaxNameBytes = 256

// NodeFunc is a node: it reads the state of the step (which it must treat as
// read-only: slices and maps are shared with the runtime) and returns the
// fields it writes. Returning an error fails the task; returning an
// interrupt pauses it (see package interrupt).
type NodeFunc[S any] func(ctx context.Context, state S) (Update[S], error)

// Router chooses the next nodes after a node from the state with that
// node's own writes applied (but not its siblings'). END is allowed.
type Router[S any] func(ctx context.Context, state S) ([]string, error)

// SendRouter fans out after a node: every returned Send becomes a push task
// of the next superstep.
type SendRouter[S any] func(ctx context.Context, state S) ([]Send[S], error)

// RetryPolicy re-runs a failed node in the same step. Pauses (interrupts)
// and context cancellation are never retried.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; values below 2 mean no retry.
	MaxAttempts int
	// InitialInterval is the wait before the second attempt (default
	// 100ms); each later wait is multiplied by BackoffFactor (default 2)
	// and capped at MaxInterval (default 10s).
	InitialInterval time.Duration
	BackoffFactor   float64
	MaxInterval     time.Duration
	// RetryOn decides which errors are retried; nil retries all of them.
	RetryOn func(error) bool
}

func (p RetryPolicy) backoff(attempt int) time.Duration {
	d := p.InitialInterval
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	f := p.BackoffFactor
	if f <= 0 {
		f = 2
	}
	limit := p.MaxInterval
	if limit <= 0 {
		limit = 10 * time.Second
	}
	for i := 1; i < attempt && d < limit; i++ {
		d = time.Duration(float64(d) * f)
	}
	return min(d, limit)
}

// NodeOption configures one node.
type NodeOption func(*nodeOptions)

type nodeOptions struct {
	retry *RetryPolicy
}

// WithRetry gives a node a retry policy.
func WithRetry(p RetryPolicy) NodeOption {
	return func(o *nodeOptions) { o.retry = &p }
}

type nodeSpec[S any] struct {
	name string
	fn   NodeFunc[S]
	opts nodeOptions
}

type joinSpec struct {
	sources []string // sorted
	to      string
	channel string
}

type routerSpec[S any] struct {
	route Router[S]
	send  SendRouter[S]
	dests []string
}

// Graph builds a state graph over the state type S, a struct whose exported
// fields are the channels. Builder methods record problems instead of
// returning them; Compile reports them all. A Graph is not safe for
// concurrent use; the Runnable it compiles to is.
type Graph[S any] struct {
	schema  *schema
	errs    []error
	nodes   map[string]*nodeSpec[S]
	edges   [][2]string
	joins   []*joinSpec
	routers map[string][]*routerSpec[S]
}

// New returns an empty graph over S. Struct tags `lockstep:"append"` and
// `lockstep:"merge"` give fields reducers; `lockstep:"-"` leaves a field out
// of the state.
func New[S any]() *Graph[S] {
	g := &Graph[S]{nodes: map[string]*nodeSpec[S]{}, routers: map[string][]*routerSpec[S]{}}
	s, errs := newSchema(reflect.TypeFor[S]())
	g.schema, g.errs = s, errs
	return g
}

func (g *Graph[S]) fail(err error) *Graph[S] {
	g.errs = append(g.errs, err)
	return g
}

// validName checks a node name: 1 to MaxNameBytes bytes of UTF-8 without
// control characters, not starting with "__", and free of ':' '+' ','
// which the runtime uses in channel names.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty node name")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("node name of %d bytes (max %d)", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("node name is not valid UTF-8")
	case strings.HasPrefix(name, "__"):
		return fmt.Errorf("node names starting with \"__\" are reserved")
	case strings.ContainsAny(name, ":+,"):
		return fmt.Errorf("node name contains ':', '+' or ','")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("node name contains a control character")
		}
	}
	return nil
}

// AddNode adds a node. Duplicate or invalid names are reported by Compile.
func (g *Graph[S]) AddNode(name string, fn NodeFunc[S], opts ...NodeOption) *Graph[S] {
	if err := validName(name); err != nil {
		return g.fail(&CompileError{Problem: err.Error(), Node: quoteIfLong(name)})
	}
	if _, dup := g.nodes[name]; dup {
		return g.fail(&CompileError{Problem: "duplicate node", Node: name})
	}
	if fn == nil {
		return g.fail(&CompileError{Problem: "nil node function", Node: name})
	}
	spec := &nodeSpec[S]{name: name, fn: fn}
	for _, o := range opts {
		o(&spec.opts)
	}
	g.nodes[name] = spec
	return g
}

// AddEdge runs to in the superstep after from. from may be START; to may be
// END.
func (g *Graph[S]) AddEdge(from, to string) *Graph[S] {
	g.edges = append(g.edges, [2]string{from, to})
	return g
}

// AddJoin runs to once, in the superstep after every source has run (a
// waiting edge). Sources that run in different supersteps are remembered
// until the last one arrives.
func (g *Graph[S]) AddJoin(sources []string, to string) *Graph[S] {
	if len(sources) == 0 {
		return g.fail(&CompileError{Problem: "join with no sources", Node: to})
	}
	srcs := slices.Clone(sources)
	slices.Sort(srcs)
	srcs = slices.Compact(srcs)
	g.joins = append(g.joins, &joinSpec{sources: srcs, to: to, channel: "join:" + strings.Join(srcs, "+") + ":" + to})
	return g
}

// AddConditionalEdges routes after from with route. destinations lists the
// nodes route may return (END included); it validates routes at run time and
// draws the edges. With no destinations, route may return any node.
func (g *Graph[S]) AddConditionalEdges(from string, route Router[S], destinations ...string) *Graph[S] {
	if route == nil {
		return g.fail(&CompileError{Problem: "nil router", Node: from})
	}
	g.routers[from] = append(g.routers[from], &routerSpec[S]{route: route, dests: destinations})
	return g
}

// AddSendEdges fans out after from: the Sends route returns become push
// tasks of the next superstep. destinations lists the nodes the Sends may
// target.
func (g *Graph[S]) AddSendEdges(from string, route SendRouter[S], destinations ...string) *Graph[S] {
	if route == nil {
		return g.fail(&CompileError{Problem: "nil send router", Node: from})
	}
	g.routers[from] = append(g.routers[from], &routerSpec[S]{send: route, dests: destinations})
	return g
}

// Reducer sets how field combines writes (see Reducer). A field that does
// not exist, or a reducer that does not fit its type, is reported by
// Compile.
func (g *Graph[S]) Reducer(field string, r Reducer) *Graph[S] {
	if g.schema == nil {
		return g
	}
	if err := g.schema.setReducer(field, r); err != nil {
		return g.fail(err)
	}
	return g
}

func quoteIfLong(s string) string {
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "..."
	}
	return s
}
