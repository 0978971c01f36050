package workers_test

// The crash loop on Postgres: three worker processes (this test binary
// re-executed) on one Postgres schema, some bookings gated on approvals
// that the test decides while the workers run.

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/retry"
	"github.com/lockstepgo/lockstep/workers"
)

// The environment of a Postgres worker process, beside envDB (the URL),
// envWitness, envThreads and envPool.
const (
	envSchema = "WORKERS_TEST_SCHEMA"
	envSlot   = "WORKERS_TEST_SLOT" // the worker's slot: its runner's and approval worker's name, the same when a killed worker is replaced
)

// pgFleetPoints are where the Postgres crash loop kills: the engine's
// write points (a node's end, before and after each save, after the
// charge's effect) and the pool's own in the saver (before a claim is
// sent, after it committed; a settle's transaction begun, before and
// after its commit).
var pgFleetPoints = []string{
	string(crashtest.AfterNode), string(crashtest.BeforeSave), string(crashtest.AfterSave), string(crashtest.AfterToolEffect),
	"postgres.claim.beforeSend", "postgres.claim.afterCommit",
	"postgres.settle.begin", "postgres.settle.beforeCommit", "postgres.settle.afterCommit",
}

// pgFleetPlan is a child's plan, a function of seed and the child's
// number alone: a point and an occurrence (early, so that each worker
// process is cheap), or, one time in five, a delay.
func pgFleetPlan(seed uint64, child int) (crashtest.Plan, string) {
	rnd := mrand.New(mrand.NewPCG(seed, uint64(child)))
	if rnd.IntN(5) == 0 {
		return crashtest.Plan{Delay: time.Duration(50+rnd.IntN(250)) * time.Millisecond}, ""
	}
	pt := pgFleetPoints[rnd.IntN(len(pgFleetPoints))]
	occ := 1 + rnd.IntN(4)
	if pt == string(crashtest.AfterToolEffect) {
		occ = 1 + rnd.IntN(2)
	}
	if strings.HasPrefix(pt, "postgres.") {
		return crashtest.Plan{}, pt + "@" + strconv.Itoa(occ)
	}
	return crashtest.Plan{Point: crashtest.Point(pt), Occurrence: occ}, ""
}

// pgFleetCycles is how many worker processes the Postgres crash loop
// kills: 200 in the default run, 1000 with LOCKSTEP_LONG=1;
// LOCKSTEP_CYCLES overrides both.
func pgFleetCycles(t *testing.T) int {
	if s := os.Getenv("LOCKSTEP_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LOCKSTEP_CYCLES=%q", s)
		}
		return n
	}
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		return 1000
	}
	return 200
}

// openFleetDB opens the schema of a Postgres crash loop scenario.
func openFleetDB(ctx context.Context, url, schema string, cfg postgres.Config) (*postgres.DB, error) {
	cfg.Schema = schema
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4
	}
	return postgres.Open(ctx, url, cfg)
}

// pgCrashChild is a worker of the Postgres crash loop: it works the
// bookings, resuming decided approvals, until every one is confirmed (or
// it is killed).
func pgCrashChild() error {
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
	ctx := testhook.With(context.Background(), hit)
	db, err := openFleetDB(ctx, os.Getenv(envDB), os.Getenv(envSchema), postgres.Config{Hook: hit, MaxConns: 8})
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := crashtest.OpenWitness(os.Getenv(envWitness), ch.Gen)
	if err != nil {
		return err
	}
	defer w.Close()
	led := crashtest.AckLedger(db.Ledger(), rep)
	r, err := bookingGraph(led, w, os.Getenv(envWitness), hit).Compile(
		graph.WithSaver(crashtest.AckSaver(db.Saver(), rep)), graph.WithRunner("fleet-slot-"+os.Getenv(envSlot)), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		return err
	}
	// An attempt to resume a decision whose thread a dead worker's lease
	// still holds is tried again soon.
	again := retry.Policy{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 500 * time.Millisecond}
	pool, err := workers.New(r, workers.Options{Store: db.Saver(), Concurrency: 4, Poll: 50 * time.Millisecond,
		Approvals: db.Approvals(), Approval: approval.WorkerOptions{Name: "fleet-slot-" + os.Getenv(envSlot), Retry: &again}})
	if err != nil {
		return err
	}
	// later sees the approvals whose resume waits for its next attempt.
	later, err := openFleetDB(ctx, os.Getenv(envDB), os.Getenv(envSchema), postgres.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }, MaxConns: 1})
	if err != nil {
		return err
	}
	defer later.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	for {
		finished, err := bookingsDone(ctx, r, db.Saver(), n)
		if err != nil {
			return err
		}
		if finished {
			// Every decision resumed, too.
			un, err := later.Approvals().Unresumed(ctx, 1)
			if err != nil {
				return err
			}
			if len(un) == 0 {
				break
			}
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

// gatedBooking says which bookings wait on an approval: one in three.
func gatedBooking(i int) bool { return i%3 == 1 }

// TestCrashLoopThreeWorkersPostgres (D18; R04 with several processes, on
// Postgres): three worker processes share one Postgres schema and its
// queued bookings, a third of them gated on an approval that the test
// approves from the inbox while the workers run; each worker is killed
// (SIGKILL) at a seeded random write point of the engine or of the pool
// in the saver (before a claim is sent or after it committed; in a
// settle's transaction, before or after its commit), or after a random
// delay, and replaced by a new one (whose approval worker has the dead
// one's name, so that it takes back at once the resume claims it left);
// after 40 kills in a scenario the replacements run without a plan, so
// that the scenario finishes. Then: every acknowledged checkpoint on its
// thread's chain and no fork; every booking confirmed, its steps once
// each, its approval decided and resumed (none lost: nothing unresumed);
// every charge made exactly once (the witness), exactly once when
// acknowledged; nothing left queued, leased or due. The default run kills
// 200 workers (LOCKSTEP_LONG=1: 1000). A failure prints the seed;
// LOCKSTEP_SEED=<seed> replays the plans (not the interleaving).
func TestCrashLoopThreeWorkersPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	url := pgURL(t)
	seed := mrand.Uint64() >> 1
	if s := os.Getenv("LOCKSTEP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LOCKSTEP_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (LOCKSTEP_SEED=%d go test -run '^TestCrashLoopThreeWorkersPostgres$' ./workers replays its plans)", seed, seed)
	cycles := pgFleetCycles(t)
	const (
		bookings    = 48
		workerCount = 3
		maxKills    = 40 // per scenario, before replacements run clean
	)
	ctx := t.Context()
	loop := newFleetLoop(workerCount, maxKills, cycles)
	for scenario := 0; loop.killed < cycles; scenario++ {
		_, schema := pgSchema(t)
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("scenario-%d", scenario))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		witness := filepath.Join(dir, "witness")
		enqueueBookingsPG(t, url, schema, bookings)
		stopDecider := decideAll(t, url, schema)
		hist, kills, failure := loop.scenario(ctx, func(n int) (crashtest.Plan, string) { return pgFleetPlan(seed, n) },
			func(slot int) []string {
				return []string{envChild + "=crash-pg", envDB + "=" + url, envSchema + "=" + schema, envWitness + "=" + witness,
					envThreads + "=" + strconv.Itoa(bookings), envSlot + "=" + strconv.Itoa(slot)}
			})
		decided := stopDecider()
		if failure != nil {
			t.Fatalf("seed %d, scenario %d: %v", seed, scenario, failure)
		}
		if err := checkBookingsPG(ctx, url, schema, witness, bookings, hist, decided); err != nil {
			t.Fatalf("seed %d, scenario %d (%d kills: %v): %v", seed, scenario, kills, hist.Kills, err)
		}
	}
	loop.report(t)
}

