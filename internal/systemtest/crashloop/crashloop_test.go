package crashloop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/nodes"
)

// Scale of the crash loop. LOCKSTEP_LONG=1 runs the long tier;
// LOCKSTEP_CYCLES overrides the count (to reproduce a failure quickly) and
// LOCKSTEP_VERBOSE=1 logs every cycle.
const (
	loopCycles     = 400
	loopLongCycles = 2000
	// loopMaxKills is how many children of one scenario may be killed
	// before one runs without a plan: it must finish the scenario
	// (liveness after crashes).
	loopMaxKills = 12
)

// loopPoints is where point plans kill, with the highest occurrence drawn
// per order of the scenario: about half of how often a whole scenario hits
// the point per order (a clean run of one order saves 8 checkpoints, runs
// 9 tasks and saves pending writes 6 times), so that most plans kill and
// children that follow killed ones, with less work left, finish.
var loopPoints = map[crashtest.Point]int{
	crashtest.AfterClaim:         1,
	crashtest.AfterNode:          5,
	crashtest.WritesBegin:        3,
	crashtest.WritesBeforeCommit: 3,
	crashtest.WritesAfterCommit:  3,
	crashtest.BeforeSave:         4,
	crashtest.PutBegin:           4,
	crashtest.PutBeforeCommit:    4,
	crashtest.PutAfterCommit:     4,
	crashtest.AfterSave:          4,
	crashtest.AfterToolEffect:    1,
	crashtest.AfterDecision:      1,
}

// loopPlanSpace is the plan space of a scenario with n orders.
func loopPlanSpace(n int) crashtest.PlanSpace {
	ps := crashtest.PlanSpace{MaxOccurrence: map[crashtest.Point]int{}, DelayShare: 0.3, MinDelay: 3 * time.Millisecond, MaxDelay: 60 * time.Millisecond}
	for _, pi := range crashtest.Points() {
		ps.Points = append(ps.Points, pi.Point)
		ps.MaxOccurrence[pi.Point] = loopPoints[pi.Point] * n
	}
	if crashLoopRace {
		ps.MaxDelay *= 4
	}
	return ps
}

// loopPlan is the plan of cycle c of seed: a function of the two alone,
// so that a seed replays the same plans.
func loopPlan(seed uint64, c int, orders int) crashtest.Plan {
	p, err := loopPlanSpace(orders).Draw(rand.New(rand.NewPCG(seed, uint64(c))))
	if err != nil {
		panic(err) // the plan space is a constant
	}
	return p
}

func loopCount(t *testing.T, faults bool) int {
	t.Helper()
	if s := os.Getenv("LOCKSTEP_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LOCKSTEP_CYCLES=%q", s)
		}
		return n
	}
	n := loopCycles
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		n = loopLongCycles
	}
	if faults {
		n = n * 3 / 8 // the faults loop runs next to the plain one
	}
	if crashLoopRace {
		n /= 10
	}
	return n
}

// loopRun is the state of one crash loop.
type loopRun struct {
	t     *testing.T
	seed  uint64
	dir   string
	sc    loopScenario
	scDir string
	hist  *crashtest.History
	kills int // of the current scenario
	// faults is the rate of injected database faults in the children
	// (R06; 0: none). It is part of every scenario.
	faults float64
	cycle  int
	gen    int
	plan   crashtest.Plan
	stats  loopStats
	// histBefore is the history before the current cycle (JSON), for
	// replays; nil when the loop does not snapshot.
	histBefore []byte
	replayOf   string // the kept directory TestCrashLoopReplay replays
}

type loopStats struct {
	cycles, killed, completed, clean int
	byPoint                          map[string]int
	byMode                           map[string]int // scenarios completed, by durability mode
	replayed                         int            // charges answered from the ledger after a crash
	checks                           time.Duration
	children                         time.Duration
	// R06: faults injected into the children that finished, and calls
	// the children continued later after a typed store error, by kind.
	faultsDone, retried int
	retryKinds          map[string]int
	later               int // children that left the rest to the next generation
}

func (lr *loopRun) newScenario(index int) {
	lr.sc = newLoopScenario(lr.seed, index)
	lr.sc.Faults = lr.faults
	lr.scDir = filepath.Join(lr.dir, fmt.Sprintf("scenario-%d", index))
	if err := os.MkdirAll(lr.scDir, 0o700); err != nil {
		lr.t.Fatal(err)
	}
	lr.hist = &crashtest.History{}
	lr.kills = 0
}

