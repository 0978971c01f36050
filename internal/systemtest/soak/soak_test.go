package soak_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The soak (docs/reliability.md R52, at CI scale): several processes, each with
// several goroutines, run the payments agent of the harness (internal/systemtest/soakapp.go) on one
// SQLite file opened through faultdb, which fails 1% of the operations
// with SQLITE_BUSY or SQLITE_IOERR, half before the operation and half
// after it took effect. In every process:
//
//   - runners start threads (the model and the audit branch run in
//     parallel; two reads run in parallel; the payment waits for a human),
//     a few at a time each, and continue those a fault left failed or
//     pending; a runner registers a thread (soak_threads) before it
//     starts it;
//   - consumers take messages from a feed that delivers each of them
//     three times (feed_test.go) and claim each with
//     ledger.ClaimMessageTx in the transaction that registers the thread
//     the message asks for, then start it;
//   - a scanner advances every unfinished registered thread older than
//     the graph's lease, whoever registered it: threads of a killed or
//     stopped process are taken over;
//   - a pool of soakResolvers resolvers (8 in all, as R52 asks) acts on
//     the pending approvals of all threads at random: each lists them,
//     picks the oldest half the time (so that resolvers of both
//     processes meet on it) and approves, rejects or edits it (half the
//     amount);
//   - the approval worker resumes the decided threads, sweeping first.
//
// Meanwhile the parent is a nemesis (from a 10 s soak up, or with
// LOCKSTEP_SOAK_NEMESIS=1): every 1–5 s it SIGKILLs a random process, and
// starts it again at once, or SIGSTOPs it and SIGCONTs it 0.5–4 s later.
// A restarted process runs the same roles under a new incarnation number;
// what the dead one left unfinished its scanner (or the other process's)
// takes over.
//
// When the run is over the nemesis stops, the processes stop injecting
// faults and drain: the feed is emptied, everything undecided is decided
// and every registered thread runs to its end. The parent then checks, on
// the file: PRAGMA integrity_check is ok; the threads in the file are
// exactly the registered ones, and each is done, its snapshot consistent
// (no Next, no interrupts, the agent's answer and one audit entry; a
// thread left waiting or pending is reported with its Next and Tasks, a
// failed one with its errors); every message was handled exactly once
// (one soak_handled row, naming the message's thread) and every delivery
// was acknowledged; the provider was called at most once per idempotency
// key, a thread whose result says it paid was paid exactly once under
// that key, and nothing was paid without an approval; every approval has
// at most one decision, in the table and as told to the resolvers, every
// loser was told the stored winner, and a share of the approvals
// (soakRaceFloor) had two or more deciders at once; an edited payment
// paid the edited amount; the
// WAL stayed under 64 MiB throughout (under the nemesis, the WAL in use,
// outside the stops: see the check); at least half the threads
// registered during the run completed during it, so that a soak that
// fails everywhere cannot pass; and threads kept completing while the
// nemesis worked: no stretch of soakLivenessGap (10 s) without a
// completion during the run, the last one included (from the last
// completion to the end of the run), not counting the time a process was
// held stopped.
//
// No check measures the machine: the floors are shares of what the run
// did, not rates, and the stretches leave the stops out, so that a soak
// beside other work on 2 cores checks what a quiet one does.
//
// Duration: LOCKSTEP_SOAK (a Go duration; .ci/run sets 30s, the long tier
// 5m). Without it the soak runs a 3 s smoke, with the feed and without the
// nemesis, so that `go test ./...` stays fast and the harness does not
// rot; -short skips it. Each process runs soakGoroutines runners, or
// soakGoroutinesLong with LOCKSTEP_LONG=1 (16 in all, as R52 asks). The
// seed (LOCKSTEP_SOAK_SEED, random when unset) fixes the threads, the
// feed (which messages, in which order, when), the nemesis's plan, the
// resolvers' choices and each process's fault stream; it is printed
// first. Goroutine interleavings are not reproducible, so a seed
// reproduces the scenario, the faults and the nemesis's schedule, not
// the schedule of the goroutines (nor, therefore, which work a signal
// interrupts).
//
// LOCKSTEP_SOAK_SABOTAGE (negative controls, run by TestSoakSabotage):
// "claim-outside-tx" claims messages with ledger.ClaimMessage, committed
// on its own before the transaction that registers the thread, and
// "no-claim" does not claim them at all. The first loses messages whose
// registration failed after the claim committed; the second handles
// every message several times; the message check must fail for both.

const (
	// soakRole is the LOCKSTEP_CHILD role of a soak process; its
	// configuration (soakChildConfig, as JSON) is in soakChildEnv.
	soakRole           = "soak"
	soakChildEnv       = "LOCKSTEP_SOAK_CHILD"
	soakProcs          = 2
	soakGoroutines     = 3
	soakGoroutinesLong = 8
	soakFaultRate      = 0.01
	// soakFloorShare is the liveness floor: 1/soakFloorShare of the
	// threads registered during the run must complete during it.
	soakFloorShare = 2
	// soakOpenPerRunner bounds the unfinished threads of a runner.
	soakOpenPerRunner = 3
	soakMaxWAL        = 64 << 20
	// soakWALGrace is how long after a SIGCONT the WAL may stay above
	// soakMaxWAL while the checkpoints catch up.
	soakWALGrace = 5 * time.Second
	// soakConsumers is the feed's consumers per process.
	soakConsumers = 2
	// soakResolvers is the resolvers per process (R52's 8 with 2).
	soakResolvers = 4
	// soakStartKey is the run key (graph.RunKey) of every start of a
	// thread: each thread has one input, so one key serves them all.
	soakStartKey = "soak-start"
)

// soakRoles is the conversation of a done thread: the customer's message,
// then the model's three turns, each but the last with its tool results.
var soakRoles = []nodes.Role{nodes.RoleUser, nodes.RoleAssistant, nodes.RoleTool, nodes.RoleTool, nodes.RoleAssistant, nodes.RoleTool, nodes.RoleAssistant}

// soakChildConfig is what the parent hands a child, as JSON in the
// environment.
type soakChildConfig struct {
	DB, Provider, Feed string
	Proc               int
	Incarnation        int // how many times the nemesis killed this process before
	Seed               uint64
	RunUntil           time.Time // when to stop starting threads and injecting faults
	DrainUntil         time.Time // when the drain gives up
	Goroutines         int
	Sabotage           string // LOCKSTEP_SOAK_SABOTAGE
}

// soakChildResult is what a child reports: a "STATS" line twice a second
// and a "RESULT" line at the end (the parent keeps the last of each
// incarnation, so that a killed one counts too). The counts are this
// incarnation's.
type soakChildResult struct {
	Started    int            // threads its runners registered and started
	Deliveries int            // deliveries taken from the feed
	Handled    int            // messages it handled (its claim won)
	Duplicates int            // deliveries refused as already handled
	FeedErrors int            // deliveries given back after an error
	TakenOver  int            // scanner runs of threads its runners did not start
	Faults     int            // faults injected
	Ops        int            // database operations seen by the fault driver
	Decided    int            // decisions its resolvers recorded
	Lost       int            // decisions refused because another won
	Resumed    int            // threads its worker resumed
	Continued  int            // Continue calls on failed or pending threads
	Repeated   int            // starts of a thread another start had started (Result.Repeated)
	RunErrors  int            // runs that returned an error (mostly faults)
	ErrorKinds map[string]int // run errors by kind (soakErrorKind)
	Unfinished []string       // registered threads not done after the drain
	FirstError string         // the first run error, for the log
	Others     []string       // the first few errors of kind "other"
}

