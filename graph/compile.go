package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
)

// Defaults of the compile options.
const (
	DefaultRecursionLimit = 25
	DefaultConcurrency    = 16
	DefaultLeaseTTL       = 30 * time.Second
	DefaultMaxValueBytes  = 16 << 20
	DefaultStateCache     = 256
)

// Option configures Compile.
type Option func(*config)

type config struct {
	name           string
	saver          checkpoint.Saver
	before, after  []string
	recursionLimit int
	concurrency    int
	logger         *slog.Logger
	now            checkpoint.Clock
	ids            func(after string) string
	runIDs         func() string
	runner         string
	leaseTTL       time.Duration
	maxValueBytes  int
	stateCache     int
	rand           io.Reader
	observer       observe.Hook
	durability     DurabilityMode
	errs           []error
}

// WithName names the graph (default: the state type, as
// reflect.Type.String writes it, "order.Order"). The name is stored with
// the graph's topology (see Topology and SaveTopology): the topologies of
// one name are the versions of one graph, so that the lockstep CLI can
// tell that a thread was saved under another version than the newest one
// stored. Give each graph of an application its own name when several
// graphs share a state type (agents over nodes.AgentState), and keep the
// name when the graph changes. A name is 1 to
// checkpoint.MaxTopologyNameBytes of UTF-8 without control characters;
// Compile reports another.
func WithName(name string) Option {
	return func(c *config) {
		if err := checkpoint.ValidTopologyName(name); err != nil {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("graph name %q: %v", quoteIfLong(name), err)})
		}
		c.name = name
	}
}

// WithSaver persists checkpoints with s. Without a saver a run keeps its
// state in memory only and cannot be resumed.
func WithSaver(s checkpoint.Saver) Option { return func(c *config) { c.saver = s } }

// WithInterruptBefore stops every run before the named nodes run ("*" for
// all nodes). The stop is saved; Continue or Resume passes it once.
func WithInterruptBefore(nodes ...string) Option {
	return func(c *config) { c.before = append(c.before, nodes...) }
}

// WithInterruptAfter stops every run after the named nodes ran ("*" for
// all nodes).
func WithInterruptAfter(nodes ...string) Option {
	return func(c *config) { c.after = append(c.after, nodes...) }
}

// WithRecursionLimit caps the supersteps of one run (default 25). A graph
// needing exactly n supersteps, the __start__ step included, runs with a
// limit of n.
func WithRecursionLimit(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("recursion limit %d is below 1", n)})
		}
		c.recursionLimit = n
	}
}

// WithConcurrency caps the tasks of one superstep that run at once
// (default 16).
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("concurrency %d is below 1", n)})
		}
		c.concurrency = n
	}
}

// WithLogger sends step, node and checkpoint events to l at Debug level and
// failures at Warn. The default discards them.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithClock reads time from now (checkpoint timestamps, lease timing, ID
// timestamps). The default is time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithIDs makes checkpoint IDs with next, which must return an ID that
// sorts strictly after its argument (the parent ID, or ""). The default is
// a checkpoint.IDGenerator on the configured clock.
func WithIDs(next func(after string) string) Option { return func(c *config) { c.ids = next } }

// WithRunIDs makes run IDs (which are also lease owners) with next. They
// must be unique per run: a run tells its own ledger intents from those of
// earlier runs of the thread by its ID (package nodes). The default is 128
// random bits.
func WithRunIDs(next func() string) Option { return func(c *config) { c.runIDs = next } }

// WithRandom reads the randomness of default IDs from r (for reproducible
// tests).
func WithRandom(r io.Reader) Option { return func(c *config) { c.rand = r } }

// WithLeaseTTL sets how long a run's claim on its thread lasts without
// renewal (default 30s). A run renews it at every save and every TTL/3 while
// a node runs; after a crash, another runner may take the thread over once
// the TTL has passed (the same runner at once: see WithRunner), and after a
// run that released it (one that ended, or was cancelled), at once.
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("lease TTL %v is not positive", d)})
		}
		c.leaseTTL = d
	}
}

// WithMaxValueBytes caps the encoded size of any one state value, write,
// Send argument, step result, interrupt value or resume answer (default
// 16 MiB). Larger values fail with a *SizeError before anything is
// written.
func WithMaxValueBytes(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("max value bytes %d is below 1", n)})
		}
		c.maxValueBytes = n
	}
}