// loopReplay is what a failed cycle leaves for TestCrashLoopReplay, next
// to the scenario's files before the cycle ("before") and after it
// ("after").
type loopReplay struct {
	Seed     uint64             `json:"seed"`
	Cycle    int                `json:"cycle"`
	Gen      int                `json:"gen"`
	Scenario loopScenario       `json:"scenario"`
	Plan     string             `json:"plan"`
	History  *crashtest.History `json:"history"` // before the cycle
}

// snapshot copies the scenario's files and history before a child runs,
// so that a failing cycle can be replayed from where it started. Nothing
// has the files open between children.
func (lr *loopRun) snapshot() {
	lr.t.Helper()
	before := lr.scDir + ".before"
	if err := os.RemoveAll(before); err != nil {
		lr.t.Fatal(err)
	}
	if err := os.CopyFS(before, os.DirFS(lr.scDir)); err != nil {
		lr.t.Fatal(err)
	}
	h, err := json.Marshal(lr.hist)
	if err != nil {
		lr.t.Fatal(err)
	}
	lr.histBefore = h
}

// fail reports a failure with everything needed to reproduce it, keeps
// the scenario's files (before and after the cycle) and stops the test.
func (lr *loopRun) fail(format string, args ...any) {
	lr.t.Helper()
	name := "crashloop"
	if lr.faults > 0 {
		name = "crashloop-faults"
	}
	keep := filepath.Join(os.TempDir(), fmt.Sprintf("lockstep-%s-%d-cycle-%d", name, lr.seed, lr.cycle))
	if lr.replayOf != "" {
		keep = lr.replayOf + "-replayed" // never overwrite what is replayed
	}
	kept := ""
	if err := lr.keep(keep); err == nil {
		kept = fmt.Sprintf("\nfiles kept in %s; LOCKSTEP_REPLAY=%s go test -run '^TestCrashLoopReplay$' ./internal/systemtest/crashloop runs the cycle again from its start", keep, keep)
	} else {
		kept = fmt.Sprintf("\nfiles not kept: %v", err)
	}
	sc, _ := json.Marshal(lr.sc)
	lr.t.Fatalf("crash loop seed %d, cycle %d (generation %d), scenario %s, plan %s: %s%s\nreproduce: LOCKSTEP_SEED=%d go test -run '^%s$' ./internal/systemtest/crashloop",
		lr.seed, lr.cycle, lr.gen, sc, lr.plan, fmt.Sprintf(format, args...), kept, lr.seed, lr.testName())
}

// testName is the test that replays the loop's seed.
func (lr *loopRun) testName() string {
	if lr.sc.Faults > 0 {
		return "TestCrashLoopFaults"
	}
	return "TestCrashLoop"
}

func (lr *loopRun) keep(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.CopyFS(filepath.Join(dir, "after"), os.DirFS(lr.scDir)); err != nil {
		return err
	}
	rp := loopReplay{Seed: lr.seed, Cycle: lr.cycle, Gen: lr.gen, Scenario: lr.sc, Plan: lr.plan.String()}
	if lr.histBefore != nil {
		if err := os.CopyFS(filepath.Join(dir, "before"), os.DirFS(lr.scDir+".before")); err != nil {
			return err
		}
		rp.History = &crashtest.History{}
		if err := json.Unmarshal(lr.histBefore, rp.History); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(rp, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "replay.json"), b, 0o600)
}

// TestCrashLoop (R04, R06-style) runs the order desk in child processes
// and kills them at seeded random points (a named crash point and
// occurrence, or a random delay). After every death the checkers run on
// the files; when a child finishes the scenario, the final checks run and
// a new scenario starts. Each scenario runs the graph in one of the three
// durability modes (sync, async, exit; graph.WithDurability), drawn from
// its seed: every invariant holds in each, and each must finish
// scenarios. A failure prints its seed;
// LOCKSTEP_SEED=<seed> replays the same plans.
func TestCrashLoop(t *testing.T) {
	runCrashLoop(t, 0)
}

