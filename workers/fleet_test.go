package workers_test

// The multi-process tests: worker processes (this test binary re-executed,
// see TestMain) on one SQLite file. TestCrashLoopThreeWorkers kills them
// at named write points; TestSubmitEightByFour submits from 8 goroutines
// in each of 4 processes.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/workers"
)

// The environment of a worker process.
const (
	envChild   = "WORKERS_TEST_CHILD" // "crash" or "load": the child's role
	envDB      = "WORKERS_TEST_DB"
	envWitness = "WORKERS_TEST_WITNESS"
	envThreads = "WORKERS_TEST_THREADS" // how many bookings (crash) or threads (load)
	envPool    = "WORKERS_TEST_POOL_PLAN"
	envName    = "WORKERS_TEST_NAME" // the load child's name, unique per process
	envInputs  = "WORKERS_TEST_INPUTS"
)

// fleetLease is the workers' lease in the multi-process tests: how long a
// killed worker's threads wait before another takes them. It is long
// enough that a live worker starved of CPU on a loaded machine keeps its
// leases (a lease that lapses under a live run is the case fencing
// refuses, not one this loop is about).
const fleetLease = 3 * time.Second

// booking is the crash loop's state: a booking reserved, charged once
// (through the ledger, as a tool call is) and confirmed. A gated booking's
// charge waits on an approval (its decision recorded).
type booking struct {
	Booking  string
	Log      []string `lockstep:"append"`
	Charge   string
	Gated    bool
	Decision string
}

func bookingThread(i int) string { return fmt.Sprintf("booking-%03d", i) }

// bookingGraph is the graph every worker process runs. charge makes the
// one side effect: a line in the witness file, under the ledger's intent.
func bookingGraph(led ledger.Ledger, w *crashtest.Witness, witnessPath string, hit func(string)) *graph.Graph[booking] {
	step := func(name string) graph.NodeFunc[booking] {
		return func(ctx context.Context, s booking) (graph.Update[booking], error) {
			time.Sleep(2 * time.Millisecond) // a stand-in for a call
			return graph.Set(booking{Log: []string{name}}, "Log"), nil
		}
	}
	charge := func(ctx context.Context, s booking) (graph.Update[booking], error) {
		out, fields := booking{Log: []string{"charge"}}, []string{"Log", "Charge"}
		if s.Gated {
			dec, err := interrupt.Ask[approval.Decision](ctx, bookingRequest(s.Booking))
			if err != nil {
				return graph.Update[booking]{}, err
			}
			out.Decision, fields = string(dec.Outcome), append(fields, "Decision")
			if dec.Outcome != approval.Approved {
				return graph.Set(out, fields...), nil
			}
		}
		id, err := chargeOnce(ctx, led, w, witnessPath, hit, s.Booking)
		if err != nil {
			return graph.Update[booking]{}, err
		}
		out.Charge = id
		return graph.Set(out, fields...), nil
	}
	return graph.New[booking]().
		AddNode("reserve", step("reserve")).
		AddNode("charge", charge).
		AddNode("confirm", step("confirm")).
		AddEdge(graph.START, "reserve").AddEdge("reserve", "charge").AddEdge("charge", "confirm")
}

