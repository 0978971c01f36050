package crash_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// R05: parallel branch, partial completion and write ordering (LangGraph
// #976, #8039), as a focused crash test modelled on the crash loop.
//
// The graph: START → x, y in parallel; join → z. x is fast and makes a
// destructive call through the executor and its idempotency ledger (pay);
// the payment service is NOT idempotent (every call it receives is a
// charge in the witness), so a charge count of exactly one depends on the
// engine alone: x must not run again once its writes are saved, and if it
// does run again (its writes were not saved), the ledger must answer it.
// y is slow. x finishes first, so its writes are saved as pending writes
// (PutWrites) while y runs; y's writes go into the step's checkpoint (Put).
//
// A child process forces one of two orders with a sequencer around the
// saver and the nodes:
//
//   - writes-first: y returns only after x's PutWrites returned;
//   - put-first: x's PutWrites is held until the step's checkpoint Put
//     begins (LangGraph #8039's bad order), or, since lockstep's runTasks
//     waits for a finished branch's save before it saves the step, until y
//     returned and branchHold passed without the Put beginning.
//
// and SIGKILLs itself at one named point of the step (inside x's
// pending-writes transaction, after y's node, around the step's
// checkpoint). A clean child then recovers the thread. The checks: x's
// writes were durable before any checkpoint that supersedes them (the
// sequencer's barrier check), integrity_check, every acknowledged
// checkpoint present, no acknowledged task run again, x not run again when
// its writes had committed, the charge in the witness exactly once, and a
// final state equal to the crash-free reference of both orders at
// GOMAXPROCS 1, 2 and 4.

const (
	branchRole   = "crashbranch"
	envBranch    = "LOCKSTEP_BRANCH"
	branchThread = "branch-1"
	// branchHold is how long put-first holds x's pending writes after y
	// returned, waiting for the step's Put to begin.
	branchHold = 50 * time.Millisecond
	// branchWait bounds every wait of the sequencer: a wait that long
	// means the order cannot happen.
	branchWait = 5 * time.Second
)

// The orders the sequencer forces.
const (
	orderWritesFirst = "writes-first"
	orderPutFirst    = "put-first"
)

// The events a child reports ("EVENT <name>" notes), in the order they
// happen.
const (
	evXReturned   = "x-returned"     // x's node returned
	evXDurable    = "x-writes-saved" // x's PutWrites returned nil after its transaction
	evYReturned   = "y-returned"     // y's node returned
	evHoldExpired = "hold-expired"   // put-first: the step's Put did not begin while x's writes were held
	evPutBegin    = "put-begin"      // the step's checkpoint Put began
	evBarrier     = "barrier-broken"
)

// branchConfig is what the parent hands a child.
type branchConfig struct {
	Dir   string          `json:"dir"`
	Order string          `json:"order,omitempty"` // "" in a recovery child: no sequencing
	Kill  crashtest.Point `json:"kill,omitempty"`
	// Sabotage breaks the protection on purpose, for the negative
	// controls: "no-ledger" (the executor runs pay without its ledger),
	// "async-writes" (x's PutWrites returns at once and saves in the
	// background after the step's Put began: LangGraph #8039).
	Sabotage string `json:"sabotage,omitempty"`
}

type branchState struct {
	Log []string `lockstep:"append"`
}

type branchPayArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

type branchPayment struct {
	Payment string `json:"payment"`
}

// branchSeq is a child's sequencer: it forces the order, reports events,
// checks the barrier, and kills the process at its point in the phase that
// point is meant for.
type branchSeq struct {
	order, sabotage string
	kill            crashtest.Point

	mu                                     sync.Mutex
	xRet, xAfterSeen, xInWrites, xReturned bool // xReturned: x's PutWrites returned nil
	xDurable, yRet, yAfterSeen, zStarted   bool
	putSeen, killed                        bool

	xAfter, xWritesRet, yRetC, putC chan struct{}
}

func newBranchSeq(cfg branchConfig) *branchSeq {
	return &branchSeq{order: cfg.Order, sabotage: cfg.Sabotage, kill: cfg.Kill,
		xAfter: make(chan struct{}), xWritesRet: make(chan struct{}), yRetC: make(chan struct{}), putC: make(chan struct{})}
}