func (r *soakChildResult) add(o soakChildResult) {
	r.Started += o.Started
	r.Deliveries += o.Deliveries
	r.Handled += o.Handled
	r.Duplicates += o.Duplicates
	r.FeedErrors += o.FeedErrors
	r.TakenOver += o.TakenOver
	r.Faults += o.Faults
	r.Ops += o.Ops
	r.Decided += o.Decided
	r.Lost += o.Lost
	r.Resumed += o.Resumed
	r.Continued += o.Continued
	r.Repeated += o.Repeated
	r.RunErrors += o.RunErrors
	for k, n := range o.ErrorKinds {
		if r.ErrorKinds == nil {
			r.ErrorKinds = map[string]int{}
		}
		r.ErrorKinds[k] += n
	}
	r.Others = append(r.Others, o.Others...)
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
}

func TestSoak(t *testing.T) {
	dur := 3 * time.Second
	if v := os.Getenv("LOCKSTEP_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("LOCKSTEP_SOAK=%q: want a positive Go duration", v)
		}
		dur = d
	} else if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	seed := systemtest.Seed(t, "LOCKSTEP_SOAK_SEED")
	nemesis := dur >= 10*time.Second
	switch v := os.Getenv("LOCKSTEP_SOAK_NEMESIS"); v {
	case "":
	case "0", "1":
		nemesis = v == "1"
	default:
		t.Fatalf("LOCKSTEP_SOAK_NEMESIS=%q: want 0 or 1", v)
	}
	goroutines := soakGoroutines
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		goroutines = soakGoroutinesLong
	}
	sabotage := os.Getenv("LOCKSTEP_SOAK_SABOTAGE")
	switch sabotage {
	case "", "claim-outside-tx", "no-claim":
	default:
		t.Fatalf("LOCKSTEP_SOAK_SABOTAGE=%q: want claim-outside-tx or no-claim", sabotage)
	}
	r := runSoak(t, soakOptions{dur: dur, seed: seed, nemesis: nemesis, goroutines: goroutines, sabotage: sabotage})
	for _, f := range r.fails {
		t.Errorf("%s: %s", f.check, f.msg)
	}
}

// TestSoakSabotage is the soak's negative control: a short soak per
// sabotage mode (LOCKSTEP_SOAK_SABOTAGE), one after the other (two at once
// on 2 cores starve the WAL's checkpoints), each of which must fail the
// message check for the reason its sabotage causes, and no other check.
// "no-claim" handles every delivered copy. "claim-outside-tx" loses the
// messages whose claim committed while their registration failed (about
// 1% of the messages at 1% faults: 2 to 5 in the runs measured), so it
// runs with 400 messages and, while it lost none, again, 3 runs at most
// (a miss then is about 1 in 300,000); a later copy of a lost message is refused as a
// duplicate and starts the thread it names, which nobody registered, so
// that check may fail as well. It takes about 23 s on 2 cores, so it runs
// in the long tier (LOCKSTEP_LONG=1).
func TestSoakSabotage(t *testing.T) {
	if os.Getenv("LOCKSTEP_LONG") != "1" {
		t.Skip("the soak's negative controls run with LOCKSTEP_LONG=1")
	}
	for _, c := range []struct {
		sabotage, check string
		also            string // a check that may fail as well, for the same reason
		messages        int
	}{
		{"no-claim", "messages-twice", "", 0},
		{"claim-outside-tx", "messages-lost", "threads-unregistered", 400},
	} {
		t.Run(c.sabotage, func(t *testing.T) {
			r := runSoak(t, soakOptions{dur: 3 * time.Second, seed: rand.Uint64(), goroutines: soakGoroutines, sabotage: c.sabotage, messages: c.messages})
			for try := 1; len(r.fails) == 0 && c.sabotage == "claim-outside-tx" && try < 3; try++ {
				// The loss needs a fault in a narrow window: a run may
				// lose nothing (about 1 in 70). At most 3 runs.
				t.Logf("sabotage %s lost no message; once more", c.sabotage)
				r = runSoak(t, soakOptions{dur: 3 * time.Second, seed: rand.Uint64(), goroutines: soakGoroutines, sabotage: c.sabotage, messages: c.messages})
			}
			for _, f := range r.fails {
				t.Logf("%s (expected from %s): %s", f.check, c.sabotage, f.msg)
			}
			got := r.failed()
			others := maps.Clone(got)
			delete(others, c.check)
			delete(others, c.also)
			if got[c.check] == 0 || len(others) > 0 {
				t.Errorf("sabotage %s failed the checks %v, want %s (and maybe %q) and no other", c.sabotage, got, c.check, c.also)
			}
		})
	}
}

// soakOptions configure one soak run.
type soakOptions struct {
	dur        time.Duration
	seed       uint64
	nemesis    bool
	goroutines int    // runners per process
	sabotage   string // "", "claim-outside-tx" or "no-claim"
	messages   int    // the feed's messages; 0 for the rate's (soakMessagesPerSecond)
}

// soakRecorder collects what the soak's checks find wrong, by check, so
// that TestSoak reports it and a negative control (TestSoakSabotage) can
// require that the check it breaks fails, and no other.
type soakRecorder struct {
	mu    sync.Mutex
	fails []soakFailure
}

type soakFailure struct{ check, msg string }

func (r *soakRecorder) fail(check, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails = append(r.fails, soakFailure{check, fmt.Sprintf(format, args...)})
}

// failed counts the failures of each check.
func (r *soakRecorder) failed() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, f := range r.fails {
		n[f.check]++
	}
	return n
}