// bookingRequest is the approval a gated booking's charge asks for.
func bookingRequest(b string) approval.Request {
	args := []byte(`{"booking":"` + b + `"}`)
	h, _ := approval.ArgsHash("charge", args)
	now := time.Now()
	return approval.Request{Type: approval.RequestType, Tool: "charge", Args: args, ArgsHash: h, CallID: "call-" + b,
		Rationale: "charging a card is one-way", Risk: approval.RiskHigh, Rule: "risk:high", Owner: "front-desk",
		CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
}

// chargeOnce charges booking b once: the intent before the effect, the
// outcome after; an intent a dead run left is reconciled against the
// witness (the downstream's own record), as a tool's reconcile hook does.
func chargeOnce(ctx context.Context, led ledger.Ledger, w *crashtest.Witness, witnessPath string, hit func(string), b string) (string, error) {
	key := "charge:" + b
	in := ledger.Intent{Key: key, Tool: "charge", ArgsHash: "h-" + b, Owner: newOwner(), Lease: time.Minute}
	if info, ok := graph.TaskFrom(ctx); ok && info.Leased {
		in.Thread, in.Run = info.Thread, info.Run
	}
	e, started, err := led.Begin(ctx, in)
	if errors.Is(err, ledger.ErrOutcomeUnknown) {
		effects, rerr := crashtest.ReadWitness(witnessPath)
		if rerr != nil {
			return "", rerr
		}
		if slices.ContainsFunc(effects, func(e crashtest.Effect) bool { return e.Kind == "charge" && e.Key == key }) {
			out := ledger.Outcome{Result: []byte(`"ch-` + b + `"`)}
			if err := led.Resolve(ctx, key, out); err != nil && !errors.Is(err, ledger.ErrNotHeld) {
				return "", err
			}
			return "ch-" + b, nil
		}
		in.TakeOver = true
		e, started, err = led.Begin(ctx, in)
	}
	if err != nil {
		return "", err
	}
	if !started {
		return strings.Trim(string(e.Outcome.Result), `"`), nil
	}
	if err := w.Record("charge", key, b); err != nil {
		return "", err
	}
	hit(string(crashtest.AfterToolEffect))
	if err := led.Complete(ctx, key, in.Owner, ledger.Outcome{Result: []byte(`"ch-` + b + `"`)}); err != nil {
		return "", err
	}
	return "ch-" + b, nil
}

func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runFleetChild runs a worker process of the multi-process tests (role
// as in envChild) and returns its exit code.
func runFleetChild(role string) int {
	var err error
	switch role {
	case "crash":
		err = crashChild()
	case "load":
		err = loadChild()
	case "crash-pg":
		err = pgCrashChild()
	case "takeback":
		err = takeBackChild()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 3
	}
	return 0
}

// poolKiller kills the process at a pool's own write point (envPool:
// point@n, such as sqlite.settle.beforeCommit@2), which crashtest's plans
// do not name.
type poolKiller struct {
	mu    sync.Mutex
	point string
	n     int
	hits  int
}

func newPoolKiller() (*poolKiller, error) {
	k := &poolKiller{}
	if s := os.Getenv(envPool); s != "" {
		pt, occ, _ := strings.Cut(s, "@")
		n, err := strconv.Atoi(occ)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want point@occurrence", envPool, s)
		}
		k.point, k.n = pt, n
	}
	return k, nil
}

func (k *poolKiller) hit(point string) {
	if k.point == "" || point != k.point {
		return
	}
	k.mu.Lock()
	k.hits++
	kill := k.hits == k.n
	k.mu.Unlock()
	if kill {
		fmt.Fprintf(os.Stderr, "KILL %s %d\n", point, k.n)
		crashtest.Kill()
	}
}

// crashChild is a worker of the crash loop: it works the bookings until
// every one is confirmed (or it is killed).
func crashChild() error {
	ch, err := crashtest.ChildFromEnv()
	if err != nil {
		return err
	}
	pk, err := newPoolKiller()
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(envThreads))
	if err != nil {
		return err
	}
	rep := crashtest.NewReporter(os.Stdout)
	hook := crashtest.NewHook(ch.Plan, rep, nil)
	hit := func(p string) { hook.Hit(p); pk.hit(p) }
	s, err := sqlite.Open(os.Getenv(envDB), sqlite.Config{Hook: hit})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := testhook.With(context.Background(), hit)
	sl, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{})
	if err != nil {
		return err
	}
	w, err := crashtest.OpenWitness(os.Getenv(envWitness), ch.Gen)
	if err != nil {
		return err
	}
	defer w.Close()
	led := crashtest.AckLedger(sl, rep)
	r, err := bookingGraph(led, w, os.Getenv(envWitness), hit).Compile(
		graph.WithSaver(crashtest.AckSaver(s, rep)), graph.WithRunner("fleet-slot-"+os.Getenv(envSlot)), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		return err
	}
	pool, err := workers.New(r, workers.Options{Store: s, Concurrency: 4, Poll: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	for {
		finished, err := bookingsDone(ctx, r, s, n)
		if err != nil {
			return err
		}
		if finished {
			break
		}
		select {
		case err := <-done:
			return fmt.Errorf("the pool stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		return err
	}
	rep.Done()
	return rep.Err()
}

// bookingsDone reports whether all n bookings are confirmed, with no
// input left queued.
func bookingsDone(ctx context.Context, r *graph.Runnable[booking], s checkpoint.InputQueue, n int) (bool, error) {
	for i := range n {
		snap, err := r.GetState(ctx, bookingThread(i))
		if errors.Is(err, graph.ErrThreadNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if snap.Status == graph.StatusFailed {
			return false, fmt.Errorf("thread %s failed: %+v", bookingThread(i), snap.Tasks)
		}
		if snap.Status != graph.StatusDone {
			return false, nil
		}
		if q, err := s.Queued(ctx, bookingThread(i), 1); err != nil || len(q) > 0 {
			return false, err
		}
	}
	return true, nil
}

// fleetPoints are where crash loop plans kill: the engine's write points
// (crashtest's) and the pool's own (a claim, a settle).
var fleetPoints = []string{
	string(crashtest.AfterNode), string(crashtest.BeforeSave), string(crashtest.AfterSave),
	string(crashtest.PutBegin), string(crashtest.PutBeforeCommit), string(crashtest.PutAfterCommit),
	string(crashtest.WritesBeforeCommit), string(crashtest.WritesAfterCommit), string(crashtest.AfterToolEffect),
	"sqlite.claim.beforeCommit", "sqlite.claim.afterCommit", "sqlite.settle.beforeCommit", "sqlite.settle.afterCommit",
}

// fleetPlan is a child's plan: a point and an occurrence (or, one time in
// five, a delay), a function of seed and the child's number alone.
func fleetPlan(seed uint64, child int) (crashtest.Plan, string) {
	rnd := mrand.New(mrand.NewPCG(seed, uint64(child)))
	if rnd.IntN(5) == 0 {
		return crashtest.Plan{Delay: time.Duration(50+rnd.IntN(400)) * time.Millisecond}, ""
	}
	pt := fleetPoints[rnd.IntN(len(fleetPoints))]
	occ := 1 + rnd.IntN(6)
	if pt == string(crashtest.AfterToolEffect) {
		occ = 1 + rnd.IntN(2)
	}
	if strings.HasPrefix(pt, "sqlite.claim.") || strings.HasPrefix(pt, "sqlite.settle.") {
		return crashtest.Plan{}, pt + "@" + strconv.Itoa(occ)
	}
	return crashtest.Plan{Point: crashtest.Point(pt), Occurrence: occ}, ""
}

// fleetCycles is how many worker processes the crash loop kills: 24 in
// the default run (a few scenarios, a few seconds), 200 with
// LOCKSTEP_LONG=1; LOCKSTEP_CYCLES overrides both.
func fleetCycles(t *testing.T) int {
	if s := os.Getenv("LOCKSTEP_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LOCKSTEP_CYCLES=%q", s)
		}
		return n
	}
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		return 200
	}
	return 24
}

// TestCrashLoopThreeWorkers (D18; R04 with several processes): three
// worker processes share one SQLite file and its queued bookings; each is
// killed (SIGKILL) at a seeded random write point of the engine or of the
// pool (a claim's or a settle's transaction, before or after its commit),
// or after a random delay, and replaced by a new one; after 8 kills in a
// scenario the replacements run without a plan, so that the scenario
// finishes. Then: integrity_check; every acknowledged checkpoint on its
// thread's chain and no fork; every booking confirmed, its steps once
// each; every charge made exactly once (the witness), exactly once when
// acknowledged; nothing left queued, leased or due. A failure prints the
// seed; LOCKSTEP_SEED=<seed> replays the plans (the interleaving of three
// processes is not replayed).
func TestCrashLoopThreeWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	seed := mrand.Uint64() >> 1
	if s := os.Getenv("LOCKSTEP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LOCKSTEP_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (LOCKSTEP_SEED=%d go test -run '^TestCrashLoopThreeWorkers$' ./workers replays its plans)", seed, seed)
	cycles := fleetCycles(t)
	const (
		bookings    = 24
		workerCount = 3
		maxKills    = 8 // per scenario, before replacements run clean
	)
	ctx := t.Context()
	loop := newFleetLoop(workerCount, maxKills, cycles)
	for scenario := 0; loop.killed < cycles; scenario++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("scenario-%d", scenario))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		db, witness := filepath.Join(dir, "fleet.db"), filepath.Join(dir, "witness")
		enqueueBookings(t, db, bookings)
		hist, kills, failure := loop.scenario(ctx, func(n int) (crashtest.Plan, string) { return fleetPlan(seed, n) },
			func(slot int) []string {
				return []string{envChild + "=crash", envDB + "=" + db, envWitness + "=" + witness, envThreads + "=" + strconv.Itoa(bookings), envSlot + "=" + strconv.Itoa(slot)}
			})
		if failure != nil {
			t.Fatalf("seed %d, scenario %d: %v", seed, scenario, failure)
		}
		if err := checkBookings(ctx, db, witness, bookings, hist); err != nil {
			t.Fatalf("seed %d, scenario %d (%d kills: %v): %v", seed, scenario, kills, hist.Kills, err)
		}
	}
	loop.report(t)
}