func branchEvent(name string) { fmt.Printf("EVENT %s\n", name) } // one write per line

func branchWaitFor(ctx context.Context, c <-chan struct{}, what string) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(branchWait):
		return fmt.Errorf("crash branch: waited %v for %s", branchWait, what)
	}
}

// hit is the child's hook: it kills the process at the sequencer's point
// in its phase.
func (s *branchSeq) hit(point string) {
	p := crashtest.Point(point)
	s.mu.Lock()
	isY := false
	if p == crashtest.AfterNode {
		switch {
		case s.xRet && !s.xAfterSeen && !s.yRet:
			s.xAfterSeen = true
			close(s.xAfter)
		case s.yRet && !s.yAfterSeen:
			s.yAfterSeen, isY = true, true
		}
	}
	var due bool
	switch p {
	case crashtest.WritesBegin, crashtest.WritesBeforeCommit, crashtest.WritesAfterCommit:
		due = s.xInWrites
	case crashtest.AfterNode:
		due = isY
	case crashtest.BeforeSave, crashtest.PutBegin, crashtest.PutBeforeCommit, crashtest.PutAfterCommit, crashtest.AfterSave:
		due = s.xReturned && s.yRet && !s.zStarted // the step's save
	}
	die := due && !s.killed && s.kill == p
	if die {
		s.killed = true
	}
	s.mu.Unlock()
	if die {
		crashtest.NewReporter(os.Stdout).Kill(p, 1)
		crashtest.Kill()
	}
}

func (s *branchSeq) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// xDone is called by x before it returns.
func (s *branchSeq) xDone() {
	s.set(func() { s.xRet = true })
	branchEvent(evXReturned)
}

// yGo is called by y before it returns: it waits for its turn.
func (s *branchSeq) yGo(ctx context.Context) error {
	switch s.order {
	case orderWritesFirst:
		if err := branchWaitFor(ctx, s.xWritesRet, "x's pending writes"); err != nil {
			return err
		}
	case orderPutFirst:
		if err := branchWaitFor(ctx, s.xAfter, "x to finish"); err != nil {
			return err
		}
	}
	s.set(func() { s.yRet = true })
	branchEvent(evYReturned)
	close(s.yRetC)
	return nil
}

// branchSaver is the sequencer's hold on the saver: x's pending writes
// and the step's checkpoint.
type branchSaver struct {
	checkpoint.Saver
	seq *branchSeq
}

func branchTask(tws []checkpoint.TaskWrites, node string) bool {
	return slices.ContainsFunc(tws, func(tw checkpoint.TaskWrites) bool { return tw.Node == node && crashtest.Finished(tw) })
}

func (b *branchSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	s := b.seq
	if !branchTask(req.Tasks, "x") {
		return b.Saver.PutWrites(ctx, req)
	}
	if s.order == orderPutFirst && s.sabotage != "async-writes" {
		select {
		case <-s.putC:
			branchEvent(evBarrier) // the step's Put began while x's writes were held
		case <-s.yRetC:
			select {
			case <-s.putC:
				branchEvent(evBarrier)
			case <-time.After(branchHold):
				branchEvent(evHoldExpired)
			}
		case <-time.After(branchWait):
		}
	}
	if s.sabotage == "async-writes" {
		// LangGraph #8039: the save is submitted, not done.
		go func() {
			select {
			case <-s.putC:
			case <-time.After(branchWait):
			}
			_ = b.Saver.PutWrites(context.WithoutCancel(ctx), req)
		}()
		s.set(func() { s.xReturned = true })
		close(s.xWritesRet)
		return nil
	}
	s.set(func() { s.xInWrites = true })
	err := b.Saver.PutWrites(ctx, req)
	s.set(func() { s.xInWrites = false })
	if err != nil {
		return err
	}
	s.set(func() { s.xReturned, s.xDurable = true, true })
	branchEvent(evXDurable)
	close(s.xWritesRet)
	return nil
}