// runSoak runs one soak and checks it; it stops the test (t.Fatal) only
// when the harness itself fails, and records what the checks find.
func runSoak(t *testing.T, o soakOptions) *soakRecorder {
	t.Helper()
	r := &soakRecorder{}
	dur, seed, nemesis, goroutines, sabotage := o.dur, o.seed, o.nemesis, o.goroutines, o.sabotage
	messages := max(soakMinMessages, int(dur.Seconds()*soakMessagesPerSecond))
	if o.messages > 0 {
		messages = o.messages
	}
	var plan []soakNemesisAction
	if nemesis {
		plan = soakNemesisPlan(seed, soakProcs, dur)
	}
	t.Logf("soak seed %d, %v, %d processes × %d runners, %.0f%% faults, %d messages × %d deliveries, nemesis: %d actions (reproduce: LOCKSTEP_SOAK=%v LOCKSTEP_SOAK_SEED=%d go test -run '^TestSoak$' ./internal/systemtest/soak)",
		seed, dur, soakProcs, goroutines, soakFaultRate*100, messages, soakCopies, len(plan), dur, seed)
	if sabotage != "" {
		t.Logf("SABOTAGE %s: the message check must fail", sabotage)
	}

	dir := t.TempDir()
	db, provider, feedPath := filepath.Join(dir, "soak.db"), filepath.Join(dir, "provider.db"), filepath.Join(dir, "feed.db")
	// Create the tables once, without faults.
	ctx := context.Background()
	app, err := systemtest.OpenSoakApp(ctx, systemtest.SoakAppConfig{DB: db, Provider: provider})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Saver.DB().ExecContext(ctx, soakSchema); err != nil {
		t.Fatal(err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	feed, err := openSoakFeed(feedPath)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()

	// The WAL is sampled while the children run: the -wal file's size (a
	// high-water mark) and the part of it in use (soakLiveWAL).
	type walSample struct {
		at         time.Time
		size, live int64
		read       bool // live was read from the -shm file
	}
	var walSamples []walSample
	stopWAL := make(chan struct{})
	var walDone sync.WaitGroup
	walDone.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if fi, err := os.Stat(db + "-wal"); err == nil {
				live, ok := soakLiveWAL(db)
				walSamples = append(walSamples, walSample{time.Now(), fi.Size(), live, ok})
			}
			select {
			case <-stopWAL:
				return
			case <-tick.C:
			}
		}
	})

	start := time.Now().Add(200 * time.Millisecond)
	if err := fillSoakFeed(ctx, feed, seed, messages, start, dur); err != nil {
		t.Fatal(err)
	}
	// The drain must outlast the pay tool's ledger lease (nodes' lease():
	// 3 attempts of DefaultTimeout, their backoff and 30 s, about 140 s):
	// a process stopped or killed in the middle of a payment leaves its
	// intent in progress, the outcome unknown, until that lease ends, and
	// only then is a human asked and the thread finished (R34). It costs
	// nothing when every thread finishes sooner: the drain ends then.
	drain := 20*time.Second + dur/4 + soakPayLease
	runUntil, drainUntil := start.Add(dur), start.Add(dur+drain)
	type child struct {
		results      []soakChildResult // the last report of each incarnation
		decided      []string          // "id outcome reviewer"
		lost         []string          // "id outcome reviewer raced"
		incarnations int
		err          error
		stderr       string
	}
	children := make([]child, soakProcs)
	slots := make([]*soakSlot, soakProcs)
	var wg sync.WaitGroup
	for p := range soakProcs {
		slots[p] = &soakSlot{}
		wg.Go(func() {
			c, slot := &children[p], slots[p]
			for inc := 0; ; inc++ {
				c.incarnations = inc + 1
				cfg, _ := json.Marshal(soakChildConfig{DB: db, Provider: provider, Feed: feedPath, Proc: p, Incarnation: inc, Seed: seed,
					RunUntil: runUntil, DrainUntil: drainUntil, Goroutines: goroutines, Sabotage: sabotage})
				cctx, cancel := context.WithDeadline(ctx, drainUntil.Add(time.Minute))
				cmd := systemtest.Command(cctx, soakRole, soakChildEnv+"="+string(cfg))
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				slot.mu.Lock()
				err := cmd.Start()
				slot.proc, slot.killed = cmd.Process, false
				slot.mu.Unlock()
				if err == nil {
					err = cmd.Wait()
				}
				cancel()
				slot.mu.Lock()
				killed := slot.killed
				slot.proc = nil
				slot.mu.Unlock()
				var last soakChildResult
				var got bool
				sc := bufio.NewScanner(strings.NewReader(stdout.String()))
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					line := sc.Text()
					kind, rest, _ := strings.Cut(line, " ")
					switch kind {
					case "DECIDED":
						c.decided = append(c.decided, rest)
					case "LOST":
						c.lost = append(c.lost, rest)
					case "STATS", "RESULT":
						var r soakChildResult
						if err := json.Unmarshal([]byte(rest), &r); err != nil {
							if !killed && c.err == nil {
								c.err = fmt.Errorf("line %q: %v", line, err)
							}
							continue
						}
						last, got = r, true
					}
				}
				if got {
					c.results = append(c.results, last)
				}
				if killed {
					c.stderr += stderr.String()
					continue // the nemesis killed it: start it again
				}
				if err != nil && c.err == nil {
					c.err = fmt.Errorf("incarnation %d: %v", inc, err)
				}
				c.stderr += stderr.String()
				return
			}
		})
	}
	var actions []string
	var stops []soakStopWindow
	if nemesis {
		stopNemesis := make(chan struct{})
		var nemesisDone sync.WaitGroup
		nemesisDone.Go(func() { actions, stops = runSoakNemesis(plan, slots, start, dur, stopNemesis) })
		// The plan ends before the run does; stop early only if a child
		// ends (fails) first.
		go func() { wg.Wait(); close(stopNemesis) }()
		nemesisDone.Wait()
	}
	wg.Wait()
	close(stopWAL)
	walDone.Wait()
	elapsed := time.Since(start)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for p, c := range children {
			if c.stderr != "" {
				t.Logf("process %d stderr (last 32 KiB):\n%s", p, c.stderr[max(0, len(c.stderr)-32<<10):])
			}
		}
		t.Logf("soak failed with seed %d", seed)
	})

	var total soakChildResult
	decisions := map[string][]string{} // approval ID → "outcome reviewer" each winner was told it recorded
	losses := map[string][]soakLoss{}  // approval ID → what each loser was told
	restarts := 0
	for p, c := range children {
		if c.err != nil {
			t.Fatalf("process %d: %v\nstderr:\n%s", p, c.err, c.stderr)
		}
		restarts += c.incarnations - 1
		for _, r := range c.results {
			total.add(r)
		}
		if n := len(c.results); n > 0 {
			total.Unfinished = append(total.Unfinished, c.results[n-1].Unfinished...)
		}
		for _, d := range c.decided {
			id, outcome, _ := strings.Cut(d, " ")
			decisions[id] = append(decisions[id], outcome)
		}
		for _, l := range c.lost {
			id, rest, _ := strings.Cut(l, " ")
			i := strings.LastIndexByte(rest, ' ')
			if i < 0 {
				t.Fatalf("process %d: LOST line %q", p, l)
			}
			losses[id] = append(losses[id], soakLoss{winner: rest[:i], raced: rest[i+1:] == "true"})
		}
	}
	t.Logf("soak: %v (seed %d): %d threads started by runners, %d restarts; feed: %d deliveries, %d handled, %d duplicates refused, %d given back; %d faults injected in %d operations; %d decisions (%d lost races), %d resumed by workers, %d continues, %d scanner runs of others' threads, %d repeated starts, %d run errors %v (first: %s)",
		elapsed.Round(time.Millisecond), seed, total.Started, restarts, total.Deliveries, total.Handled, total.Duplicates, total.FeedErrors, total.Faults, total.Ops, total.Decided, total.Lost, total.Resumed, total.Continued, total.TakenOver, total.Repeated, total.RunErrors, total.ErrorKinds, total.FirstError)
	if nemesis {
		t.Logf("nemesis: %d of %d planned actions: %v", len(actions), len(plan), actions)
		if len(actions) == 0 {
			r.fail("nemesis", "the nemesis did nothing (plan %v)", plan)
		}
		// Every kill carried out must have cost a process its
		// incarnation (and been restarted), and a plan with a kill
		// must have killed: else the take-over of a dead process's
		// threads was never exercised.
		kills := 0
		for _, a := range actions {
			if strings.Contains(a, ": kill ") {
				kills++
			}
		}
		if kills != restarts || (kills == 0 && slices.ContainsFunc(plan, func(a soakNemesisAction) bool { return a.Kill })) {
			r.fail("nemesis", "the nemesis killed %d times (plan %v) and the processes were restarted %d times", kills, plan, restarts)
		}
	}

	if total.Faults == 0 {
		r.fail("faults", "no fault was injected in %d operations", total.Ops)
	}
	if len(total.Unfinished) > 0 {
		r.fail("unfinished", "%d threads did not finish after the drain: %v", len(total.Unfinished), total.Unfinished[:min(len(total.Unfinished), 10)])
	}
	// The WAL bound (no checkpoint starvation). A process stopped inside
	// a read transaction pins its snapshot, and no checkpoint can recycle
	// the WAL until it is continued (SQLite's design, not the engine's),
	// so under the nemesis the bound applies to the WAL in use, outside
	// the stops and soakWALGrace after each; the file's high-water mark
	// is reported.
	var maxSize, maxLive, maxLiveStopped int64
	var series []string // MiB in use / file size, once a second
	unread := 0
	for i, w := range walSamples {
		maxSize = max(maxSize, w.size)
		if !w.read {
			unread++
		}
		if i%10 == 0 {
			series = append(series, fmt.Sprintf("%d/%d", w.live>>20, w.size>>20))
		}
		if slices.ContainsFunc(stops, func(s soakStopWindow) bool {
			return !w.at.Before(s.From) && w.at.Before(s.To.Add(soakWALGrace))
		}) {
			maxLiveStopped = max(maxLiveStopped, w.live)
			continue
		}
		maxLive = max(maxLive, w.live)
	}
	t.Logf("WAL: file %d KiB at most; in use %d KiB at most, %d KiB while a process was stopped (or within %v after)", maxSize>>10, maxLive>>10, maxLiveStopped>>10, soakWALGrace)
	// The bound on the WAL in use can only fail if it was read: an
	// unreadable -shm counts as 0 bytes in use.
	if len(walSamples) == 0 || unread > len(walSamples)/10 || max(maxLive, maxLiveStopped) == 0 {
		r.fail("wal", "the WAL in use was not observed: %d samples, %d unreadable, at most %d bytes in use", len(walSamples), unread, max(maxLive, maxLiveStopped))
	}
	if w := maxLive; w >= soakMaxWAL || (!nemesis && maxSize >= soakMaxWAL) {
		r.fail("wal", "the WAL reached %d MiB in use (file %d MiB), want under %d MiB (MiB in use/file once a second: %v)", w>>20, maxSize>>20, soakMaxWAL>>20, series)
	}
	if len(total.Others) > 0 {
		t.Logf("some run errors of kind other: %q", total.Others)
	}
	soakCheck(t, r, soakCheckInput{db: db, provider: provider, feed: feed, seed: seed, messages: messages, told: decisions, lost: losses, start: start, runUntil: runUntil,
		stops: stops, runners: soakProcs * goroutines})
	return r
}