// fleetLoop is a crash loop's bookkeeping across its scenarios: how many
// worker processes it started and killed, and where they died.
type fleetLoop struct {
	workers, maxKills, cycles int

	mu       sync.Mutex
	children int
	killed   int
	byPoint  map[string]int
	start    time.Time
}

func newFleetLoop(workers, maxKills, cycles int) *fleetLoop {
	return &fleetLoop{workers: workers, maxKills: maxKills, cycles: cycles, byPoint: map[string]int{}, start: time.Now()}
}

// scenario keeps l.workers worker processes running until each exits
// having finished, replacing every killed one: the nth child started gets
// plan(n) (an engine plan and a pool write point) while the scenario has
// killed fewer than l.maxKills and the loop fewer than l.cycles, and no
// plan after that. env(slot) is the child's environment, to
// which scenario adds envPool. It returns what the children recorded,
// how many of them the scenario killed, and the first failure: a child
// that could not run or exited neither done nor killed.
func (l *fleetLoop) scenario(ctx context.Context, plan func(n int) (crashtest.Plan, string), env func(slot int) []string) (*crashtest.History, int, error) {
	hist := &crashtest.History{}
	kills := 0
	var wg sync.WaitGroup
	var failure error
	for slot := range l.workers {
		wg.Go(func() {
			for {
				l.mu.Lock()
				if failure != nil {
					l.mu.Unlock()
					return
				}
				l.children++
				n := l.children
				p, poolPlan := crashtest.Plan{}, ""
				if kills < l.maxKills && l.killed < l.cycles {
					p, poolPlan = plan(n)
				}
				l.mu.Unlock()
				res, err := crashtest.Run(ctx, crashtest.Spawn{Env: append(env(slot), envPool+"="+poolPlan), Plan: p, Gen: n, Timeout: 2 * time.Minute})
				l.mu.Lock()
				if res != nil {
					hist.Add(res)
				}
				switch {
				case err != nil:
					failure = fmt.Errorf("worker %d (plan %s %s): %w", n, p, poolPlan, err)
				case res.Done:
					l.mu.Unlock()
					return
				case res.Killed:
					kills++
					l.killed++
					at := res.KilledAt()
					if poolPlan != "" {
						at = poolPlan
					}
					pt, _, _ := strings.Cut(at, "@")
					if strings.HasPrefix(pt, "delay=") {
						pt = "delay"
					}
					l.byPoint[pt]++
				default:
					failure = fmt.Errorf("worker %d (plan %s %s) exited without finishing: %s", n, p, poolPlan, res.Stderr)
				}
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return hist, kills, failure
}

// report logs the loop's kills by point, and fails t when fewer than half
// of its cycles died at a named write point rather than after a delay.
func (l *fleetLoop) report(t *testing.T) {
	t.Helper()
	points := make([]string, 0, len(l.byPoint))
	for p, n := range l.byPoint {
		points = append(points, fmt.Sprintf("%s=%d", p, n))
	}
	slices.Sort(points)
	t.Logf("%d worker processes killed of %d started, in %v; kills by point: %s", l.killed, l.children, time.Since(l.start).Round(time.Millisecond), strings.Join(points, " "))
	if named := l.killed - l.byPoint["delay"]; named < l.cycles/2 {
		t.Errorf("only %d workers died at a named point, want at least %d", named, l.cycles/2)
	}
}

// enqueueBookings creates the file at db and queues n bookings.
func enqueueBookings(t *testing.T, db string, n int) {
	t.Helper()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := bookingGraph(nil, nil, "", func(string) {}).Compile(graph.WithSaver(s), graph.WithRunner("fleet"), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := workers.New(r, workers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := bookingThread(i)
		if _, err := pool.Enqueue(t.Context(), b, graph.Set(booking{Booking: b}, "Booking"), workers.RunKey("book")); err != nil {
			t.Fatal(err)
		}
	}
}

// checkBookings runs the crash loop's checks on a finished scenario.
func checkBookings(ctx context.Context, db, witness string, n int, hist *crashtest.History) error {
	s, err := sqlite.Open(db, sqlite.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		return err
	}
	defer s.Close()
	vs := crashtest.VerifyIntegrity(ctx, s.DB())
	threads := make([]string, n)
	for i := range n {
		threads[i] = bookingThread(i)
	}
	_, cvs := crashtest.VerifyCheckpoints(ctx, s, threads, hist.Checkpoints, crashtest.CheckpointOptions{})
	vs = append(vs, cvs...)
	effects, err := crashtest.ReadWitness(witness)
	if err != nil {
		return err
	}
	vs = append(vs, crashtest.VerifyEffects(effects, hist.Effects)...)
	if err := vs.Err(); err != nil {
		return err
	}
	r, err := bookingGraph(nil, nil, "", func(string) {}).Compile(graph.WithSaver(s))
	if err != nil {
		return err
	}
	var problems []string
	charged := map[string]int{}
	for _, e := range effects {
		charged[e.Key]++
	}
	for _, th := range threads {
		snap, err := r.GetState(ctx, th)
		if err != nil {
			return err
		}
		want := booking{Booking: th, Log: []string{"reserve", "charge", "confirm"}, Charge: "ch-" + th}
		if snap.Status != graph.StatusDone || !cmp.Equal(want, snap.Values) {
			problems = append(problems, fmt.Sprintf("%s: %s %+v, want done %+v", th, snap.Status, snap.Values, want))
		}
		if c := charged["charge:"+th]; c != 1 {
			problems = append(problems, fmt.Sprintf("%s charged %d times, want 1", th, c))
		}
		if q, err := s.Queued(ctx, th, 0); err != nil || len(q) > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d inputs still queued (%v)", th, len(q), err))
		}
	}
	// An hour on: nothing is due, so no lease was left unreleased and no
	// claim unsettled.
	b, err := s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"probe-1", "probe-2"}, TTL: time.Minute})
	if err != nil {
		return err
	}
	if len(b.Threads) > 0 {
		problems = append(problems, fmt.Sprintf("due after the scenario: %+v", b.Threads))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// tally is the load test's state: every input applied, once each.
type tally struct {
	Inputs []string `lockstep:"append"`
	Steps  []string `lockstep:"append"`
}

func tallyGraph() *graph.Graph[tally] {
	return graph.New[tally]().
		AddNode("work", func(ctx context.Context, s tally) (graph.Update[tally], error) {
			time.Sleep(2 * time.Millisecond)
			return graph.Set(tally{Steps: []string{s.Inputs[len(s.Inputs)-1]}}, "Steps"), nil
		}).
		AddEdge(graph.START, "work")
}

func loadThread(i int) string { return fmt.Sprintf("load-%02d", i) }

// The load test's shape: 4 processes of 8 submitting goroutines, each
// submitting loadInputs inputs over loadThreads threads.
const (
	loadProcs   = 4
	loadGorout  = 8
	loadInputs  = 6
	loadThreads = 8
)

// loadChild is a process of TestSubmitEightByFour: 8 goroutines submit
// input through the pool (queueing behind a busy thread) and wait for
// what they queued; the process then works until every process's input
// is applied. Any error a caller sees fails it.
func loadChild() error {
	name := os.Getenv(envName)
	s, err := sqlite.Open(os.Getenv(envDB), sqlite.Config{})
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := tallyGraph().Compile(graph.WithSaver(s), graph.WithRunner("load-"+name), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		return err
	}
	pool, err := workers.New(r, workers.Options{Concurrency: loadGorout, Poll: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	stopped := make(chan error, 1)
	go func() { stopped <- pool.Run(runCtx) }()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		errs        []error
		ran, queued int
	)
	for g := range loadGorout {
		wg.Go(func() {
			for j := range loadInputs {
				input := fmt.Sprintf("%s-g%d-%d", name, g, j)
				thread := loadThread((g + j) % loadThreads)
				rc, err := pool.Submit(ctx, thread, graph.Set(tally{Inputs: []string{input}}, "Inputs"), workers.QueueIfBusy(), workers.RunKey(input))
				if err == nil && rc.Queued {
					err = pool.Wait(ctx, rc.Ticket)
				}
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("input %s to %s: %w", input, thread, err))
				case rc.Queued:
					queued++
				default:
					ran++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "submitted ran=%d queued=%d\n", ran, queued)
	want := loadProcs * loadGorout * loadInputs
	for {
		got := 0
		for i := range loadThreads {
			snap, err := r.GetState(ctx, loadThread(i))
			if err != nil && !errors.Is(err, graph.ErrThreadNotFound) {
				return err
			}
			if snap.Status == graph.StatusDone {
				got += len(snap.Values.Inputs)
			}
		}
		if got >= want {
			break
		}
		select {
		case err := <-stopped:
			return fmt.Errorf("the pool stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	stopRun()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Println("DONE")
	return nil
}

// TestSubmitEightByFour (D18, issue 18's 8 goroutines x 4 processes): four
// worker processes on one SQLite file each submit input from 8 goroutines
// to 8 shared threads at once, queueing behind busy threads, and wait for
// it. No caller sees an error; every input is applied exactly once, each
// thread's in the order it ran; nothing is left queued, leased or due.
func TestSubmitEightByFour(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	ctx := t.Context()
	db := filepath.Join(t.TempDir(), "load.db")
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		ran, queued int
	)
	errs := make([]error, loadProcs)
	for p := range loadProcs {
		wg.Go(func() {
			env := []string{envChild + "=load", envDB + "=" + db, envName + "=p" + strconv.Itoa(p)}
			res, err := crashtest.Run(ctx, crashtest.Spawn{Env: env, Timeout: 4 * time.Minute})
			switch {
			case err != nil:
				errs[p] = err
			case !res.Done || res.Killed:
				errs[p] = fmt.Errorf("process p%d did not finish: %s", p, res.Stderr)
			default:
				var r, q int
				if i := strings.LastIndex(res.Stderr, "submitted "); i >= 0 {
					fmt.Sscanf(res.Stderr[i:], "submitted ran=%d queued=%d", &r, &q)
				}
				mu.Lock()
				ran, queued = ran+r, queued+q
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d inputs ran at once, %d queued behind a busy thread", ran, queued)
	if ran == 0 || queued == 0 || ran+queued != loadProcs*loadGorout*loadInputs {
		t.Errorf("%d inputs ran at once and %d were queued, want some of each and %d in all", ran, queued, loadProcs*loadGorout*loadInputs)
	}
	s, err = sqlite.Open(db, sqlite.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := tallyGraph().Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for i := range loadThreads {
		th := loadThread(i)
		snap, err := r.GetState(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Status != graph.StatusDone || !slices.Equal(snap.Values.Inputs, snap.Values.Steps) {
			t.Errorf("%s: %s, inputs %v, steps %v; want done, each input worked once, in order", th, snap.Status, snap.Values.Inputs, snap.Values.Steps)
		}
		for _, in := range snap.Values.Inputs {
			if other, dup := seen[in]; dup {
				t.Errorf("input %s applied twice (%s and %s)", in, other, th)
			}
			seen[in] = th
		}
		if q, err := s.Queued(ctx, th, 0); err != nil || len(q) > 0 {
			t.Errorf("%s: %d inputs still queued (%v)", th, len(q), err)
		}
	}
	if want := loadProcs * loadGorout * loadInputs; len(seen) != want {
		t.Errorf("%d inputs applied, want %d", len(seen), want)
	}
	b, err := s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"probe"}, TTL: time.Minute})
	if err != nil || len(b.Threads) > 0 {
		t.Errorf("due after the load: %+v, %v; want none", b.Threads, err)
	}
}
