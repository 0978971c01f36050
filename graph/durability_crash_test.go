package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The durability crash loop: a child process runs one order (14 steps, a
// ledgered charge at step 3, an approval at step 6, a ledgered shipment
// at step 7) in one durability mode and is SIGKILLed at a random point;
// the parent checks the files after every death, and a later child
// carries the order on (Invoke with a RunKey, Resume, Continue) until it
// is done.
const (
	envDurChild = "LOCKSTEP_GRAPH_DURABILITY_CHILD"
	envDurDir   = "LOCKSTEP_GRAPH_DURABILITY_DIR"
	envDurMode  = "LOCKSTEP_GRAPH_DURABILITY_MODE"
	durThread   = "order-1"
	durGate     = "gate"
	// durMaxKills is how many children of one order may be killed before
	// one runs without a plan and must finish it.
	durMaxKills = 6
)

// durNodes are the order's nodes in step order (node i runs at step i+1).
var durNodes = []string{"n1", "n2", "charge", "n4", "n5", durGate, "ship", "n8", "n9", "n10", "n11", "n12", "n13", "n14"}

func durStep(node string) int { return slices.Index(durNodes, node) + 1 }

// TestMain's child dispatch calls durabilityChild when envDurChild is set.
func durabilityChild() int {
	if err := runDurabilityChild(); err != nil {
		fmt.Fprintln(os.Stderr, "durability child:", err)
		return 1
	}
	return 0
}

func runDurabilityChild() error {
	ch, err := crashtest.ChildFromEnv()
	if err != nil {
		return err
	}
	dir, mode := os.Getenv(envDurDir), graph.DurabilityMode(os.Getenv(envDurMode))
	rep := crashtest.NewReporter(os.Stdout)
	hook := crashtest.NewHook(ch.Plan, rep, nil)
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(dir, "lockstep.db"), sqlite.Config{Synchronous: sqlite.SyncNormal, Hook: hook.Hit})
	if err != nil {
		return err
	}
	defer s.Close()
	led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{})
	if err != nil {
		return err
	}
	wPath := filepath.Join(dir, "witness")
	w, err := crashtest.OpenWitness(wPath, ch.Gen)
	if err != nil {
		return err
	}
	defer w.Close()
	d := durDeps{w: w, wPath: wPath, led: crashtest.AckLedger(led, rep), hit: hook.Hit}
	g := graph.New[State]()
	prev := graph.START
	for _, n := range durNodes {
		switch n {
		case "charge", "ship":
			g.AddNode(n, d.ledgered(n))
		case durGate:
			g.AddNode(n, d.gate())
		default:
			g.AddNode(n, d.plain(n))
		}
		g.AddEdge(prev, n)
		prev = n
	}
	// One runner name for every child: a restarted child takes back the
	// lease of the one that died at once.
	r, err := g.Compile(graph.WithSaver(chainAck{Saver: crashtest.AckSaver(s, rep), s: s, rep: rep}),
		graph.WithDurability(mode), graph.WithRunner("durability-desk"))
	if err != nil {
		return err
	}
	ctx = testhook.With(ctx, hook.Hit)
	for range 20 {
		snap, err := r.GetState(ctx, durThread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			_, err = r.Invoke(ctx, durThread, graph.Update[State]{}, graph.RunKey("order-1"))
		case err != nil:
		case snap.Status == graph.StatusDone:
			rep.Hits(hook.Hits())
			rep.Done()
			return rep.Err()
		case snap.Status == graph.StatusWaiting:
			_, err = r.Resume(ctx, durThread, graph.Command[State]{Resume: "approved"})
		default:
			_, err = r.Continue(ctx, durThread)
		}
		if err != nil {
			return err
		}
	}
	return errors.New("the order did not finish in 20 runs")
}

// chainAck acknowledges a chain of checkpoints once its one transaction
// committed (crashtest.AckSaver saves a chain one Put at a time).
type chainAck struct {
	checkpoint.Saver
	s   *sqlite.Saver
	rep *crashtest.Reporter
}

func (c chainAck) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	if err := c.s.PutChain(ctx, reqs); err != nil {
		return err
	}
	for _, req := range reqs {
		for _, tw := range req.ParentWrites {
			if crashtest.Finished(tw) {
				c.rep.TaskAck(req.Thread, tw.TaskID)
			}
		}
		c.rep.Ack(req.Thread, req.Checkpoint.ID)
	}
	return nil
}

type durDeps struct {
	w     *crashtest.Witness
	wPath string
	led   ledger.Ledger
	hit   func(string)
}

// ran records a node's run: "run" by task (for VerifyReruns) and "node"
// by name (for the steps a crash cost).
func (d durDeps) ran(ctx context.Context, node string) error {
	info, _ := graph.TaskFrom(ctx)
	if err := d.w.Record("run", info.TaskID, info.Thread); err != nil {
		return err
	}
	return d.w.Record("node", node, info.Thread)
}

