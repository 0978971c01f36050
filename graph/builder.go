package graph

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/retry"
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

// NodeOption configures one node.
type NodeOption func(*nodeOptions)

type nodeOptions struct {
	retry   *retry.Policy
	retryOn func(error) bool
	errs    []error // found by the options, reported by Compile
}

// WithRetry re-runs the node in the same step when it fails, as p says:
// up to p.Attempts() attempts in all, waiting p.Wait(n) after the n-th
// failure (see package retry: the zero Policy makes three attempts with
// no wait between them). Pauses (interrupts) and the run's context ending
// are never retried; WithRetryOn narrows which errors are. A p that
// p.Validate refuses makes Compile fail with a *CompileError matching
// ErrInvalidGraph that wraps its *retry.PolicyError. Reading p.Rand is
// the application's code, contained like RetryOn.
func WithRetry(p retry.Policy) NodeOption {
	return func(o *nodeOptions) {
		if err := p.Validate(); err != nil {
			o.errs = append(o.errs, err)
		}
		o.retry = &p
	}
}

// WithRetryOn decides which of the node's errors WithRetry retries: fn
// reports whether err is worth another attempt (without WithRetryOn, or
// with a nil fn, every error is). fn is the application's code: a panic
// in it is a *PanicError of the node, and one still running when the
// run's context ends is given up on. WithRetryOn without WithRetry makes
// Compile fail with a *CompileError: the node would never be retried.
func WithRetryOn(fn func(err error) bool) NodeOption {
	return func(o *nodeOptions) { o.retryOn = fn }
}

type nodeSpec[S any] struct {
	name string
	fn   NodeFunc[S]
	opts nodeOptions
	sub  subgraphHost // the compiled graph the node runs (AddSubgraph); nil for others
}

type joinSpec struct {
	sources []string // sorted
	to      string
	channel string
}

type routerSpec[S any] struct {
	route Router[S]
	send  SendRouter[S]
	mixed RouteFunc[S] // names and Sends together (AddRouteEdges)
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
	for _, err := range spec.opts.errs {
		g.fail(&CompileError{Problem: "invalid retry policy", Node: name, Err: err})
	}
	if spec.opts.retryOn != nil && spec.opts.retry == nil {
		g.fail(&CompileError{Problem: "WithRetryOn without WithRetry: the node is never retried", Node: name})
	}
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

// Reducer sets how field combines writes (see Reducer); field is its Go
// name or its json key, as in Set. A field that does not exist, or a
// reducer that does not fit its type, is reported by Compile.
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
