package workers_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/pgtest"
	"github.com/lockstepgo/lockstep/internal/pgtest/pgschema"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/workers"
)

var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const leaseTTL = 30 * time.Second

// fakeClock only moves when a test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// doc is the test graph's state: the inputs applied, in order, and what
// the nodes did with them.
type doc struct {
	Inputs []string `lockstep:"append"`
	Log    []string `lockstep:"append"`
	// Gate makes the work node wait on an approval for its input.
	Gate     bool
	Decision string
}

// in is the input named name.
func in(name string) graph.Update[doc] { return graph.Set(doc{Inputs: []string{name}}, "Inputs") }

// gated is input whose work waits on an approval.
func gated(name string) graph.Update[doc] {
	return graph.Set(doc{Inputs: []string{name}, Gate: true}, "Inputs", "Gate")
}

// saverKind opens the savers of a test: a memory saver shared by every
// worker, or one SQLite file with a saver per worker (as separate
// processes would have).
type saverKind struct {
	name string
	open func(t *testing.T, now func() time.Time) func() workers.Store
}

var saverKinds = []saverKind{
	{"memory", func(t *testing.T, now func() time.Time) func() workers.Store {
		s := checkpoint.NewMemorySaver(now)
		return func() workers.Store { return s }
	}},
	{"sqlite", func(t *testing.T, now func() time.Time) func() workers.Store {
		path := filepath.Join(t.TempDir(), "work.db")
		return func() workers.Store {
			s, err := sqlite.Open(path, sqlite.Config{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}},
	{"postgres", func(t *testing.T, now func() time.Time) func() workers.Store {
		url, schema := pgSchema(t)
		return func() workers.Store {
			db, err := postgres.Open(context.Background(), url, postgres.Config{Schema: schema, Now: now, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db.Saver()
		}
	}},
}

// pgURL is the test database's URL, with the skip rule of every Postgres
// test (pgtest.URL).
var pgURL = pgtest.URL

// pgSchema returns the test database's URL and a schema of the test's
// own, dropped once the test's other cleanups have run (pgschema.New).
func pgSchema(t testing.TB) (url, schema string) {
	t.Helper()
	return pgschema.New(t, "w_")
}

// fixture is one test's database, clock and witnesses; each worker is a
// Runnable of its own (its own runner) on a saver of its own for the
// database.
type fixture struct {
	t     *testing.T
	clock *fakeClock
	saver func() workers.Store
	// first is the saver the next worker gets (then each gets a new one).
	first checkpoint.Saver

	mu   sync.Mutex
	runs map[string]int // "thread/node/input": node executions

	inFlight, peak atomic.Int64
	// hold, if set, is called by the work node before it writes (it may
	// block until the test lets it go, or until ctx ends).
	hold func(ctx context.Context, thread, input string) error
}

func newFixture(t *testing.T, k saverKind) *fixture {
	c := &fakeClock{t: epoch}
	f := &fixture{t: t, clock: c, saver: k.open(t, c.Now), runs: map[string]int{}}
	f.first = f.saver()
	return f
}

func (f *fixture) ran(thread, node, input string) {
	f.mu.Lock()
	f.runs[thread+"/"+node+"/"+input]++
	f.mu.Unlock()
}

func (f *fixture) runCount(thread, node, input string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[thread+"/"+node+"/"+input]
}

func last(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[len(xs)-1]
}

// worker compiles the graph on a saver of its own: START → take → work →
// END, work asking for an approval when Gate is set.
func (f *fixture) worker(opts ...graph.Option) (*graph.Runnable[doc], checkpoint.Saver) {
	f.t.Helper()
	s := f.first
	if f.first == nil {
		s = f.saver()
	}
	f.first = nil
	r, err := graph.New[doc]().
		AddNode("take", func(ctx context.Context, d doc) (graph.Update[doc], error) {
			info, _ := graph.TaskFrom(ctx)
			f.ran(info.Thread, "take", last(d.Inputs))
			return graph.Set(doc{Log: []string{"take:" + last(d.Inputs)}}, "Log"), nil
		}).
		AddNode("work", func(ctx context.Context, d doc) (graph.Update[doc], error) {
			info, _ := graph.TaskFrom(ctx)
			input := last(d.Inputs)
			f.ran(info.Thread, "work", input)
			n := f.inFlight.Add(1)
			defer f.inFlight.Add(-1)
			for {
				p := f.peak.Load()
				if n <= p || f.peak.CompareAndSwap(p, n) {
					break
				}
			}
			if f.hold != nil {
				if err := f.hold(ctx, info.Thread, input); err != nil {
					return graph.Update[doc]{}, err
				}
			}
			out := doc{Log: []string{"work:" + input}}
			fields := []string{"Log"}
			if d.Gate {
				dec, err := interrupt.Ask[approval.Decision](ctx, approvalRequest(f.t, f.clock.Now(), info.Thread, input))
				if err != nil {
					return graph.Update[doc]{}, err
				}
				out.Decision, out.Gate = string(dec.Outcome), false
				fields = append(fields, "Decision", "Gate")
			}
			return graph.Set(out, fields...), nil
		}).
		AddEdge(graph.START, "take").
		AddEdge("take", "work").
		AddEdge("work", graph.END).
		Compile(append([]graph.Option{graph.WithSaver(s), graph.WithClock(f.clock.Now), graph.WithLeaseTTL(leaseTTL)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return r, s
}

// pool is a pool of a new worker.
func (f *fixture) pool(o workers.Options) (*workers.Pool[doc], *graph.Runnable[doc]) {
	f.t.Helper()
	r, _ := f.worker()
	p, err := workers.New(r, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return p, r
}

// approvalRequest is the request a gated work node raises.
func approvalRequest(t testing.TB, now time.Time, thread, input string) approval.Request {
	args, err := json.Marshal(map[string]string{"thread": thread, "input": input})
	if err != nil {
		t.Fatal(err)
	}
	h, err := approval.ArgsHash("publish", args)
	if err != nil {
		t.Fatal(err)
	}
	return approval.Request{
		Type: approval.RequestType, Tool: "publish", Args: args, ArgsHash: h, CallID: "call-" + input,
		Rationale: "publishing is one-way", Risk: approval.RiskHigh, Rule: "risk:high", Owner: "editors",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

// state reads a thread.
func state(t *testing.T, r *graph.Runnable[doc], thread string) graph.Snapshot[doc] {
	t.Helper()
	s, err := r.GetState(context.Background(), thread)
	if err != nil {
		t.Fatalf("GetState(%s): %v", thread, err)
	}
	return s
}

// gate blocks the next work nodes of the threads it is armed for (one
// per arm), until released or the node's context ends; later nodes of
// the thread run through.
type gate struct {
	mu      sync.Mutex
	armed   map[string]int
	blocked map[string][]chan struct{}
	entered chan string
}

func newGate() *gate {
	return &gate{armed: map[string]int{}, blocked: map[string][]chan struct{}{}, entered: make(chan string, 64)}
}

// arm makes the next work node of thread block.
func (g *gate) arm(thread string) {
	g.mu.Lock()
	g.armed[thread]++
	g.mu.Unlock()
}

// release lets the blocked nodes of thread go.
func (g *gate) release(thread string) {
	g.mu.Lock()
	for _, ch := range g.blocked[thread] {
		close(ch)
	}
	delete(g.blocked, thread)
	g.mu.Unlock()
}

// releaseAll lets every blocked node go and disarms the gate.
func (g *gate) releaseAll() {
	g.mu.Lock()
	for th, chs := range g.blocked {
		for _, ch := range chs {
			close(ch)
		}
		delete(g.blocked, th)
	}
	clear(g.armed)
	g.mu.Unlock()
}

func (g *gate) hold(ctx context.Context, thread, input string) error {
	g.mu.Lock()
	if g.armed[thread] == 0 {
		g.mu.Unlock()
		return nil
	}
	g.armed[thread]--
	ch := make(chan struct{})
	g.blocked[thread] = append(g.blocked[thread], ch)
	g.mu.Unlock()
	g.entered <- thread + "/" + input
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitEntered waits (bounded) for a blocked node.
func (g *gate) waitEntered(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-g.entered:
		if got != want {
			t.Fatalf("node entered for %s, want %s", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no node entered for %s within 30s", want)
	}
}