func (d durDeps) plain(node string) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		if err := d.ran(ctx, node); err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Log: []string{node}}, "Log"), nil
	}
}

func (d durDeps) gate() graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		if err := d.ran(ctx, durGate); err != nil {
			return graph.Update[State]{}, err
		}
		ans, err := interrupt.Ask[string](ctx, "ship the order?")
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Log: []string{durGate + ":" + ans}, Answer: ans}, "Log", "Answer"), nil
	}
}

// ledgered makes an effect behind the idempotency ledger, keyed by thread
// and operation (as package nodes keys a tool's write: never by task). A
// pending intent of a run that died is reconciled with the service, which
// dedupes by key: the witness says whether the effect happened.
func (d durDeps) ledgered(op string) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		var zero graph.Update[State]
		if err := d.ran(ctx, op); err != nil {
			return zero, err
		}
		info, _ := graph.TaskFrom(ctx)
		key := op + ":" + info.Thread
		done := ledger.Outcome{Result: json.RawMessage(`"ok"`)}
		in := ledger.Intent{Key: key, Tool: op, ArgsHash: "args", Owner: info.Run + "/" + info.TaskID, Lease: time.Minute, Thread: info.Thread, Run: info.Run}
		_, started, err := d.led.Begin(ctx, in)
		var unknown *ledger.OutcomeUnknownError
		if errors.As(err, &unknown) {
			effects, rerr := crashtest.ReadWitness(d.wPath)
			if rerr != nil {
				return zero, rerr
			}
			if slices.ContainsFunc(effects, func(e crashtest.Effect) bool { return e.Kind == op && e.Key == key }) {
				if err := d.led.Resolve(ctx, key, done); err != nil {
					return zero, err
				}
				return graph.Set(State{Log: []string{op}}, "Log"), nil
			}
			in.TakeOver = true
			_, started, err = d.led.Begin(ctx, in)
		}
		if err != nil {
			return zero, err
		}
		if started {
			if err := d.w.Record(op, key, info.Thread); err != nil {
				return zero, err
			}
			d.hit(string(crashtest.AfterToolEffect))
			if err := d.led.Complete(ctx, key, in.Owner, done); err != nil {
				return zero, err
			}
		}
		return graph.Set(State{Log: []string{op}}, "Log"), nil
	}
}

// TestDurabilityCrashLoop kills children of the order desk at random
// points in each durability mode and checks, after every death, what the
// mode promises survives: every acknowledged checkpoint and task; in sync
// mode at most the step in progress lost, in async mode at most the steps
// in flight (1 + 8 + 1), every step of the saved chain present; in exit
// mode nothing saved but the checkpoints the order paused or ended on
// (and its input). In every mode the charge and the approved shipment
// happen once, and the finished order is the same.
func TestDurabilityCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	seed := rand.Uint64() >> 1
	if s := os.Getenv("LOCKSTEP_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	cycles := 40
	if raceEnabled {
		cycles = 8
	}
	t.Logf("seed %d (LOCKSTEP_SEED=%d go test -run '^TestDurabilityCrashLoop$' ./graph replays it)", seed, seed)
	space := crashtest.PlanSpace{DelayShare: 0.25, MinDelay: 2 * time.Millisecond, MaxDelay: 60 * time.Millisecond, MaxOccurrence: map[crashtest.Point]int{}}
	for _, p := range []crashtest.Point{crashtest.AfterNode, crashtest.BeforeSave, crashtest.PutBegin, crashtest.PutBeforeCommit,
		crashtest.PutAfterCommit, crashtest.AfterSave, crashtest.WritesAfterCommit, crashtest.AfterToolEffect} {
		space.Points = append(space.Points, p)
		space.MaxOccurrence[p] = 8
	}
	space.MaxOccurrence[crashtest.AfterToolEffect] = 2
	for mi, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(mi)))
			dl := &durLoop{t: t, mode: mode, byPoint: map[string]int{}}
			dl.newOrder()
			for c := range cycles {
				plan, err := space.Draw(rng)
				if err != nil {
					t.Fatal(err)
				}
				if dl.kills >= durMaxKills {
					plan = crashtest.Plan{}
				}
				dl.gen++
				res, err := crashtest.Run(context.Background(), crashtest.Spawn{
					Env:  []string{envDurChild + "=1", envDurDir + "=" + dl.dir, envDurMode + "=" + string(mode)},
					Plan: plan, Gen: dl.gen, Timeout: 2 * time.Minute,
				})
				if err != nil {
					t.Fatalf("seed %d cycle %d plan %s: %v", seed, c, plan, err)
				}
				dl.hist.Add(res)
				if res.Killed {
					dl.kills++
					at := "delay"
					if res.Kill != nil {
						at = string(res.Kill.Point)
					}
					dl.byPoint[at]++
				} else {
					dl.done++
				}
				if err := dl.check(res); err != nil {
					t.Fatalf("seed %d cycle %d plan %s (killed at %q): %v", seed, c, plan, res.KilledAt(), err)
				}
				if res.Done {
					dl.orders++
					dl.newOrder()
				}
			}
			if dl.orders == 0 {
				t.Fatalf("no order finished in %d cycles", cycles)
			}
			if killed := cycles - dl.done; killed < cycles/3 {
				t.Fatalf("only %d of %d children were killed", killed, cycles)
			}
			t.Logf("%d cycles, %d children killed (%v), %d orders finished", cycles, cycles-dl.done, dl.byPoint, dl.orders)
		})
	}
}