func (b *branchSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	s := b.seq
	if req.Checkpoint.Metadata.Step == 1 {
		broken := false
		s.set(func() {
			// x ran in this process and finished: its writes must be
			// durable, or in this checkpoint's transaction.
			broken = s.xRet && !s.xDurable && !branchTask(req.ParentWrites, "x")
			if !s.putSeen {
				s.putSeen = true
				close(s.putC)
			}
		})
		branchEvent(evPutBegin)
		if broken {
			branchEvent(evBarrier)
		}
	}
	return b.Saver.Put(ctx, req)
}

// branchDeps is what the nodes use; the parent builds the graph with zero
// deps, only to read snapshots.
type branchDeps struct {
	seq     *branchSeq
	witness *crashtest.Witness
	ex      *nodes.Executor
}

func branchGraph(d branchDeps) *graph.Graph[branchState] {
	logged := func(name string, fn graph.NodeFunc[branchState]) graph.NodeFunc[branchState] {
		return func(ctx context.Context, s branchState) (graph.Update[branchState], error) {
			if info, ok := graph.TaskFrom(ctx); ok && d.witness != nil {
				if err := d.witness.Record("run", info.TaskID, info.Thread); err != nil {
					return graph.Update[branchState]{}, err
				}
				if err := d.witness.Record("node", name, info.TaskID); err != nil {
					return graph.Update[branchState]{}, err
				}
			}
			return fn(ctx, s)
		}
	}
	x := func(ctx context.Context, s branchState) (graph.Update[branchState], error) {
		if d.ex == nil {
			return graph.Update[branchState]{}, errors.New("crash branch: no executor in this process")
		}
		res, err := d.ex.Execute(ctx, nodes.Call{ID: "pay-1", Tool: "pay", Args: json.RawMessage(`{"order":"o-1","amount":42}`)})
		if err != nil {
			return graph.Update[branchState]{}, err
		}
		var p branchPayment
		if err := json.Unmarshal(res.Output, &p); err != nil {
			return graph.Update[branchState]{}, err
		}
		d.seq.xDone()
		return graph.Set(branchState{Log: []string{"x:" + p.Payment}}, "Log"), nil
	}
	y := func(ctx context.Context, s branchState) (graph.Update[branchState], error) {
		if err := d.seq.yGo(ctx); err != nil {
			return graph.Update[branchState]{}, err
		}
		return graph.Set(branchState{Log: []string{"y:done"}}, "Log"), nil
	}
	z := func(ctx context.Context, s branchState) (graph.Update[branchState], error) {
		d.seq.set(func() { d.seq.zStarted = true })
		return graph.Set(branchState{Log: []string{fmt.Sprintf("z:after-%d", len(s.Log))}}, "Log"), nil
	}
	return graph.New[branchState]().
		AddNode("x", logged("x", x)).
		AddNode("y", logged("y", y)).
		AddNode("z", logged("z", z)).
		AddEdge(graph.START, "x").
		AddEdge(graph.START, "y").
		AddJoin([]string{"x", "y"}, "z").
		AddEdge("z", graph.END)
}

func branchPaths(dir string) (db, witness string) {
	return filepath.Join(dir, "branch.db"), filepath.Join(dir, "witness")
}