// soakCheckInput is what soakCheck checks the files against.
type soakCheckInput struct {
	db, provider    string
	feed            *sql.DB
	seed            uint64
	messages        int
	told            map[string][]string   // approval ID → "outcome reviewer" each winner was told it recorded
	lost            map[string][]soakLoss // approval ID → what each loser was told
	start, runUntil time.Time
	stops           []soakStopWindow // when the nemesis held a process stopped
	runners         int              // runners in all processes
}

// soakLoss is what a resolver that lost was told: the winner ("outcome
// reviewer"), and whether its attempt began before the winner's decision
// (a race, not a late click).
type soakLoss struct {
	winner string
	raced  bool
}

// soakCheck opens the file without faults and checks the invariants.
func soakCheck(t *testing.T, r *soakRecorder, in soakCheckInput) {
	t.Helper()
	ctx := context.Background()
	told := in.told
	app, err := systemtest.OpenSoakApp(ctx, systemtest.SoakAppConfig{DB: in.db, Provider: in.provider})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sdb := app.Saver.DB()

	var ok string
	if err := sdb.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		r.fail("integrity", "integrity_check = %q, %v", ok, err)
	}

	// The threads in the file are the registered ones.
	registered := map[string]string{} // thread → origin
	registeredDuring := 0             // registered before the end of the run
	trows, err := sdb.QueryContext(ctx, `SELECT thread, origin, registered_at FROM soak_threads`)
	if err != nil {
		t.Fatal(err)
	}
	for trows.Next() {
		var th, origin string
		var at int64
		if err := trows.Scan(&th, &origin, &at); err != nil {
			t.Fatal(err)
		}
		registered[th] = origin
		if at <= in.runUntil.UnixNano() {
			registeredDuring++
		}
	}
	if err := trows.Err(); err != nil {
		t.Fatal(err)
	}
	trows.Close()
	threads, err := app.Saver.Threads(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, th := range threads {
		inFile[th.Thread] = true
		if _, ok := registered[th.Thread]; !ok {
			r.fail("threads-unregistered", "thread %s is in the file but was never registered", th.Thread)
		}
	}
	var never []string
	for th := range registered {
		if !inFile[th] {
			never = append(never, th)
		}
	}
	if len(never) > 0 {
		slices.Sort(never)
		r.fail("threads", "%d registered threads were never started: %v", len(never), never[:min(len(never), 10)])
	}

	// Every thread is done, with Next and Tasks that fit its status.
	statuses := map[graph.Status]int{}
	payMeta := map[string]nodes.ToolMeta{} // thread → the executor's account of its pay call
	payText := map[string]string{}         // thread → the pay tool message the model read
	var completed []time.Time              // when each thread completed
	for _, th := range threads {
		snap, err := app.Runner.GetState(ctx, th.Thread)
		if err != nil {
			r.fail("threads", "thread %s: %v", th.Thread, err)
			continue
		}
		statuses[snap.Status]++
		if snap.Status == graph.StatusDone {
			completed = append(completed, snap.CreatedAt)
		}
		if msg := soakCheckSnapshot(snap); msg != "" {
			r.fail("snapshot", "thread %s: %s", th.Thread, msg)
			t.Logf("history of thread %s:\n%s", th.Thread, soakHistory(ctx, app.Runner, th.Thread))
		} else if snap.Status != graph.StatusDone {
			r.fail("snapshot", "thread %s is stuck: %s after the drain (next %v)", th.Thread, snap.Status, snap.Next)
		}
		for _, m := range snap.Values.Messages {
			if m.Role == nodes.RoleTool && m.ToolCallID == "pay-1" && m.Meta != nil {
				payMeta[th.Thread], payText[th.Thread] = *m.Meta, m.Content
			}
		}
	}
	t.Logf("statuses: %v of %d threads (%d registered)", statuses, len(threads), len(registered))

	// Liveness: a floor on threads completed during the run, and no
	// stretch of soakLivenessGap without a completion, from the start to
	// the end of the run (the nemesis's kills included). Neither measures
	// the machine: the floor is a share of the threads registered during
	// the run (a slower machine registers fewer, as runners start new
	// threads only as theirs finish), and a stretch does not count the
	// time a process was held stopped (a process stopped while it holds
	// SQLite's write lock stops every writer, by design).
	slices.SortFunc(completed, func(a, b time.Time) int { return a.Compare(b) })
	during, last, gap, gapAt := 0, in.start, time.Duration(0), time.Duration(0)
	for _, c := range completed {
		if c.After(in.runUntil) {
			break
		}
		during++
		if d := soakRunning(last, c, in.stops); d > gap {
			gap, gapAt = d, last.Sub(in.start)
		}
		last = c
	}
	run := in.runUntil.Sub(in.start)
	tail := soakRunning(last, in.runUntil, in.stops)
	gap = max(gap, tail)
	if gap == tail {
		gapAt = last.Sub(in.start)
	}
	floor := max(in.runners, registeredDuring/soakFloorShare)
	t.Logf("liveness: %d threads completed during the run (floor %d: 1/%d of the %d registered during it), %d in the drain; the last completion of the run came %v before its end; the longest stretch without a completion, stops left out, was %v, from %v into the run",
		during, floor, soakFloorShare, registeredDuring, len(completed)-during, in.runUntil.Sub(last).Round(time.Millisecond), gap.Round(time.Millisecond), gapAt.Round(time.Millisecond))
	if during < floor {
		r.fail("liveness", "only %d threads completed in the %v run, want at least %d (1/%d of the %d registered during the run, and at least one per runner)", during, run, floor, soakFloorShare, registeredDuring)
	}
	if tail >= soakLivenessGap {
		r.fail("liveness", "the last completion of the run came %v before its end (%v without the stops), want under %v", in.runUntil.Sub(last).Round(time.Millisecond), tail.Round(time.Millisecond), soakLivenessGap)
	}
	if gap >= soakLivenessGap {
		r.fail("liveness", "no thread completed for %v (stops left out) from %v into the run, want under %v", gap.Round(time.Millisecond), gapAt.Round(time.Millisecond), soakLivenessGap)
	}

	// Messages: each handled exactly once, registering the thread it
	// names; every delivery acknowledged.
	handled := map[string][]string{} // message ID → threads registered for it
	hrows, err := sdb.QueryContext(ctx, `SELECT message_id, thread FROM soak_handled`)
	if err != nil {
		t.Fatal(err)
	}
	for hrows.Next() {
		var id, th string
		if err := hrows.Scan(&id, &th); err != nil {
			t.Fatal(err)
		}
		handled[id] = append(handled[id], th)
	}
	if err := hrows.Err(); err != nil {
		t.Fatal(err)
	}
	hrows.Close()
	var lostMsgs, twice []string
	for i := range in.messages {
		m := soakMessageOf(in.seed, i)
		switch ths := handled[m.ID]; {
		case len(ths) == 0:
			lostMsgs = append(lostMsgs, m.ID)
		case len(ths) > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", m.ID, len(ths)))
		case ths[0] != m.Thread || registered[m.Thread] != "message":
			r.fail("messages", "message %s registered thread %s (origin %q), want %s", m.ID, ths[0], registered[ths[0]], m.Thread)
		}
		delete(handled, m.ID)
	}
	if len(lostMsgs) > 0 {
		r.fail("messages-lost", "%d of %d messages were never handled: %v", len(lostMsgs), in.messages, lostMsgs[:min(len(lostMsgs), 10)])
	}
	if len(twice) > 0 {
		r.fail("messages-twice", "%d of %d messages were handled more than once: %v", len(twice), in.messages, twice[:min(len(twice), 10)])
	}
	for id := range handled {
		r.fail("messages", "message %s was handled but never sent", id)
	}
	var unacked, deliveries int
	if err := in.feed.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE acked = 0), coalesce(sum(attempts), 0) FROM deliveries`).Scan(&unacked, &deliveries); err != nil {
		t.Fatal(err)
	}
	t.Logf("feed: %d messages, %d deliveries made (%d sent)", in.messages, deliveries, in.messages*soakCopies)
	if unacked > 0 {
		r.fail("feed-acks", "%d deliveries were never acknowledged", unacked)
	}

	// The provider: pay called at most once per key; a thread whose pay
	// result says it ran (executed, or replayed from the ledger) was paid
	// exactly once, under the key the result names; a thread was only
	// paid after an approval.
	rows, err := app.Provider.DB.QueryContext(ctx, `SELECT key, thread, calls, amount FROM payments`)
	if err != nil {
		t.Fatal(err)
	}
	paid := map[string][]string{} // thread → keys paid under
	amounts := map[string]int{}   // thread → the amount paid (the last payment's)
	for rows.Next() {
		var key, thread string
		var calls, amount int
		if err := rows.Scan(&key, &thread, &calls, &amount); err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			r.fail("payments", "pay was called %d times with key %s (thread %s)", calls, key, thread)
		}
		paid[thread] = append(paid[thread], key)
		amounts[thread] = amount
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	allowed := func(m nodes.ToolMeta) bool {
		return m.Approval == string(approval.Approved) || m.Approval == string(approval.Edited)
	}
	ran := func(m nodes.ToolMeta) bool {
		return m.Status == nodes.StatusExecuted || m.Status == nodes.StatusReplayed
	}
	var untold []string
	for thread, keys := range paid {
		m := payMeta[thread]
		switch {
		case len(keys) != 1:
			r.fail("payments", "thread %s paid %d times", thread, len(keys))
		case !allowed(m):
			r.fail("payments", "thread %s was paid without an approval (approval %q): %s", thread, m.Approval, payText[thread])
		case !ran(m):
			// The payment happened but the model was told otherwise: see
			// the report below.
			untold = append(untold, thread+": "+payText[thread])
		}
	}
	approved, edited, rejected := 0, 0, 0
	for thread, m := range payMeta {
		if ran(m) && (len(paid[thread]) != 1 || paid[thread][0] != m.Key) {
			r.fail("payments", "thread %s says pay ran with key %s; the provider holds payments under %v", thread, m.Key, paid[thread])
		}
		switch m.Approval {
		case string(approval.Approved), string(approval.Edited):
			// Approved and done: the payment happened (exactly once, as
			// checked above), whatever the model was told, for the
			// amount asked, or the edited one.
			approved++
			_, want := systemtest.SoakOrder(thread)
			if m.Approval == string(approval.Edited) {
				edited++
				want = systemtest.SoakEditedAmount(want)
			}
			if len(paid[thread]) == 0 {
				r.fail("payments", "thread %s: pay was %s and the thread is done, but the provider was never paid (%s): %s", thread, m.Approval, m.Status, payText[thread])
			} else if amounts[thread] != want {
				r.fail("payments", "thread %s: pay was %s and paid %d, want %d: %s", thread, m.Approval, amounts[thread], want, payText[thread])
			}
		case string(approval.Rejected):
			rejected++
		}
	}
	// Floors: a soak whose payments never ran, or never were refused,
	// checks exactly-once on nothing.
	t.Logf("payments: %d threads approved (%d of them edited; %d paid, %d told otherwise), %d rejected", approved, edited, len(paid), len(untold), rejected)
	if approved == edited || edited == 0 || rejected == 0 {
		r.fail("payments", "%d threads had pay approved as asked, %d edited and %d rejected, want at least 1 of each", approved-edited, edited, rejected)
	}
	if len(untold) > 0 {
		// When ledger.Complete fails after the effect and the node then
		// runs again (a later save failed), the intent is still pending
		// under the first attempt's lease, so the call gets
		// ledger.ErrInProgress and the model reads "failed" although the
		// provider was paid (once). The executor now tries Complete and
		// Release again after a store error (and Begin, whose failure
		// after its commit did the same), so this needs three failures in
		// a row; it stays a report, not a failure, because with 1% faults
		// that is rare but possible.
		t.Logf("%d threads were paid once while their tool result says the call did not run, e.g. %s", len(untold), untold[0])
	}

	// Approvals: one decision per ID in the table; resolvers were told
	// they won at most once per ID, and what they were told is what is
	// stored.
	stored := map[string]string{}
	drows, err := sdb.QueryContext(ctx, `SELECT id, outcome, reviewer FROM approval_decisions`)
	if err != nil {
		t.Fatal(err)
	}
	for drows.Next() {
		var id, outcome, reviewer string
		if err := drows.Scan(&id, &outcome, &reviewer); err != nil {
			t.Fatal(err)
		}
		if _, dup := stored[id]; dup {
			r.fail("approvals", "approval %s has two decision rows", id)
		}
		stored[id] = outcome + " " + reviewer
	}
	if err := drows.Err(); err != nil {
		t.Fatal(err)
	}
	drows.Close()
	for id, outcomes := range told {
		if len(outcomes) != 1 {
			r.fail("approvals", "approval %s: %d reviewers were told they decided it (%v)", id, len(outcomes), outcomes)
		}
		if stored[id] != outcomes[0] {
			r.fail("approvals", "approval %s: reviewer told %q, stored %q", id, outcomes[0], stored[id])
		}
	}
	// Every loser was told the stored winner; and the pool raced: a
	// floor of approvals had a loser whose attempt began before the
	// winner's decision (the store's DecidedAt, a conservative test).
	raced, losses := 0, 0
	for id, ls := range in.lost {
		race := false
		for _, l := range ls {
			losses++
			race = race || l.raced
			if l.winner != stored[id] {
				r.fail("approvals", "approval %s: a loser was told %q won, stored %q", id, l.winner, stored[id])
			}
		}
		if race {
			raced++
		}
	}
	floor = soakRaceFloor(len(stored))
	t.Logf("approvals: %d decided, %d lost attempts on %d of them, %d with two or more deciders at once (floor %d)", len(stored), losses, len(in.lost), raced, floor)
	if raced < floor {
		r.fail("races", "%d approvals had two or more deciders at once, want at least %d", raced, floor)
	}
}

// soakRaceFloor is how many of n decided approvals must have had two or
// more deciders at once: a tenth, and at least 10. A share, not a rate: a
// slower machine decides fewer approvals, and races on about as many of
// them (25-31% were measured, quiet and with two CPU-bound processes
// beside the soak on 2 cores).
func soakRaceFloor(n int) int { return max(10, n/10) }

// soakRunning is how much of the stretch from a to b no process was held
// stopped by the nemesis.
func soakRunning(a, b time.Time, stops []soakStopWindow) time.Duration {
	d := b.Sub(a)
	// The stops, merged where they overlap (two processes at once).
	ws := slices.Clone(stops)
	slices.SortFunc(ws, func(x, y soakStopWindow) int { return x.From.Compare(y.From) })
	var merged []soakStopWindow
	for _, w := range ws {
		if n := len(merged); n > 0 && !w.From.After(merged[n-1].To) {
			if w.To.After(merged[n-1].To) {
				merged[n-1].To = w.To
			}
			continue
		}
		merged = append(merged, w)
	}
	for _, w := range merged {
		from, to := w.From, w.To
		if from.Before(a) {
			from = a
		}
		if to.After(b) {
			to = b
		}
		if to.After(from) {
			d -= to.Sub(from)
		}
	}
	return d
}

// soakCheckSnapshot says what is wrong with a thread's final snapshot, or
// "" when its status, Next and Tasks agree.
func soakCheckSnapshot(s graph.Snapshot[systemtest.SoakState]) string {
	var roles []nodes.Role
	for _, m := range s.Values.Messages {
		roles = append(roles, m.Role)
	}
	if n := len(slices.DeleteFunc(slices.Clone(roles), func(r nodes.Role) bool { return r != nodes.RoleUser })); n > 1 {
		return fmt.Sprintf("%s with %d customer messages, want 1: the thread was started twice (roles %v)", s.Status, n, roles)
	}
	switch s.Status {
	case graph.StatusDone:
		if len(s.Next) != 0 || len(s.Interrupts) != 0 {
			return fmt.Sprintf("done with next %v and %d interrupts", s.Next, len(s.Interrupts))
		}
		if !slices.Equal(roles, soakRoles) {
			return fmt.Sprintf("done with the conversation %v, want %v (the customer, the model's three turns, the tool results)", roles, soakRoles)
		}
		if len(s.Values.Audit) != 1 {
			return fmt.Sprintf("done with %d audit entries, want 1", len(s.Values.Audit))
		}
	case graph.StatusWaiting:
		if len(s.Next) == 0 || (len(s.Interrupts) == 0 && s.Breakpoint == nil) {
			return fmt.Sprintf("waiting with next %v, %d interrupts", s.Next, len(s.Interrupts))
		}
	case graph.StatusPending:
		if len(s.Next) == 0 {
			return "pending with nothing next"
		}
		for _, tk := range s.Tasks {
			if tk.Error != nil {
				return fmt.Sprintf("pending with a failed task %s: %s", tk.Name, tk.Error.Message)
			}
		}
	default:
		var errs []string
		for _, tk := range s.Tasks {
			if tk.Error != nil {
				errs = append(errs, tk.Name+": "+tk.Error.Message)
			}
		}
		return fmt.Sprintf("status %s (next %v; %s)", s.Status, s.Next, strings.Join(errs, "; "))
	}
	if len(s.Next) != len(slices.DeleteFunc(slices.Clone(s.Tasks), func(tk graph.Task) bool { return tk.Result != nil })) && s.Status != graph.StatusDone {
		return fmt.Sprintf("%s: next %v does not match the unfinished tasks", s.Status, s.Next)
	}
	return ""
}

// soakStart starts thread with its customer's message, keyed with
// soakStartKey, so that a second start applies nothing (Result.Repeated)
// and continues the run if it stopped before its end.
func soakStart(ctx context.Context, app *systemtest.SoakApp, thread string) (graph.Result[systemtest.SoakState], error) {
	return app.Runner.Invoke(ctx, thread, systemtest.SoakUser(thread), graph.RunKey(soakStartKey))
}

// soakHistory describes a thread's checkpoints, oldest first: each one's
// step, source and run, the messages of its state by role, and the tasks
// of the step that followed it with their writes or errors, so that a
// failed snapshot shows which step wrote what.
func soakHistory(ctx context.Context, run *graph.Runnable[systemtest.SoakState], thread string) string {
	hist, err := run.History(ctx, thread, graph.HistoryOptions{})
	if err != nil {
		return "history: " + err.Error()
	}
	var b strings.Builder
	for i := len(hist) - 1; i >= 0; i-- {
		s := hist[i]
		var roles []string
		for _, m := range s.Values.Messages {
			roles = append(roles, fmt.Sprintf("%s:%.24q", m.Role, m.Content))
		}
		fmt.Fprintf(&b, "  %s step %d %s run %s at %s: %d messages %v, %d audits\n", s.Config.CheckpointID, s.Metadata.Step, s.Metadata.Source, s.Metadata.RunID,
			s.CreatedAt.Format("15:04:05.000000"), len(s.Values.Messages), roles, len(s.Values.Audit))
		for _, tk := range s.Tasks {
			switch {
			case tk.Error != nil:
				fmt.Fprintf(&b, "    task %s %s: error %s\n", tk.Name, tk.ID, tk.Error.Message)
			case tk.Result != nil:
				var fields []string
				for f, v := range tk.Result {
					fields = append(fields, fmt.Sprintf("%s=%.200s", f, v))
				}
				slices.Sort(fields)
				fmt.Fprintf(&b, "    task %s %s: wrote %v\n", tk.Name, tk.ID, fields)
			default:
				fmt.Fprintf(&b, "    task %s %s: unfinished\n", tk.Name, tk.ID)
			}
		}
	}
	return b.String()
}

// soakErrorKind names the kind of a run error for the soak's log.
func soakErrorKind(err error) string {
	for _, k := range []struct {
		name string
		err  error
	}{
		{"thread-busy", checkpoint.ErrThreadBusy}, {"conflict", checkpoint.ErrConflict}, {"commit-indeterminate", sqlite.ErrCommitIndeterminate},
		{"store-busy", sqlite.ErrStoreBusy}, {"corrupt", checkpoint.ErrCorrupt}, {"not-found", graph.ErrThreadNotFound},
		{"nothing-to-resume", graph.ErrNothingToResume}, {"pending-interrupt", graph.ErrPendingInterrupt},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		return "node " + ne.Node
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		return "sqlite " + se.Code.Error()
	}
	return "other"
}

// soakChild is a soak process. It returns its exit code.
func soakChild(raw string) int {
	var cfg soakChildConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "soak child:", err)
		return 2
	}
	// A child that hangs prints its goroutines and exits, so that the
	// parent reports where it hung instead of a bare kill.
	watchdog := time.AfterFunc(time.Until(cfg.DrainUntil)+20*time.Second, func() {
		soakOut.Lock()
		fmt.Fprintf(os.Stderr, "soak child %d.%d hung; goroutines:\n", cfg.Proc, cfg.Incarnation)
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		os.Exit(3)
	})
	defer watchdog.Stop()
	res, err := runSoakChild(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak child:", err)
		return 1
	}
	b, _ := json.Marshal(res)
	soakPrintf("RESULT %s\n", b)
	return 0
}

// soakOut serialises the child's stdout lines.
var soakOut sync.Mutex

func soakPrintf(format string, args ...any) {
	soakOut.Lock()
	defer soakOut.Unlock()
	fmt.Printf(format, args...)
}

func runSoakChild(cfg soakChildConfig) (soakChildResult, error) {
	ctx := context.Background()
	before, after := systemtest.SoakFaults()
	app, err := systemtest.OpenSoakApp(ctx, systemtest.SoakAppConfig{DB: cfg.DB, Provider: cfg.Provider, DriverName: systemtest.SoakFaultDriver})
	if err != nil {
		return soakChildResult{}, err
	}
	defer app.Close()
	feed, err := openSoakFeed(cfg.Feed)
	if err != nil {
		return soakChildResult{}, err
	}
	defer feed.Close()
	sdb := app.Saver.DB()
	// Each incarnation has its own fault stream, drawn from the seed.
	procSeed := cfg.Seed ^ uint64(cfg.Proc+1)*0x9e3779b97f4a7c15 ^ uint64(cfg.Incarnation)*0xbf58476d1ce4e5b9
	// Half the rate before operations (which then do not happen), half
	// after (they took effect; the caller is told they failed). Begin is
	// only failed before: SQLite's BEGIN never fails after it started a
	// transaction. Commit is only failed after: faultdb's Before fault on
	// a driver-level Tx.Commit returns without ending the real
	// transaction, so the pooled connection would keep the write lock (or
	// an old read snapshot) forever, which go-sqlite3 itself never does
	// (its Commit rolls back on failure); reported to the lead.
	before.ArmRandom(procSeed, soakFaultRate/2, faultdb.Before, []faultdb.Op{faultdb.OpBegin, faultdb.OpExec, faultdb.OpQuery}, systemtest.SoakTransientSQLiteFault...)
	after.ArmRandom(procSeed+1, soakFaultRate/2, faultdb.After, []faultdb.Op{faultdb.OpExec, faultdb.OpQuery, faultdb.OpCommit}, systemtest.SoakTransientSQLiteFault...)

	var (
		mu         sync.Mutex
		mine       = map[string]bool{} // threads this incarnation's runners started
		done       = map[string]bool{}
		started    atomic.Int64
		deliveries atomic.Int64
		handled    atomic.Int64
		dups       atomic.Int64
		feedErrs   atomic.Int64
		takenOver  atomic.Int64
		runErrors  atomic.Int64
		continued  atomic.Int64
		repeated   atomic.Int64
		decided    atomic.Int64
		lost       atomic.Int64
		resumed    atomic.Int64
		firstErr   atomic.Value
		draining   atomic.Bool
		faults     atomic.Int64 // frozen when the drain starts
		ops        atomic.Int64
	)
	kinds := map[string]int{}
	var others []string
	noteErr := func(err error) {
		if err == nil {
			return
		}
		runErrors.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
		mu.Lock()
		k := soakErrorKind(err)
		kinds[k]++
		if k == "other" && len(others) < 5 {
			others = append(others, err.Error())
		}
		mu.Unlock()
	}
	countFaults := func() {
		faults.Store(int64(len(before.Events()) + len(after.Events())))
		n := 0
		for _, op := range []faultdb.Op{faultdb.OpBegin, faultdb.OpExec, faultdb.OpQuery, faultdb.OpCommit} {
			n += after.Count(op)
		}
		ops.Store(int64(n))
	}
	report := func() soakChildResult {
		if !draining.Load() {
			countFaults()
		}
		r := soakChildResult{
			Started: int(started.Load()), Deliveries: int(deliveries.Load()), Handled: int(handled.Load()), Duplicates: int(dups.Load()),
			FeedErrors: int(feedErrs.Load()), TakenOver: int(takenOver.Load()), Faults: int(faults.Load()), Ops: int(ops.Load()),
			Decided: int(decided.Load()), Lost: int(lost.Load()), Resumed: int(resumed.Load()), Continued: int(continued.Load()), Repeated: int(repeated.Load()),
			RunErrors: int(runErrors.Load()),
		}
		mu.Lock()
		r.ErrorKinds, r.Others = maps.Clone(kinds), slices.Clone(others)
		mu.Unlock()
		if s, ok := firstErr.Load().(string); ok {
			r.FirstError = s
		}
		return r
	}
	// STATS lines, so that an incarnation the nemesis kills still counts.
	stopStats := make(chan struct{})
	var statsDone sync.WaitGroup
	statsDone.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopStats:
				return
			case <-tick.C:
			}
			b, _ := json.Marshal(report())
			soakPrintf("STATS %s\n", b)
		}
	})
	defer func() { close(stopStats); statsDone.Wait() }()

	// register records a thread before it is started, so that it is
	// taken over if this process dies before it is done.
	register := func(thread string) error {
		_, err := sdb.ExecContext(ctx, `INSERT OR IGNORE INTO soak_threads (thread, origin, registered_at) VALUES (?, 'runner', ?)`, thread, time.Now().UnixNano())
		return err
	}
	markDone := func(thread string) {
		mu.Lock()
		done[thread] = true
		mu.Unlock()
		// A fault here leaves the row unfinished: the scanner looks again.
		sdb.ExecContext(ctx, `UPDATE soak_threads SET done = 1 WHERE thread = ? AND done = 0`, thread)
	}
	isDone := func(th string) bool {
		mu.Lock()
		defer mu.Unlock()
		return done[th]
	}
	// unfinished lists the registered threads not known to be done,
	// registered before cutoff.
	unfinished := func(cutoff time.Time) ([]string, error) {
		rows, err := sdb.QueryContext(ctx, `SELECT thread FROM soak_threads WHERE done = 0 AND registered_at <= ? ORDER BY registered_at`, cutoff.UnixNano())
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var th string
			if err := rows.Scan(&th); err != nil {
				return nil, err
			}
			out = append(out, th)
		}
		return out, rows.Err()
	}

	// start starts a thread with its customer's message, keyed
	// (graph.RunKey), so that starting it again applies nothing. Two
	// starts of one thread happen: a process can be held (the nemesis's
	// SIGSTOP, or the scheduler) between registering a thread, or finding
	// it not started, and starting it, for longer than soakTakeOverAge,
	// while another process's scanner starts it and runs it to its end.
	// Without the key the late start is new input on the thread, a second
	// customer message that the agent answers from a fourth model turn.
	start := func(thread string) {
		res, err := soakStart(ctx, app, thread)
		noteErr(err)
		if err == nil && res.Repeated {
			repeated.Add(1)
		}
	}

	// advance moves a thread on: start it if it has no checkpoint,
	// continue it if a fault (or a dead process) left it failed or
	// pending. It reports whether it ran the thread.
	advance := func(thread string) bool {
		snap, err := app.Runner.GetState(ctx, thread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			start(thread)
			return true
		case err != nil:
			noteErr(err)
		case snap.Status == graph.StatusDone:
			markDone(thread)
		case snap.Status == graph.StatusFailed || snap.Status == graph.StatusPending:
			continued.Add(1)
			_, err := app.Runner.Continue(ctx, thread)
			noteErr(err)
			return true
		}
		return false
	}

	// handle handles one delivered message: the claim and the thread's
	// registration in one transaction. An error means the delivery must
	// be delivered again.
	handle := func(d soakDelivery) error {
		var m soakMessage
		if err := json.Unmarshal([]byte(d.Body), &m); err != nil {
			return err
		}
		c := ledger.Claim{Scope: soakFeedScope, ID: d.MessageID, Fingerprint: ledger.MessageFingerprint([]byte(d.Body))}
		if cfg.Sabotage == "claim-outside-tx" {
			// Negative control: the claim commits on its own.
			switch err := app.Ledger.ClaimMessage(ctx, c); {
			case errors.Is(err, ledger.ErrDuplicateMessage):
				dups.Add(1)
				return nil
			case err != nil:
				return err
			}
		}
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if cfg.Sabotage == "" {
			// A redelivery carries the same body, so a mismatch
			// (ErrDuplicateMismatch) is a failure, not a duplicate.
			switch err := app.Ledger.ClaimMessageTx(ctx, tx, c); {
			case errors.Is(err, ledger.ErrDuplicateMessage):
				dups.Add(1)
				return nil
			case err != nil:
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO soak_threads (thread, origin, registered_at) VALUES (?, 'message', ?)`, m.Thread, time.Now().UnixNano()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO soak_handled (message_id, thread, proc, incarnation) VALUES (?, ?, ?, ?)`, d.MessageID, m.Thread, cfg.Proc, cfg.Incarnation); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		handled.Add(1)
		return nil
	}
	owner := fmt.Sprintf("p%d.%d", cfg.Proc, cfg.Incarnation)
	// consume takes one due delivery, handles it, acknowledges it (or
	// gives it back after an error), and starts the message's thread. It
	// reports whether there was one.
	consume := func() bool {
		d, ok, err := takeSoakDelivery(ctx, feed, owner)
		if !ok {
			if err != nil {
				feedErrs.Add(1)
			}
			return false
		}
		deliveries.Add(1)
		if err := handle(d); err != nil {
			feedErrs.Add(1)
			settleSoakDelivery(ctx, feed, d, owner, false)
			return true
		}
		// An ack lost here (a kill) makes one more redelivery.
		settleSoakDelivery(ctx, feed, d, owner, true)
		var m soakMessage
		json.Unmarshal([]byte(d.Body), &m)
		if !isDone(m.Thread) {
			// Starting the thread may fail (a fault, or another
			// process's handling of the same message): the scanner
			// starts it later.
			advance(m.Thread)
		}
		return true
	}

	// resolve is one resolver's attempt at one pending approval: approve
	// it, reject it, or (a gate, not a run-again question) approve it
	// with half the amount, as pick says. The winner prints DECIDED, a
	// loser LOST with the winner the store told it of, and whether its
	// attempt began before the winner's decision (then two deciders
	// raced on it; a loser that began later clicked on a stale list).
	resolve := func(name string, it approval.Item, pick float64) {
		begun := time.Now()
		var d approval.Decision
		var err error
		switch {
		case pick < 0.6:
			d, err = app.Inbox.Approve(ctx, it.ID, name, "soak")
		case pick < 0.85:
			d, err = app.Inbox.Reject(ctx, it.ID, name, "soak")
		case it.Request.Kind == "" || it.Request.Kind == approval.KindGate:
			order, amount := systemtest.SoakOrder(it.Thread)
			args := fmt.Sprintf(`{"order":%q,"amount":%d}`, order, systemtest.SoakEditedAmount(amount))
			d, err = app.Inbox.Edit(ctx, it.ID, name, json.RawMessage(args), "soak: half")
		default:
			d, err = app.Inbox.Approve(ctx, it.ID, name, "soak")
		}
		var ad *approval.AlreadyDecidedError
		switch {
		case err == nil:
			decided.Add(1)
			soakPrintf("DECIDED %s %s %s\n", it.ID, d.Outcome, d.Reviewer)
		case errors.As(err, &ad):
			lost.Add(1)
			soakPrintf("LOST %s %s %s %t\n", it.ID, ad.Winner.Outcome, ad.Winner.Reviewer, begun.Before(ad.Winner.DecidedAt))
		}
	}
	// resolver is one of the pool's resolvers: it lists the pending
	// approvals and acts on one of them, the oldest half the time (so that
	// resolvers meet on it), else one at random.
	resolver := func(k int) {
		rng := rand.New(rand.NewPCG(procSeed, uint64(k)+7))
		name := fmt.Sprintf("resolver-%d.%d-%d", cfg.Proc, cfg.Incarnation, k)
		for time.Now().Before(cfg.RunUntil) {
			page, err := app.Inbox.List(ctx, approval.Filter{Limit: 50})
			if err == nil && len(page.Items) > 0 { // else a fault, or nothing to do
				i := 0
				if rng.IntN(2) == 0 {
					i = rng.IntN(len(page.Items))
				}
				resolve(name, page.Items[i], rng.Float64())
			}
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
		}
	}
	// decideAll has one resolver act on every listed approval (the drain).
	decideAll := func(rng *rand.Rand) {
		page, err := app.Inbox.List(ctx, approval.Filter{Limit: 50})
		if err != nil {
			return // a fault: the next pass lists again
		}
		for _, it := range page.Items {
			resolve(fmt.Sprintf("resolver-%d.%d-drain", cfg.Proc, cfg.Incarnation), it, rng.Float64())
		}
	}

	workOnce := func() {
		rep, err := app.Worker.RunOnce(ctx)
		if err == nil {
			resumed.Add(int64(rep.Resumed))
		}
	}

	// Phase 1: run with faults. Each runner keeps a few threads open at
	// a time: it starts a new one when fewer than soakOpenPerRunner of its
	// threads are unfinished, and otherwise moves its open threads on
	// (continuing those a fault left failed or pending), so that the
	// threads waiting for reviewers stay few and the load stays steady.
	stop := cfg.RunUntil
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Go(func() {
			var open []string
			for i := 0; time.Now().Before(stop); {
				open = slices.DeleteFunc(open, func(th string) bool { advance(th); return isDone(th) })
				if len(open) >= soakOpenPerRunner {
					time.Sleep(25 * time.Millisecond)
					continue
				}
				thread := fmt.Sprintf("soak-%d-p%d.%d-g%d-%d", cfg.Seed%100000, cfg.Proc, cfg.Incarnation, g, i)
				i++
				if err := register(thread); err != nil {
					// Maybe registered (a fault after the insert): then
					// a scanner starts it.
					noteErr(err)
					continue
				}
				started.Add(1)
				mu.Lock()
				mine[thread] = true
				mu.Unlock()
				open = append(open, thread)
				start(thread)
			}
		})
	}
	for range soakConsumers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if !consume() {
					time.Sleep(30 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() { // the scanner: takes over what nobody moves on
		for time.Now().Before(stop) {
			ths, err := unfinished(time.Now().Add(-soakTakeOverAge))
			if err == nil {
				for _, th := range ths {
					if !time.Now().Before(stop) {
						break
					}
					mu.Lock()
					own := mine[th]
					mu.Unlock()
					if advance(th) && !own {
						takenOver.Add(1)
					}
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	for k := range soakResolvers {
		wg.Go(func() { resolver(k) })
	}
	wg.Go(func() { // the worker
		for time.Now().Before(stop) {
			workOnce()
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()

	// Phase 2: drain without faults, until the feed is empty and every
	// registered thread, of any process, is done.
	countFaults()
	draining.Store(true)
	before.Reset()
	after.Reset()
	var todo []string
	drainRng := rand.New(rand.NewPCG(procSeed, 6))
	for time.Now().Before(cfg.DrainUntil) {
		decideAll(drainRng)
		workOnce()
		for consume() {
		}
		var left int
		if err := feed.QueryRowContext(ctx, `SELECT count(*) FROM deliveries WHERE acked = 0`).Scan(&left); err != nil {
			left = -1
		}
		todo, err = unfinished(time.Now())
		if err == nil && len(todo) == 0 && left == 0 {
			break
		}
		for _, th := range todo {
			advance(th)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := report()
	res.Unfinished = todo
	if len(todo) > 0 {
		// For the parent's report: where this process is.
		soakOut.Lock()
		fmt.Fprintf(os.Stderr, "soak child %d.%d: the drain gave up with %d threads unfinished; goroutines:\n", cfg.Proc, cfg.Incarnation, len(todo))
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		soakOut.Unlock()
	}
	return res, nil
}

// TestSoakNemesisPlan: every plan fits its run, its actions do not
// overlap, and no seed leaves kills (or, from two actions, stops) out.
func TestSoakNemesisPlan(t *testing.T) {
	for _, run := range []time.Duration{10 * time.Second, 30 * time.Second, 5 * time.Minute} {
		t.Run(run.String(), func(t *testing.T) {
			for seed := range uint64(2000) {
				plan := soakNemesisPlan(seed, soakProcs, run)
				kills := 0
				for i, a := range plan {
					if a.Kill {
						kills++
					}
					end := run - time.Second
					if i+1 < len(plan) {
						end = plan[i+1].At
					}
					if a.At <= 0 || a.At+a.Pause > end || (!a.Kill && a.Pause < 500*time.Millisecond) || a.Proc < 0 || a.Proc >= soakProcs {
						t.Fatalf("seed %d, %v: action %d (%v) does not fit before %v: %v", seed, run, i, a, end, plan)
					}
				}
				if len(plan) > 0 && kills == 0 {
					t.Fatalf("seed %d, %v: no kill in %v", seed, run, plan)
				}
				if len(plan) > 1 && kills == len(plan) {
					t.Fatalf("seed %d, %v: no stop in %v", seed, run, plan)
				}
				if run >= 10*time.Second && len(plan) == 0 {
					t.Fatalf("seed %d, %v: empty plan", seed, run)
				}
			}
		})
	}
}

// soakPayLease bounds the ledger lease of the soak's pay tool (nodes'
// default for a tool with DefaultTimeout and the default retry policy,
// about 140 s), with a margin.
const soakPayLease = 150 * time.Second