// TestCrashLoopFaults (R06: faults inside the crash loop) is TestCrashLoop
// with the children's database opened through internal/faultdb: about 1%
// of the Begin, Exec, Query and Commit operations fail with a transient
// SQLITE_BUSY or SQLITE_IOERR, half before the operation and half after it
// took effect (the caller is told it failed). Each child's fault stream is
// a function of (seed, cycle) alone (loopFaultSeed), like its plan, so a
// seed replays the same kills and the same fault streams. Children treat
// the typed store errors the faults surface as "continue later" (the next
// pass retries the call, or continues the thread a fault left failed or
// pending, see loopApp.work); any other error still fails the cycle. Every
// invariant of the crash loop must hold as before: integrity_check, every
// acknowledged checkpoint, decision and effect, no committed step run
// again, effects at most once (exactly once when acknowledged), and each
// finished scenario equal to the reference conversation.
//
// The idempotency ledger shares the faulty database. This is how the
// loop found that a fault reported after the commit of the ledger's Begin
// left an intent nobody held: the next execution found it in progress,
// the model was told so, and the charge never happened. The executor now
// tries Begin again with the same owner (nodes.TestLedgerAmbiguousBegin).
func TestCrashLoopFaults(t *testing.T) {
	runCrashLoop(t, loopFaultRate)
}