type durLoop struct {
	t      *testing.T
	mode   graph.DurabilityMode
	dir    string
	hist   *crashtest.History
	gen    int
	kills  int
	orders int
	// done counts the children that finished; byPoint the others by
	// where they died.
	done    int
	byPoint map[string]int
}

func (dl *durLoop) newOrder() {
	dl.dir = dl.t.TempDir()
	dl.hist = &crashtest.History{}
	dl.kills = 0
}

// check runs the checkers on the order's files after child res ended.
func (dl *durLoop) check(res *crashtest.Result) error {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(dl.dir, "lockstep.db"), sqlite.Config{})
	if err != nil {
		return err
	}
	defer s.Close()
	vs := crashtest.VerifyIntegrity(ctx, s.DB())
	states, cv := crashtest.VerifyCheckpoints(ctx, s, []string{durThread}, dl.hist.Checkpoints, crashtest.CheckpointOptions{})
	vs = append(vs, cv...)
	witness, err := crashtest.ReadWitness(filepath.Join(dl.dir, "witness"))
	if err != nil {
		return err
	}
	var effects, runs, nodes []crashtest.Effect
	for _, e := range witness {
		switch e.Kind {
		case "run":
			runs = append(runs, e)
		case "node":
			nodes = append(nodes, e)
		default:
			effects = append(effects, e)
		}
	}
	vs = append(vs, crashtest.VerifyEffects(effects, dl.hist.Effects)...)
	vs = append(vs, crashtest.VerifyReruns(dl.hist.Tasks, runs)...)
	if err := vs.Err(); err != nil {
		return err
	}

	// What the mode promises survives.
	var steps []int // of the saved checkpoints, oldest first
	head := -2      // the head's step; -2: no checkpoint
	if st := states[durThread]; st != nil && st.Head != "" {
		tps, err := s.List(ctx, durThread, checkpoint.ListOptions{MetadataOnly: true})
		if err != nil {
			return err
		}
		for _, tp := range tps {
			steps = append(steps, tp.Checkpoint.Metadata.Step)
		}
		slices.Reverse(steps)
		head = steps[len(steps)-1]
	}
	// The steps the dead child ran past the head (a node run twice in
	// one child, as the gate is when it pauses and is resumed, is one
	// step).
	past := map[int]bool{}
	for _, n := range nodes {
		if n.Gen == res.Gen && durStep(n.Key) > head {
			past[durStep(n.Key)] = true
		}
	}
	lost := len(past)
	switch dl.mode {
	case graph.DurabilitySync, graph.DurabilityAsync:
		// Every step up to the head has its checkpoint.
		if len(steps) > 0 {
			want := []int{}
			for i := -1; i <= head; i++ {
				want = append(want, i)
			}
			if diff := cmp.Diff(want, steps); diff != "" {
				return fmt.Errorf("%s: saved steps (-want +got):\n%s", dl.mode, diff)
			}
		}
		bound := 1
		if dl.mode == graph.DurabilityAsync {
			bound = 10
		}
		if res.Killed && lost > bound {
			return fmt.Errorf("%s: the crash cost %d steps past the head (step %d), at most %d promised", dl.mode, lost, head, bound)
		}
	case graph.DurabilityExit:
		// Only the input, the pause before the gate and the end.
		for _, st := range steps {
			if st != -1 && st != durStep(durGate)-1 && st != len(durNodes) {
				return fmt.Errorf("exit: a checkpoint of step %d was saved (steps %v): exit saves only the input, the pause at step %d and the end", st, steps, durStep(durGate)-1)
			}
		}
	}
	if !res.Done {
		return nil
	}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: durThread}, checkpoint.GetOptions{})
	if err != nil {
		return err
	}
	var log []string
	for _, b := range tp.Checkpoint.Channels["Log"] {
		var items []string
		if err := json.Unmarshal(b.Data, &items); err != nil {
			return err
		}
		log = append(log, items...)
	}
	want := slices.Clone(durNodes)
	want[slices.Index(want, durGate)] = durGate + ":approved"
	if diff := cmp.Diff(want, log); diff != "" {
		return fmt.Errorf("the finished order's log (-want +got):\n%s", diff)
	}
	for _, op := range []string{"charge", "ship"} {
		if n := len(slices.DeleteFunc(slices.Clone(effects), func(e crashtest.Effect) bool { return e.Kind != op })); n != 1 {
			return fmt.Errorf("%s happened %d times, want once", op, n)
		}
	}
	return nil
}