// enqueueBookingsPG queues n bookings in schema, a third of them gated.
func enqueueBookingsPG(t *testing.T, url, schema string, n int) {
	t.Helper()
	db, err := openFleetDB(t.Context(), url, schema, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := bookingGraph(nil, nil, "", func(string) {}).Compile(graph.WithSaver(db.Saver()), graph.WithRunner("fleet"), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := workers.New(r, workers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := bookingThread(i)
		if _, err := pool.Enqueue(t.Context(), b, graph.Set(booking{Booking: b, Gated: gatedBooking(i)}, "Booking", "Gated"), workers.RunKey("book")); err != nil {
			t.Fatal(err)
		}
	}
}

// decideAll approves, from the inbox, every approval the workers ask for
// in schema until the returned function is called; that returns the IDs
// it approved.
func decideAll(t *testing.T, url, schema string) func() map[string]string {
	t.Helper()
	db, err := openFleetDB(t.Context(), url, schema, postgres.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	in := approval.NewInbox(db.Saver(), db.Approvals())
	approved := map[string]string{} // approval ID -> thread
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			page, err := in.List(ctx, approval.Filter{Limit: approval.MaxPageSize})
			if err == nil {
				for _, it := range page.Items {
					var ad *approval.AlreadyDecidedError
					if _, err := in.Approve(ctx, it.ID, "front-desk", "ok"); err == nil || errors.As(err, &ad) {
						approved[it.ID] = it.Thread
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() map[string]string {
		cancel()
		<-done
		db.Close()
		return approved
	}
}

// checkBookingsPG runs the Postgres crash loop's checks on a finished
// scenario; decided are the approvals the test approved.
func checkBookingsPG(ctx context.Context, url, schema, witness string, n int, hist *crashtest.History, decided map[string]string) error {
	// An hour on: every lease and claim the dead workers left has lapsed.
	db, err := openFleetDB(ctx, url, schema, postgres.Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		return err
	}
	defer db.Close()
	s := db.Saver()
	threads := make([]string, n)
	for i := range n {
		threads[i] = bookingThread(i)
	}
	_, vs := crashtest.VerifyCheckpoints(ctx, s, threads, hist.Checkpoints, crashtest.CheckpointOptions{})
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
	gatedThreads := map[string]bool{}
	for i, th := range threads {
		snap, err := r.GetState(ctx, th)
		if err != nil {
			return err
		}
		want := booking{Booking: th, Log: []string{"reserve", "charge", "confirm"}, Charge: "ch-" + th}
		if gatedBooking(i) {
			want.Gated, want.Decision = true, string(approval.Approved)
			gatedThreads[th] = true
		}
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
	// No approval lost: each gated booking's was decided and resumed.
	byThread := map[string]int{}
	for id, th := range decided {
		byThread[th]++
		rec, err := db.Approvals().Get(ctx, id)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("approval %s of %s: %v", id, th, err))
		case rec.Resume.At.IsZero():
			problems = append(problems, fmt.Sprintf("approval %s of %s was never resumed: %+v", id, th, rec.Resume))
		}
	}
	for th := range gatedThreads {
		if byThread[th] != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d approvals decided, want 1", th, byThread[th]))
		}
	}
	if un, err := db.Approvals().Unresumed(ctx, 0); err != nil || len(un) > 0 {
		problems = append(problems, fmt.Sprintf("approvals left unresumed: %d (%v)", len(un), err))
	}
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