// runBranchChild is an R05 child: it runs (or recovers) the thread to its
// end, unless its sequencer kills it.
func runBranchChild() int {
	ctx := context.Background()
	var cfg branchConfig
	ch, err := systemtest.ChildConfig(envBranch, &cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := branchChild(ctx, cfg, ch.Gen); err != nil {
		fmt.Fprintln(os.Stderr, "crash branch child:", err)
		return 5
	}
	return 0
}

func branchChild(ctx context.Context, cfg branchConfig, gen int) error {
	rep := crashtest.NewReporter(os.Stdout)
	seq := newBranchSeq(cfg)
	// Compressed time, as in the crash loop: a restarted process never
	// waits for a dead one's leases.
	off := time.Duration(gen) * systemtest.GenerationSkew
	now := func() time.Time { return time.Now().Add(off) }
	dbPath, wPath := branchPaths(cfg.Dir)
	w, err := crashtest.OpenWitness(wPath, gen)
	if err != nil {
		return err
	}
	defer w.Close()
	s, err := sqlite.Open(dbPath, sqlite.Config{Now: now, Hook: seq.hit})
	if err != nil {
		return err
	}
	defer s.Close()
	pay, err := nodes.NewTool("pay", "Charge an order (the service is not idempotent).",
		func(ctx context.Context, a branchPayArgs, env nodes.Env) (branchPayment, error) {
			key := env.IdempotencyKey()
			if key == "" { // the no-ledger sabotage: the executor derives no key
				key = "no-key-" + a.Order
			}
			if err := w.Record("charge", key, a.Order); err != nil {
				return branchPayment{}, err
			}
			return branchPayment{Payment: "pay_" + key[:min(12, len(key))]}, nil
		}, nodes.Destructive(approval.RiskMedium))
	if err != nil {
		return err
	}
	opts := []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove()), nodes.WithClock(systemtest.Clock{NowFunc: now})}
	if cfg.Sabotage != "no-ledger" {
		l, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: now})
		if err != nil {
			return err
		}
		opts = append(opts, nodes.WithLedger(crashtest.AckLedger(l, rep)))
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{pay}, opts...)
	if err != nil {
		return err
	}
	saver := crashtest.AckSaver(&branchSaver{Saver: s, seq: seq}, rep)
	run, err := branchGraph(branchDeps{seq: seq, witness: w, ex: ex}).Compile(graph.WithSaver(saver), graph.WithClock(now))
	if err != nil {
		return err
	}
	ctx = testhook.With(ctx, seq.hit) // the runs meet the sequencer at the graph's points
	deadline := time.Now().Add(branchWait)
	for {
		snap, err := run.GetState(ctx, branchThread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			_, err = run.Invoke(ctx, branchThread, graph.Set(branchState{Log: []string{"in"}}, "Log"))
		case err != nil:
		case snap.Status == graph.StatusDone:
			rep.Done()
			return rep.Err()
		case snap.Status == graph.StatusPending:
			_, err = run.Continue(ctx, branchThread)
		default:
			return fmt.Errorf("thread is %s: %+v", snap.Status, snap.Tasks)
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the thread did not finish")
		}
	}
}

// branchRun is the parent's view of one R05 case: its files and what its
// children acknowledged.
type branchRun struct {
	t    *testing.T
	dir  string
	hist crashtest.History
	gen  int
	cpu  int
	// events are every child's EVENT notes, one slice per child.
	events [][]string
}

func (br *branchRun) child(ctx context.Context, cfg branchConfig) *crashtest.Result {
	br.t.Helper()
	br.gen++
	cfg.Dir = br.dir
	b, err := json.Marshal(cfg)
	if err != nil {
		br.t.Fatal(err)
	}
	res, err := crashtest.Run(ctx, crashtest.Spawn{
		Env:     []string{"LOCKSTEP_CHILD=" + branchRole, envBranch + "=" + string(b), fmt.Sprintf("GOMAXPROCS=%d", br.cpu)},
		Gen:     br.gen,
		Timeout: branchWait + 10*time.Second,
	})
	if err != nil {
		br.t.Fatalf("child %d (%+v, GOMAXPROCS=%d): %v", br.gen, cfg, br.cpu, err)
	}
	br.hist.Add(res)
	var evs []string
	for _, n := range res.Notes {
		if e, ok := strings.CutPrefix(n, "EVENT "); ok {
			evs = append(evs, e)
		}
	}
	br.events = append(br.events, evs)
	return res
}

// branchOutcome is what the checks found on the files.
type branchOutcome struct {
	vs      crashtest.Violations
	charges int
	xRuns   int
	status  string
	log     []string
}