// WithStateCache keeps the decoded latest state of up to n threads in
// memory (default 256; 0 turns it off; a negative n is a *CompileError).
// Cached values are validated against
// the saver's versions on every read, so the cache never serves stale data.
// Results and snapshots share their slices and maps with it: a caller that
// changes one in place changes what the next run sees (see Result.Values).
func WithStateCache(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("state cache size %d is negative (0 turns the cache off)", n)})
		}
		c.stateCache = n
	}
}

// Runnable is a compiled graph. It is safe for concurrent use: runs on
// different threads proceed in parallel, and runs on the same thread are
// serialised by the saver's lease (the loser gets an error matching
// checkpoint.ErrThreadBusy or checkpoint.ErrConflict).
type Runnable[S any] struct {
	schema    *schema
	cfg       config
	nodes     map[string]*nodeSpec[S]
	nodeNames []string // sorted
	edgesFrom map[string][]string
	joinsFrom map[string][]*joinSpec
	joinsTo   map[string][]*joinSpec
	joins     map[string]*joinSpec // by channel
	routers   map[string][]*routerSpec[S]
	before    map[string]bool
	after     map[string]bool
	cache     *frameCache[S]
	idgen     *checkpoint.IDGenerator
	edgesList [][2]string
	branchCh  map[string]string // node → its trigger channel, "branch:to:<node>"
	// branchTrig holds, per node, the one-element list of its trigger
	// channel: the triggers of a task that only its branch channel
	// triggered (read only, shared by every such task).
	branchTrig map[string][]string
	live       liveRuns         // this Runnable's runs, per thread
	abandoned  *safe.Counter    // application code given up on (see Abandoned)
	obs        *hookcall.Caller // WithObserver's hook; nil without one

	topo     Topology    // canonical
	topoData []byte      // its encoding
	topoFP   string      // its fingerprint, in the metadata of every checkpoint written
	topoMu   sync.Mutex  // serialises the first store
	topoDone atomic.Bool // stored on cfg.saver (or it keeps no topologies)
}