// runCrashLoop is the crash loop, with a rate of injected database faults
// in the children (0: none).
func runCrashLoop(t *testing.T, faults float64) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	seed := systemtest.Seed(t, "LOCKSTEP_SEED")
	t.Logf("crash loop seed %d (LOCKSTEP_SEED=%d go test -run '^%s$' ./internal/systemtest/crashloop replays it)", seed, seed, t.Name())
	cycles := loopCount(t, faults > 0)
	verbose := os.Getenv("LOCKSTEP_VERBOSE") == "1" // a line per cycle
	lr := &loopRun{t: t, seed: seed, dir: t.TempDir(), faults: faults, stats: loopStats{byPoint: map[string]int{}, byMode: map[string]int{}}}
	scenario := 0
	lr.newScenario(scenario)
	start := time.Now()
	ctx := context.Background()
	for lr.cycle = 0; lr.cycle < cycles; lr.cycle++ {
		lr.gen++
		lr.plan = loopPlan(seed, lr.cycle, len(lr.sc.Orders))
		if lr.kills >= loopMaxKills {
			lr.plan = crashtest.Plan{}
		}
		lr.snapshot()
		res := lr.child(ctx)
		lr.stats.cycles++
		lr.stats.children += res.Elapsed
		switch {
		case res.Done:
			// Finished, even if a delay killed it after it said so.
		case res.Killed:
			lr.kills++
			lr.stats.killed++
			lr.stats.byPoint[loopPointOf(res)]++
		case faults > 0 && loopLater(res):
			// R06: the child left the rest to the next generation; it
			// counts towards the kills after which a child runs clean.
			lr.kills++
			lr.stats.later++
		default:
			lr.fail("the child exited without finishing and without being killed\nstderr: %s", res.Stderr)
		}
		if verbose {
			t.Logf("cycle %d, scenario %d (%d orders, parallel %d, %s, durability %s): plan %s, killed at %q, done %v, %v, %d checkpoints acknowledged",
				lr.cycle, lr.sc.Index, len(lr.sc.Orders), lr.sc.Parallel, lr.sc.Sync, lr.sc.Durability, lr.plan, res.KilledAt(), res.Done, res.Elapsed.Round(time.Millisecond), len(res.Checkpoints))
		}
		if res.Done && lr.plan.IsZero() {
			lr.stats.clean++
		}
		cs := time.Now()
		if err := lr.check(ctx, res.Done); err != nil {
			lr.fail("child killed at %q: %v", res.KilledAt(), err)
		}
		lr.stats.checks += time.Since(cs)
		if res.Done {
			lr.stats.completed++
			lr.stats.byMode[lr.sc.Durability]++
			for _, dir := range []string{lr.scDir, lr.scDir + ".before"} {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			scenario++
			lr.newScenario(scenario)
		}
	}
	elapsed := time.Since(start)
	points := make([]string, 0, len(lr.stats.byPoint))
	for p, n := range lr.stats.byPoint {
		points = append(points, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(points)
	t.Logf("crash loop: %d cycles in %v (%v per cycle: children %v, checks %v), %d killed, %d scenarios completed (%d by a clean child after %d kills)\nkills by point: %s",
		lr.stats.cycles, elapsed.Round(time.Millisecond), (elapsed / time.Duration(lr.stats.cycles)).Round(time.Millisecond),
		(lr.stats.children / time.Duration(lr.stats.cycles)).Round(time.Millisecond), (lr.stats.checks / time.Duration(lr.stats.cycles)).Round(time.Millisecond),
		lr.stats.killed, lr.stats.completed, lr.stats.clean, loopMaxKills, strings.Join(points, " "))
	t.Logf("charges replayed from the ledger after a crash in the effect window: %d; scenarios completed by durability mode: %s", lr.stats.replayed, loopKinds(lr.stats.byMode))
	// Every durability mode keeps every invariant: a loop long enough
	// to finish about 13 scenarios in each must have finished some in
	// each.
	if lr.stats.completed >= 40 {
		for _, m := range []graph.DurabilityMode{graph.DurabilitySync, graph.DurabilityAsync, graph.DurabilityExit} {
			if lr.stats.byMode[string(m)] == 0 {
				t.Errorf("no scenario completed in durability mode %s (%d completed)", m, lr.stats.completed)
			}
		}
	}
	// Liveness floors: a loop that fails everywhere, or never kills,
	// must not pass.
	if min := cycles / 2; lr.stats.killed < min {
		t.Errorf("only %d of %d cycles killed a child, want at least %d", lr.stats.killed, cycles, min)
	}
	if min := max(1, cycles/20); lr.stats.completed < min {
		t.Errorf("only %d scenarios completed in %d cycles, want at least %d", lr.stats.completed, cycles, min)
	}
	if engine := lr.stats.killed - lr.stats.byPoint["delay"]; engine < cycles/4 {
		t.Errorf("only %d children died at a named point, want at least %d", engine, cycles/4)
	}
	// The effect window (a charge made, its outcome not recorded) is
	// what the ledger, the reconcile hook and CheckCallOnce are about: a
	// loop long enough to hit it about 6 times must have hit it, and a
	// later child must have replayed the charge instead of running it.
	if cycles >= 100 && (lr.stats.byPoint[string(crashtest.AfterToolEffect)] == 0 || lr.stats.replayed == 0) {
		t.Errorf("the effect window was not exercised: %d kills after a charge, %d charges replayed, want at least 1 of each",
			lr.stats.byPoint[string(crashtest.AfterToolEffect)], lr.stats.replayed)
	}
	if faults > 0 {
		t.Logf("faults: %d injected into the children that finished; %d calls continued later after a typed store error (by kind: %s); %d children left the rest to the next generation",
			lr.stats.faultsDone, lr.stats.retried, loopKinds(lr.stats.retryKinds), lr.stats.later)
		// A fault loop whose faults never reach the engine proves
		// nothing: the children that finished must have met faults and
		// continued after them.
		if min := max(1, cycles/20); lr.stats.faultsDone < min || lr.stats.retried < min {
			t.Errorf("faults reached too little: %d injected in finished children, %d calls continued later, want at least %d of each", lr.stats.faultsDone, lr.stats.retried, min)
		}
	}
}

// loopPointOf names where a child died, for the statistics.
func loopPointOf(res *crashtest.Result) string {
	if res.Kill != nil {
		return string(res.Kill.Point)
	}
	return "delay"
}

// child runs one child of the current scenario and records what it
// acknowledged.
func (lr *loopRun) child(ctx context.Context) *crashtest.Result {
	lr.t.Helper()
	sc, err := json.Marshal(lr.sc)
	if err != nil {
		lr.t.Fatal(err)
	}
	env := []string{"LOCKSTEP_CHILD=" + crashLoopRole, envLoopDir + "=" + lr.scDir, envLoopScenario + "=" + string(sc)}
	if lr.sc.Faults > 0 {
		env = append(env, envLoopFaultSeed+"="+strconv.FormatUint(loopFaultSeed(lr.seed, lr.cycle), 10))
	}
	res, err := crashtest.Run(ctx, crashtest.Spawn{
		Env:     env,
		Plan:    lr.plan,
		Gen:     lr.gen,
		Timeout: loopTimeout + 10*time.Second,
	})
	if err != nil {
		lr.fail("%v", err)
	}
	if lr.plan.Point != "" && res.Killed && (res.Kill == nil || res.Kill.Point != lr.plan.Point || res.Kill.Occurrence != lr.plan.Occurrence) {
		lr.fail("the child was told to die at %s and died at %q", lr.plan, res.KilledAt())
	}
	lr.hist.Add(res)
	lr.countFaults(res)
	return res
}

// countFaults adds a child's fault report (R06) to the statistics: a
// "RETRY <kind>" line per call it continued later after a typed store
// error, and at a clean exit "FAULTS <n>", the faults injected into it.
func (lr *loopRun) countFaults(res *crashtest.Result) {
	for _, note := range res.Notes {
		f := strings.Fields(note)
		switch {
		case len(f) == 2 && f[0] == loopRetryLine:
			lr.stats.retried++
			if lr.stats.retryKinds == nil {
				lr.stats.retryKinds = map[string]int{}
			}
			lr.stats.retryKinds[f[1]]++
		case len(f) == 2 && f[0] == loopFaultsLine:
			n, _ := strconv.Atoi(f[1])
			lr.stats.faultsDone += n
		}
	}
}

// loopLater reports whether a faulty child left the rest of its scenario
// to the next generation (loopLaterLine).
func loopLater(res *crashtest.Result) bool {
	for _, note := range res.Notes {
		if strings.HasPrefix(note, loopLaterLine+" ") {
			return true
		}
	}
	return false
}

// loopKinds formats counts by kind, sorted.
func loopKinds(m map[string]int) string {
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// check runs every checker on the scenario's files; final adds the checks
// of a finished scenario.
func (lr *loopRun) check(ctx context.Context, final bool) error {
	vs, err := lr.verify(ctx, final)
	if err != nil {
		return err
	}
	return vs.Err()
}

// verify returns what the checkers found, or an error when they could not
// run.
func (lr *loopRun) verify(ctx context.Context, final bool) (crashtest.Violations, error) {
	dbPath, wPath := loopPaths(lr.scDir)
	s, err := sqlite.Open(dbPath, sqlite.Config{Synchronous: sqlite.Synchronous(lr.sc.Sync)})
	if err != nil {
		return nil, fmt.Errorf("reopen: %w", err)
	}
	defer s.Close()
	db := s.DB()
	if _, err := db.ExecContext(ctx, loopTables); err != nil {
		return nil, err
	}
	store, err := approval.OpenSQLStore(ctx, db, nil)
	if err != nil {
		return nil, err
	}
	g, err := loopGraph(loopDeps{})
	if err != nil {
		return nil, err
	}
	run, err := g.Compile(graph.WithSaver(s))
	if err != nil {
		return nil, err
	}
	var vs crashtest.Violations
	vs = append(vs, crashtest.VerifyIntegrity(ctx, db)...)

	var threads []string
	for _, o := range lr.sc.Orders {
		threads = append(threads, o.thread())
	}
	states, cv := crashtest.VerifyCheckpoints(ctx, s, threads, lr.hist.Checkpoints, crashtest.CheckpointOptions{
		// R06: a thread an injected fault left failed is continued by
		// the next child ("continue later"); a finished scenario must
		// still have every thread done (checkFinal).
		AllowFailed: lr.sc.Faults > 0,
		Snapshot:    systemtest.Snapshots(run),
	})
	vs = append(vs, cv...)

	witness, err := crashtest.ReadWitness(wPath)
	if err != nil {
		return nil, err
	}
	var effects, runs, repeats []crashtest.Effect
	for _, e := range witness {
		switch e.Kind {
		case "charge":
			effects = append(effects, e)
		case "run":
			runs = append(runs, e)
		case loopRepeatKind:
			repeats = append(repeats, e)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT message_id FROM crash_orders ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		effects = append(effects, crashtest.Effect{Kind: "message", Key: "msg:" + id})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	vs = append(vs, crashtest.VerifyEffects(effects, lr.hist.Effects)...)
	vs = append(vs, crashtest.VerifyReruns(lr.hist.Tasks, runs)...)
	vs = append(vs, crashtest.VerifyRepeats(repeats)...)
	vs = append(vs, crashtest.VerifyDecisions(ctx, lr.hist.Decisions, func(ctx context.Context, id string) (string, bool, error) {
		rec, err := store.Get(ctx, id)
		if errors.Is(err, approval.ErrNotFound) {
			return "", false, nil
		}
		return string(rec.Decision.Outcome), err == nil, err
	})...)
	vs = append(vs, lr.checkAnswers(ctx, store, states)...)
	if final {
		vs = append(vs, lr.checkFinal(ctx, run, store, states, effects)...)
	}
	return vs, nil
}

// checkAnswers checks that every answer a thread received for an approval
// is the decision stored for it (the resumed run follows the winner), and
// that no thread waits on an approval whose decision the worker marked
// resumed (it would wait forever: R37).
func (lr *loopRun) checkAnswers(ctx context.Context, store *approval.SQLStore, states map[string]*crashtest.ThreadState) crashtest.Violations {
	var vs crashtest.Violations
	for th, st := range states {
		for _, id := range st.Interrupts {
			rec, err := store.Get(ctx, id)
			if err == nil && !rec.Resume.At.IsZero() {
				vs = append(vs, &crashtest.Violation{Check: crashtest.CheckDecision, Thread: th, Key: id,
					Detail: fmt.Sprintf("the thread waits on an approval whose decision (%s) was marked resumed: %s", rec.Decision.Outcome, rec.Resume.Note)})
			}
		}
		for id, ans := range st.Answers {
			var got approval.Decision
			if err := json.Unmarshal(ans, &got); err != nil {
				vs = append(vs, &crashtest.Violation{Check: crashtest.CheckDecision, Thread: th, Key: id, Detail: fmt.Sprintf("answer is not a decision: %v", err)})
				continue
			}
			rec, err := store.Get(ctx, id)
			if err != nil {
				vs = append(vs, &crashtest.Violation{Check: crashtest.CheckDecision, Thread: th, Key: id, Detail: fmt.Sprintf("the thread was answered %s, but no decision is stored: %v", got.Outcome, err)})
				continue
			}
			if got.Outcome != rec.Decision.Outcome || got.Reviewer != rec.Decision.Reviewer {
				vs = append(vs, &crashtest.Violation{Check: crashtest.CheckDecision, Thread: th, Key: id,
					Detail: fmt.Sprintf("the thread was answered %s by %s, the stored decision is %s by %s", got.Outcome, got.Reviewer, rec.Decision.Outcome, rec.Decision.Reviewer)})
			}
		}
	}
	return vs
}

// checkFinal checks a finished scenario: every message recorded once,
// every thread done with the reference conversation, each node's
// contribution once, exactly the expected orders charged once, every
// gated order decided once as the reviewer would and resumed.
func (lr *loopRun) checkFinal(ctx context.Context, run *graph.Runnable[loopState], store *approval.SQLStore, states map[string]*crashtest.ThreadState, effects []crashtest.Effect) crashtest.Violations {
	var vs crashtest.Violations
	bad := func(c crashtest.CheckName, thread, key, format string, args ...any) {
		vs = append(vs, &crashtest.Violation{Check: c, Thread: thread, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	msgs := map[string]int{}
	charges := map[string]int{}
	for _, e := range effects {
		switch e.Kind {
		case "message":
			msgs[e.Key]++
		case "charge":
			charges[e.Subject]++
		}
	}
	// The decisions each call was answered with (checkAnswers checked
	// that they are the stored ones), by thread and call.
	decided := map[string]map[string][]approval.Decision{}
	for th, st := range states {
		decided[th] = map[string][]approval.Decision{}
		for id := range st.Answers {
			rec, err := store.Get(ctx, id)
			if err != nil {
				bad(crashtest.CheckDecision, th, id, "%v", err)
				continue
			}
			decided[th][rec.Request.CallID] = append(decided[th][rec.Request.CallID], rec.Decision)
		}
	}
	un, err := store.Unresumed(ctx, 0)
	if err != nil || len(un) != 0 {
		bad(crashtest.CheckDecision, "", "", "%d decisions left unresumed (%v)", len(un), err)
	}
	wantRoles := []string{"user", "assistant", "tool:lookup-1", "assistant", "tool:lookup-2", "tool:charge-1", "tool:charge-2", "assistant"}
	for _, o := range lr.sc.Orders {
		th := o.thread()
		if n := msgs["msg:"+o.message()]; n != 1 {
			bad(crashtest.CheckEffectOnce, th, o.message(), "message recorded %d times, want 1", n)
		}
		if st := states[th]; st == nil || st.Status != "done" {
			bad(crashtest.CheckStatus, th, "", "the scenario finished with the thread %+v", st)
			continue
		}
		snap, err := run.GetState(ctx, th)
		if err != nil {
			bad(crashtest.CheckReadable, th, "", "%v", err)
			continue
		}
		checks := slices.Sorted(slices.Values(snap.Values.Checks))
		if diff := cmp.Diff([]string{"fraud:ok", "stock:ok"}, checks); diff != "" {
			bad(crashtest.CheckConsistent, th, "", "each check must contribute once (-want +got):\n%s", diff)
		}
		var roles []string
		results := map[string]nodes.Message{}
		for _, m := range snap.Values.Messages {
			r := string(m.Role)
			if m.Role == nodes.RoleTool {
				r += ":" + m.ToolCallID
				results[m.ToolCallID] = m
			}
			roles = append(roles, r)
		}
		if diff := cmp.Diff(wantRoles, roles); diff != "" {
			bad(crashtest.CheckConsistent, th, "", "the conversation differs from the reference (-want +got):\n%s", diff)
		}
		var memo nodes.Observation
		if err := json.Unmarshal([]byte(results["lookup-2"].Content), &memo); err != nil || memo.Status != nodes.StatusCacheHit {
			bad(crashtest.CheckConsistent, th, "lookup-2", "the second, identical lookup was %s, want a memo hit (%v)", memo.Status, err)
		}
		for _, c := range o.charges() {
			want := 0
			if c.charged() {
				want = 1
			}
			if n := charges[c.Args.subject()]; n != want {
				bad(crashtest.CheckEffectOnce, th, c.Args.subject(), "charged %d times, want %d (amount %d)", n, want, c.Args.Amount)
			}
			ds := decided[th][c.ID]
			switch {
			case c.gated() && len(ds) != 1:
				bad(crashtest.CheckDecision, th, c.ID, "gated charge (amount %d) was answered %d decisions, want 1", c.Args.Amount, len(ds))
			case !c.gated() && len(ds) != 0:
				bad(crashtest.CheckDecision, th, c.ID, "charge of amount %d was gated", c.Args.Amount)
			case len(ds) == 1 && (ds[0].Outcome == approval.Approved) != c.approved():
				bad(crashtest.CheckDecision, th, c.ID, "charge of amount %d was %s", c.Args.Amount, ds[0].Outcome)
			}
			var obs nodes.Observation
			if err := json.Unmarshal([]byte(results[c.ID].Content), &obs); err != nil {
				bad(crashtest.CheckConsistent, th, c.ID, "charge result: %v", err)
				continue
			}
			ok := obs.Status == nodes.StatusExecuted || obs.Status == nodes.StatusReplayed
			if !c.charged() {
				ok = obs.Status == nodes.StatusRejected
			}
			if !ok {
				bad(crashtest.CheckConsistent, th, c.ID, "the model was told the charge (amount %d) %s: %s %s", c.Args.Amount, obs.Status, obs.Error, obs.Note)
			}
			if obs.Status == nodes.StatusReplayed {
				lr.stats.replayed++
			}
		}
	}
	return vs
}

// TestCrashLoopReproduces checks that a seed replays: the plans of a seed
// are the same every time, and a child given a seed's plan on a fresh
// scenario dies at the same point, twice.
func TestCrashLoopReproduces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for c := range 50 {
		a, b := loopPlan(42, c, 3), loopPlan(42, c, 3)
		if a != b {
			t.Fatalf("cycle %d: plan %s, then %s", c, a, b)
		}
	}
	// The first seed whose first plan is a point plan that a fresh
	// scenario reaches for sure.
	var (
		seed uint64
		plan crashtest.Plan
	)
	for seed = 1; ; seed++ {
		plan = loopPlan(seed, 0, len(newLoopScenario(seed, 0).Orders))
		if plan.Point != "" && plan.Occurrence == 1 {
			break
		}
	}
	var got []string
	for i := range 2 {
		lr := &loopRun{t: t, seed: seed, dir: t.TempDir(), plan: plan, gen: 1}
		lr.newScenario(0)
		res := lr.child(t.Context())
		if !res.Killed || res.Kill == nil {
			t.Fatalf("run %d of seed %d (plan %s): not killed at a point (%q)\n%s", i, seed, plan, res.KilledAt(), res.Stderr)
		}
		if err := lr.check(t.Context(), false); err != nil {
			t.Fatalf("run %d of seed %d: %v", i, seed, err)
		}
		got = append(got, res.KilledAt())
	}
	if got[0] != plan.String() || got[1] != plan.String() {
		t.Errorf("seed %d, plan %s: the children died at %q", seed, plan, got)
	}
}

// TestCrashLoopDetects is the loop's negative control: a scenario broken
// on purpose must fail the checkers, so a loop that passes is not a loop
// that cannot fail.
func TestCrashLoopDetects(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, tc := range []struct {
		sabotage string
		plan     crashtest.Plan
		want     crashtest.CheckName
		faults   float64 // R06: the checkers must see through injected faults too
	}{
		{"random-key", crashtest.Plan{Point: crashtest.AfterToolEffect, Occurrence: 1}, crashtest.CheckEffectOnce, 0},
		{"early-ack", crashtest.Plan{Point: crashtest.PutBegin, Occurrence: 3}, crashtest.CheckAcked, 0},
		{"no-claim", crashtest.Plan{}, crashtest.CheckEffectOnce, 0},
		{"early-decided", crashtest.Plan{Point: crashtest.AfterDecision, Occurrence: 1}, crashtest.CheckDecision, 0},
		{"take-over", crashtest.Plan{Point: crashtest.AfterToolEffect, Occurrence: 1}, crashtest.CheckCallOnce, 0},
		{"random-key", crashtest.Plan{Point: crashtest.AfterToolEffect, Occurrence: 1}, crashtest.CheckEffectOnce, loopFaultRate},
		{"early-ack", crashtest.Plan{Point: crashtest.PutBegin, Occurrence: 3}, crashtest.CheckAcked, loopFaultRate},
	} {
		name := tc.sabotage
		if tc.faults > 0 {
			name += "/faults"
		}
		t.Run(name, func(t *testing.T) {
			lr := &loopRun{t: t, seed: 1, dir: t.TempDir(), faults: tc.faults}
			lr.newScenario(0)
			lr.sc.Dups = 2
			lr.sc.Sabotage = tc.sabotage
			var found crashtest.Violations
			for lr.cycle = 0; lr.cycle < 4 && len(found) == 0; lr.cycle++ {
				lr.gen++
				lr.plan = crashtest.Plan{}
				if lr.cycle == 0 {
					lr.plan = tc.plan
				}
				res := lr.child(t.Context())
				vs, err := lr.verify(t.Context(), res.Done)
				if err != nil {
					t.Fatal(err)
				}
				found = vs.Of(tc.want)
				if res.Done {
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

// TestCrashLoopReplay runs a failed cycle of TestCrashLoop again from the
// files it started with: LOCKSTEP_REPLAY=<the directory the failure kept>.
// The child gets the same scenario, generation and plan, and the checkers
// the same history. Timing can still differ (a delay plan, the order of
// parallel branches), so a race may need a few replays.
func TestCrashLoopReplay(t *testing.T) {
	dir := os.Getenv("LOCKSTEP_REPLAY")
	if dir == "" {
		t.Skip("LOCKSTEP_REPLAY=<directory kept by a failed TestCrashLoop> replays its cycle")
	}
	b, err := os.ReadFile(filepath.Join(dir, "replay.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rp loopReplay
	if err := json.Unmarshal(b, &rp); err != nil {
		t.Fatal(err)
	}
	plan, err := crashtest.ParsePlan(rp.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if rp.History == nil {
		t.Fatal("the failure kept no files from before its cycle")
	}
	lr := &loopRun{t: t, seed: rp.Seed, dir: t.TempDir(), sc: rp.Scenario, hist: rp.History, cycle: rp.Cycle, gen: rp.Gen, plan: plan, replayOf: dir}
	lr.scDir = filepath.Join(lr.dir, "replay")
	if err := os.CopyFS(lr.scDir, os.DirFS(filepath.Join(dir, "before"))); err != nil {
		t.Fatal(err)
	}
	res := lr.child(t.Context())
	t.Logf("replayed cycle %d of seed %d with plan %s: killed at %q, done %v", rp.Cycle, rp.Seed, plan, res.KilledAt(), res.Done)
	if err := lr.check(t.Context(), res.Done); err != nil {
		lr.fail("%v", err)
	}
}