func (br *branchRun) verify(ctx context.Context) branchOutcome {
	br.t.Helper()
	dbPath, wPath := branchPaths(br.dir)
	s, err := sqlite.Open(dbPath, sqlite.Config{})
	if err != nil {
		br.t.Fatal(err)
	}
	defer s.Close()
	run, err := branchGraph(branchDeps{}).Compile(graph.WithSaver(s))
	if err != nil {
		br.t.Fatal(err)
	}
	var out branchOutcome
	out.vs = append(out.vs, crashtest.VerifyIntegrity(ctx, s.DB())...)
	states, cv := crashtest.VerifyCheckpoints(ctx, s, []string{branchThread}, br.hist.Checkpoints, crashtest.CheckpointOptions{})
	out.vs = append(out.vs, cv...)
	if st := states[branchThread]; st != nil {
		out.status = st.Status
	}
	witness, err := crashtest.ReadWitness(wPath)
	if err != nil {
		br.t.Fatal(err)
	}
	var charges, runs []crashtest.Effect
	for _, e := range witness {
		switch {
		case e.Kind == "charge":
			charges = append(charges, e)
		case e.Kind == "run":
			runs = append(runs, e)
		case e.Kind == "node" && e.Key == "x":
			out.xRuns++
		}
	}
	out.charges = len(charges)
	out.vs = append(out.vs, crashtest.VerifyEffects(charges, br.hist.Effects)...)
	out.vs = append(out.vs, crashtest.VerifyReruns(br.hist.Tasks, runs)...)
	for _, evs := range br.events {
		if slices.Contains(evs, evBarrier) {
			out.vs = append(out.vs, &crashtest.Violation{Check: crashtest.CheckAcked, Thread: branchThread, Key: "x",
				Detail: fmt.Sprintf("the step's checkpoint was saved before x's pending writes were durable (events %v)", evs)})
		}
	}
	if snap, err := run.GetState(ctx, branchThread); err == nil {
		out.log = snap.Values.Log
	}
	return out
}

// recover runs clean children until the thread is done (at most 3).
func (br *branchRun) recover(ctx context.Context, cfg branchConfig) {
	br.t.Helper()
	for range 3 {
		res := br.child(ctx, branchConfig{Sabotage: cfg.Sabotage})
		if err := br.verify(ctx).vs.Err(); err != nil {
			br.t.Errorf("after recovery child %d: %v", br.gen, err)
		}
		if res.Done {
			return
		}
	}
	br.t.Fatalf("the thread did not finish in 3 recovery children")
}

// branchOrderEvents are the events each order must show in a crash-free
// child: the proof that the sequencer forced it.
var branchOrderEvents = map[string][]string{
	orderWritesFirst: {evXReturned, evXDurable, evYReturned, evPutBegin},
	orderPutFirst:    {evXReturned, evYReturned, evHoldExpired, evXDurable, evPutBegin},
}

var branchCPUs = []int{1, 2, 4}