// Compile validates the graph and returns a Runnable. It returns every
// problem found, joined; each is a *CompileError or *UnknownNodeError, and
// each matches ErrInvalidGraph.
func (g *Graph[S]) Compile(opts ...Option) (*Runnable[S], error) {
	cfg := config{
		recursionLimit: DefaultRecursionLimit,
		concurrency:    DefaultConcurrency,
		leaseTTL:       DefaultLeaseTTL,
		maxValueBytes:  DefaultMaxValueBytes,
		stateCache:     DefaultStateCache,
		durability:     DurabilitySync,
	}
	for _, o := range opts {
		o(&cfg)
	}
	errs := append(slices.Clone(g.errs), cfg.errs...)
	if g.schema == nil {
		return nil, errors.Join(errs...)
	}
	r := &Runnable[S]{
		schema:    g.schema,
		cfg:       cfg,
		nodes:     g.nodes,
		edgesFrom: map[string][]string{},
		joinsFrom: map[string][]*joinSpec{},
		joinsTo:   map[string][]*joinSpec{},
		joins:     map[string]*joinSpec{},
		routers:   g.routers,
		edgesList: slices.Clone(g.edges),
		abandoned: &safe.Counter{},
	}
	r.branchCh = make(map[string]string, len(g.nodes))
	r.branchTrig = make(map[string][]string, len(g.nodes))
	for name := range g.nodes {
		r.nodeNames = append(r.nodeNames, name)
		r.branchCh[name] = checkpoint.BranchPrefix + name
		r.branchTrig[name] = []string{r.branchCh[name]}
	}
	sort.Strings(r.nodeNames)
	isNode := func(n string) bool { _, ok := g.nodes[n]; return ok }

	for _, e := range g.edges {
		from, to := e[0], e[1]
		switch {
		case from == END:
			errs = append(errs, &CompileError{Problem: "END cannot be the source of an edge"})
		case from != START && !isNode(from):
			errs = append(errs, &UnknownNodeError{Name: from, From: "edge source", compile: true})
		}
		switch {
		case to == START:
			errs = append(errs, &CompileError{Problem: "START cannot be the target of an edge"})
		case to != END && !isNode(to):
			errs = append(errs, &UnknownNodeError{Name: to, From: "edge target", compile: true})
		}
		if !slices.Contains(r.edgesFrom[from], to) {
			r.edgesFrom[from] = append(r.edgesFrom[from], to)
		}
	}
	for _, j := range g.joins {
		if !isNode(j.to) {
			errs = append(errs, &UnknownNodeError{Name: j.to, From: "join target", compile: true})
		}
		for _, s := range j.sources {
			if !isNode(s) {
				errs = append(errs, &UnknownNodeError{Name: s, From: "join source", compile: true})
			}
		}
		if _, dup := r.joins[j.channel]; dup {
			continue
		}
		r.joins[j.channel] = j
		r.joinsTo[j.to] = append(r.joinsTo[j.to], j)
		for _, s := range j.sources {
			r.joinsFrom[s] = append(r.joinsFrom[s], j)
		}
	}
	for from, rs := range g.routers {
		if from != START && !isNode(from) {
			errs = append(errs, &UnknownNodeError{Name: from, From: "conditional edge source", compile: true})
		}
		for _, rt := range rs {
			for _, d := range rt.dests {
				if d != END && !isNode(d) {
					errs = append(errs, &UnknownNodeError{Name: d, From: fmt.Sprintf("destinations of node %q", from), compile: true})
				}
				if d == END && rt.send != nil {
					errs = append(errs, &CompileError{Problem: "a Send cannot target END", Node: from})
				}
			}
		}
	}
	if len(r.edgesFrom[START]) == 0 && len(g.routers[START]) == 0 {
		errs = append(errs, &CompileError{Problem: "no entry point: add an edge from START"})
	} else if !r.endReachable() {
		errs = append(errs, &CompileError{Problem: "END is unreachable: every path from START loops forever"})
	}
	r.before, errs = breakpointSet(cfg.before, isNode, errs)
	r.after, errs = breakpointSet(cfg.after, isNode, errs)
	if nilSaver(cfg.saver) {
		errs = append(errs, &CompileError{Problem: fmt.Sprintf("WithSaver was given a nil %T", cfg.saver)})
	} else if cfg.saver == nil && len(cfg.before)+len(cfg.after) > 0 {
		errs = append(errs, &CompileError{Problem: "breakpoints (WithInterruptBefore, WithInterruptAfter) need a checkpoint saver (WithSaver) to resume from"})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if r.cfg.now == nil {
		r.cfg.now = time.Now
	}
	if r.cfg.logger == nil {
		r.cfg.logger = slog.New(slog.DiscardHandler)
	}
	if r.cfg.ids == nil {
		r.idgen = checkpoint.NewIDGenerator(r.cfg.now, r.cfg.rand)
		r.cfg.ids = r.idgen.Next
	}
	if r.cfg.runIDs == nil {
		rnd := r.cfg.rand
		r.cfg.runIDs = func() string { return checkpoint.NewOwnerID(rnd) }
	}
	if r.cfg.runner == "" {
		// Not from WithRandom's source: that would move every ID drawn
		// after it. WithRunner sets a reproducible name.
		r.cfg.runner = "runner-" + checkpoint.NewOwnerID(nil)
	}
	r.cache = newFrameCache[S](cfg.stateCache)
	if err := r.buildTopology(); err != nil {
		return nil, err
	}
	r.obs = hookcall.New(cfg.observer, r.abandoned, r.cfg.logger)
	return r, nil
}

// buildTopology records the compiled graph's topology, its encoding and
// its fingerprint.
func (r *Runnable[S]) buildTopology() error {
	name := r.cfg.name
	if name == "" {
		name = defaultName(reflect.TypeFor[S]())
	}
	t := Topology{Name: name, Nodes: slices.Clone(r.nodeNames)}
	for _, e := range r.edgesList {
		t.Edges = append(t.Edges, Edge{From: e[0], To: e[1]})
	}
	for _, j := range r.joins {
		t.Joins = append(t.Joins, Join{Sources: slices.Clone(j.sources), To: j.to})
	}
	for from, rs := range r.routers {
		for _, rt := range rs {
			t.Branches = append(t.Branches, Branch{From: from, Send: rt.send != nil, Destinations: slices.Clone(rt.dests)})
		}
	}
	for _, n := range r.nodeNames {
		if spec := r.nodes[n]; spec != nil && spec.sub != nil {
			t.Subgraphs = append(t.Subgraphs, SubgraphTopology{Node: n, Topology: spec.sub.topology()})
		}
	}
	for n := range r.before {
		t.InterruptBefore = append(t.InterruptBefore, n)
	}
	for n := range r.after {
		t.InterruptAfter = append(t.InterruptAfter, n)
	}
	r.topo = t.canonical()
	b, err := r.topo.Encode()
	if err != nil {
		return err
	}
	r.topoData, r.topoFP = b, checkpoint.TopologyFingerprint(b)
	return nil
}

// defaultName is the name of a graph over the state type typ: its
// reflect.Type.String, cut to checkpoint.MaxTopologyNameBytes.
func defaultName(typ reflect.Type) string {
	name := typ.String()
	for len(name) > checkpoint.MaxTopologyNameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}

// Topology returns the graph's topology (a copy), as Mermaid draws it and
// as runs store it on the saver. It never fails.
func (r *Runnable[S]) Topology() Topology { return r.topo.clone() }

// Name returns the graph's name (WithName, or its default). It never
// fails.
func (r *Runnable[S]) Name() string { return r.topo.Name }

// SaveTopology stores the graph's topology on its saver, when the saver
// keeps topologies (checkpoint.TopologyStore), and before it those of the
// graphs its subgraph nodes run (whose checkpoints name them), at every
// depth, once per Runnable: the
// first checkpoint or pending write a run or UpdateState saves is
// preceded by it (a run refused before it writes stores nothing), and
// later calls return at once. Call it when a process
// starts to record the version of the graph it runs before any thread
// runs on it (the lockstep CLI's state command compares a waiting
// thread's graph with the newest one stored). It returns nil without a
// saver or when the saver keeps no topologies, and otherwise an error
// wrapping the saver's (a store that failed but is found stored when read
// back succeeded); a run that cannot store its topology fails with that
// error before it saves anything, and the next run tries again.
func (r *Runnable[S]) SaveTopology(ctx context.Context) error {
	if r.topoDone.Load() || r.cfg.saver == nil {
		return nil
	}
	ts, ok := r.cfg.saver.(checkpoint.TopologyStore)
	if !ok {
		r.topoDone.Store(true)
		return nil
	}
	r.topoMu.Lock()
	defer r.topoMu.Unlock()
	if r.topoDone.Load() {
		return nil
	}
	// The subgraphs' own topologies first: their checkpoints name them.
	for _, st := range r.storedTopologies() {
		if err := putTopology(ctx, ts, st); err != nil {
			return err
		}
	}
	r.topoDone.Store(true)
	return nil
}

// putTopology stores st on ts.
func putTopology(ctx context.Context, ts checkpoint.TopologyStore, st checkpoint.Topology) error {
	if err := ts.PutTopology(ctx, st); err != nil {
		// A store that failed may have committed all the same (a COMMIT
		// whose reply was lost): what is stored decides.
		if got, gerr := ts.Topology(ctx, st.Fingerprint); gerr != nil || got.Name != st.Name || !bytes.Equal(got.Data, st.Data) {
			return fmt.Errorf("graph %q: store its topology %s on the saver: %w", st.Name, st.Fingerprint, err)
		}
	}
	return nil
}

// nilSaver reports whether s is a typed nil (a nil *sqlite.Saver passed as
// a checkpoint.Saver), which would panic at the first call.
func nilSaver(s checkpoint.Saver) bool {
	if s == nil {
		return false
	}
	switch v := reflect.ValueOf(s); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

func breakpointSet(names []string, isNode func(string) bool, errs []error) (map[string]bool, []error) {
	set := map[string]bool{}
	for _, n := range names {
		if n != "*" && !isNode(n) {
			errs = append(errs, &UnknownNodeError{Name: n, From: "breakpoint", compile: true})
			continue
		}
		set[n] = true
	}
	return set, errs
}

// endReachable reports whether some path from START can finish: reach END,
// a node with no outgoing edges, or a router whose destinations are open or
// include END.
func (r *Runnable[S]) endReachable() bool {
	seen := map[string]bool{}
	queue := []string{START}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n == END {
			return true
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		outs := slices.Clone(r.edgesFrom[n])
		for _, j := range r.joinsFrom[n] {
			outs = append(outs, j.to)
		}
		rs := r.routers[n]
		if len(outs) == 0 && len(rs) == 0 {
			return true // a dead end finishes its branch
		}
		for _, rt := range rs {
			if len(rt.dests) == 0 {
				return true // may route anywhere, END included
			}
			outs = append(outs, rt.dests...)
		}
		queue = append(queue, outs...)
	}
	return false
}

// Nodes returns the graph's node names, sorted.
func (r *Runnable[S]) Nodes() []string { return slices.Clone(r.nodeNames) }

// Fields returns the state's channel names: the Go names of the exported
// fields of S, as they are stored (Set also accepts their json keys).
func (r *Runnable[S]) Fields() []string { return r.schema.names() }