// TestCrashBranchOrdering (R05) kills a child at each point of the
// parallel step in both write orders (see the top of this file) and checks
// that the recovered thread equals the crash-free reference, x's charge
// happened exactly once, x did not run again once its writes had
// committed, and x's writes were durable before the step's checkpoint.
func TestCrashBranchOrdering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	ctx := t.Context()
	// The crash-free reference, in both orders at every GOMAXPROCS: the
	// order is forced and the result does not depend on the host
	// (LangGraph #8039 depended on the number of threads).
	var reference []string
	for _, order := range []string{orderWritesFirst, orderPutFirst} {
		for _, cpu := range branchCPUs {
			br := &branchRun{t: t, dir: t.TempDir(), cpu: cpu}
			res := br.child(ctx, branchConfig{Order: order})
			if !res.Done {
				t.Fatalf("reference %s GOMAXPROCS=%d did not finish: %s", order, cpu, res.Stderr)
			}
			if diff := cmp.Diff(branchOrderEvents[order], br.events[0]); diff != "" {
				t.Errorf("reference %s GOMAXPROCS=%d: the order was not forced (-want +got):\n%s", order, cpu, diff)
			}
			out := br.verify(ctx)
			if err := out.vs.Err(); err != nil {
				t.Fatalf("reference %s GOMAXPROCS=%d: %v", order, cpu, err)
			}
			if out.charges != 1 || out.xRuns != 1 {
				t.Fatalf("reference %s GOMAXPROCS=%d: %d charges, x ran %d times", order, cpu, out.charges, out.xRuns)
			}
			if reference == nil {
				reference = out.log
			}
			if diff := cmp.Diff(reference, out.log); diff != "" {
				t.Errorf("reference %s GOMAXPROCS=%d differs from the first reference (-want +got):\n%s", order, cpu, diff)
			}
		}
	}
	t.Logf("reference final state: %q", reference)

	// xSaved: the kill comes after x's pending writes committed, so x
	// must not run again.
	type point struct {
		kill   crashtest.Point
		xSaved map[string]bool // by order
	}
	both := map[string]bool{orderWritesFirst: true, orderPutFirst: true}
	points := []point{
		{crashtest.WritesBegin, nil},
		{crashtest.WritesBeforeCommit, nil},
		{crashtest.WritesAfterCommit, both},
		{crashtest.AfterNode, map[string]bool{orderWritesFirst: true}}, // y's node returned
		{crashtest.BeforeSave, both},
		{crashtest.PutBegin, both},
		{crashtest.PutBeforeCommit, both},
		{crashtest.PutAfterCommit, both},
		{crashtest.AfterSave, both},
	}
	i := 0
	for _, order := range []string{orderWritesFirst, orderPutFirst} {
		for _, p := range points {
			cpu := branchCPUs[i%len(branchCPUs)]
			i++
			t.Run(fmt.Sprintf("%s/%s/cpu=%d", order, p.kill, cpu), func(t *testing.T) {
				br := &branchRun{t: t, dir: t.TempDir(), cpu: cpu}
				cfg := branchConfig{Order: order, Kill: p.kill}
				res := br.child(ctx, cfg)
				if !res.Killed || res.Kill == nil || res.Kill.Point != p.kill {
					t.Fatalf("the child was to die at %s and died at %q (done %v)\n%s", p.kill, res.KilledAt(), res.Done, res.Stderr)
				}
				if err := br.verify(ctx).vs.Err(); err != nil {
					t.Fatalf("after the kill: %v", err)
				}
				br.recover(ctx, cfg)
				out := br.verify(ctx)
				if out.status != "done" {
					t.Errorf("the thread is %q after recovery", out.status)
				}
				if out.charges != 1 {
					t.Errorf("x's charge happened %d times, want 1", out.charges)
				}
				if p.xSaved[order] && out.xRuns != 1 {
					t.Errorf("x ran %d times though its writes had committed before the kill, want 1", out.xRuns)
				}
				if diff := cmp.Diff(reference, out.log); diff != "" {
					t.Errorf("the recovered state differs from the crash-free reference (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestCrashBranchOrderingDetects is R05's negative control: with the
// protection removed, the same checks fail.
func TestCrashBranchOrderingDetects(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, tc := range []struct {
		sabotage string
		order    string
		kill     crashtest.Point
		want     crashtest.CheckName
	}{
		// x's writes are not saved when the child dies; x runs again and
		// without the ledger the service charges again.
		{"no-ledger", orderWritesFirst, crashtest.WritesBeforeCommit, crashtest.CheckEffectOnce},
		{"no-ledger", orderPutFirst, crashtest.WritesBeforeCommit, crashtest.CheckEffectOnce},
		// LangGraph #8039: PutWrites returns before it saved; the step's
		// checkpoint is saved first, and the barrier check sees it.
		{"async-writes", orderWritesFirst, crashtest.PutBegin, crashtest.CheckAcked},
	} {
		t.Run(tc.sabotage+"/"+tc.order, func(t *testing.T) {
			ctx := t.Context()
			br := &branchRun{t: t, dir: t.TempDir(), cpu: 2}
			cfg := branchConfig{Order: tc.order, Kill: tc.kill, Sabotage: tc.sabotage}
			res := br.child(ctx, cfg)
			if !res.Killed {
				t.Fatalf("not killed (%q)\n%s", res.KilledAt(), res.Stderr)
			}
			var found crashtest.Violations
			for range 3 {
				res := br.child(ctx, branchConfig{Sabotage: tc.sabotage})
				out := br.verify(ctx)
				found = append(found, out.vs.Of(tc.want)...)
				if res.Done {
					t.Logf("%d charges, x ran %d times", out.charges, out.xRuns)
					break
				}
			}
			if len(found) == 0 {
				t.Fatalf("sabotage %s went unnoticed by %s", tc.sabotage, tc.want)
			}
			t.Logf("found: %v", found[0])
		})
	}
}
