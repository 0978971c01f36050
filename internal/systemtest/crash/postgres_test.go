package crash_test

// SIGKILL at each of the Postgres stores' commit points (postgres.Config.Hook)
// while bookings are approved, charged through the fenced ledger and
// confirmed; after every death, and once every booking is done, the
// database is checked for what a crash must never leave.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/pgtest/pgschema"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/retry"
)

// pgCommitRole is the child role of the Postgres commit-point test;
// envPGCommit holds its configuration (pgCommitConfig, JSON).
const (
	pgCommitRole = "pg-commit-points"
	envPGCommit  = "LOCKSTEP_PG_COMMIT"
)

// pgCommitPoints are the saver's commit points the test kills at: a
// checkpoint's (before and after COMMIT; its checkpoints are one round
// trip each, so ".begin", which only a checkpoint in an explicit
// transaction meets, such as a subgraph's, is not among them) and pending
// writes' transactions (begun, before and after COMMIT), the joint commits that
// carry an approval's consumption or a ledger outcome with the save, the
// fenced transactions of the ledger's intents, and a lease taken.
var pgCommitPoints = []crashtest.Point{
	crashtest.PGPutBeforeCommit, crashtest.PGPutAfterCommit,
	crashtest.PGWritesBegin, crashtest.PGWritesBeforeCommit, crashtest.PGWritesAfterCommit,
	crashtest.PGJoinBeforeCommit, crashtest.PGJoinAfterCommit,
	crashtest.PGFencedBegin, crashtest.PGFencedBeforeCommit, crashtest.PGFencedAfterCommit,
	crashtest.PGLeaseBeforeCommit, crashtest.PGLeaseAfterCommit,
}

// pgCommitConfig is a child's configuration.
type pgCommitConfig struct {
	URL, Schema, Witness string
	Bookings             int
}

// pgBooking is a booking thread's state.
type pgBooking struct {
	Booking  string
	Log      []string `lockstep:"append"`
	Decision string
	Charge   string
}

func pgBookingThread(i int) string { return "booking-" + strconv.Itoa(i) }

// pgBookingGraph: reserve → charge (an approval, then the charge through
// the fenced ledger in a durable step whose result carries its outcome)
// → confirm.
func pgBookingGraph(led *postgres.Ledger, w *crashtest.Witness, witnessPath string, now func() time.Time) *graph.Graph[pgBooking] {
	step := func(name string) graph.NodeFunc[pgBooking] {
		return func(ctx context.Context, s pgBooking) (graph.Update[pgBooking], error) {
			return graph.Set(pgBooking{Log: []string{name}}, "Log"), nil
		}
	}
	charge := func(ctx context.Context, s pgBooking) (graph.Update[pgBooking], error) {
		dec, err := interrupt.Ask[approval.Decision](ctx, pgBookingRequest(s.Booking, now()))
		if err != nil {
			return graph.Update[pgBooking]{}, err
		}
		out := pgBooking{Log: []string{"charge"}, Decision: string(dec.Outcome)}
		if dec.Outcome == approval.Approved {
			id, err := graph.Durable(ctx, "charge", func(ctx context.Context) (string, error) {
				return pgChargeOnce(ctx, led, w, witnessPath, s.Booking)
			})
			if err != nil {
				return graph.Update[pgBooking]{}, err
			}
			out.Charge = id
		}
		return graph.Set(out, "Log", "Decision", "Charge"), nil
	}
	return graph.New[pgBooking]().
		AddNode("reserve", step("reserve")).
		AddNode("charge", charge).
		AddNode("confirm", step("confirm")).
		AddEdge(graph.START, "reserve").AddEdge("reserve", "charge").AddEdge("charge", "confirm")
}

// pgBookingRequest is the approval a booking's charge asks for.
func pgBookingRequest(b string, now time.Time) approval.Request {
	args := []byte(`{"booking":"` + b + `"}`)
	h, _ := approval.ArgsHash("charge", args)
	return approval.Request{Type: approval.RequestType, Tool: "charge", Args: args, ArgsHash: h, CallID: "call-" + b,
		Rationale: "charging a card is one-way", Risk: approval.RiskHigh, Rule: "risk:high", Owner: "front-desk",
		CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
}

// pgChargeOnce charges booking b once: the intent (fenced by the run's
// lease) before the effect, the outcome joined to the save of the durable
// step's result after it; an intent a dead run left is reconciled against
// the witness (the downstream's own record), as a tool's reconcile hook
// does.
func pgChargeOnce(ctx context.Context, led *postgres.Ledger, w *crashtest.Witness, witnessPath, b string) (string, error) {
	key, id := "charge:"+b, "ch-"+b
	outcome := ledger.Outcome{Result: []byte(`"` + id + `"`)}
	in := ledger.Intent{Key: key, Tool: "charge", ArgsHash: "h-" + b, Owner: newRunOwner(), Lease: time.Minute}
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
			if err := led.Resolve(ctx, key, outcome); err != nil && !errors.Is(err, ledger.ErrNotHeld) {
				return "", err
			}
			return id, nil
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
	if j := led.CompleteJoin(key, in.Owner, outcome); j != nil && graph.JoinWrite(ctx, j) {
		return id, nil
	}
	return "", fmt.Errorf("booking %s: the ledger outcome could not join the step's save (is the ledger fenced by the saver?)", b)
}

var runOwners int

func newRunOwner() string {
	runOwners++
	return fmt.Sprintf("owner-%d-%d", os.Getpid(), runOwners)
}

// pgCommitApp is a child's (or the checker's) view of a scenario's schema.
type pgCommitApp struct {
	db    *postgres.DB
	led   *postgres.Ledger
	run   *graph.Runnable[pgBooking]
	inbox *approval.Inbox
}

// openPGCommitApp opens the schema with the clock now; hook and rep are
// the child's (nil for the checker, which runs nothing).
func openPGCommitApp(ctx context.Context, cfg pgCommitConfig, now func() time.Time, hook func(string), w *crashtest.Witness, rep *crashtest.Reporter) (*pgCommitApp, error) {
	db, err := postgres.Open(ctx, cfg.URL, postgres.Config{Schema: cfg.Schema, Now: now, Hook: hook, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	led, err := db.Ledger().WithOptions(ledger.Options{Now: now, Fence: db.Saver()})
	if err != nil {
		db.Close()
		return nil, err
	}
	var saver crashtest.JoinSaver = db.Saver()
	if rep != nil {
		saver = crashtest.AckJoiner(db.Saver(), rep)
	}
	r, err := pgBookingGraph(led, w, cfg.Witness, now).Compile(graph.WithSaver(saver), graph.WithClock(now), graph.WithLeaseTTL(time.Minute))
	if err != nil {
		db.Close()
		return nil, err
	}
	return &pgCommitApp{db: db, led: led, run: r, inbox: approval.NewInbox(db.Saver(), db.Approvals())}, nil
}

// runPGCommitChild books every booking of its configuration: it starts
// or continues each thread, approves what waits and resumes the decisions
// (consuming each approval with the save that carries it), until every
// booking is done or the plan kills it.
func runPGCommitChild() int {
	if err := pgCommitChild(); err != nil {
		fmt.Fprintln(os.Stderr, "pg commit-point child:", err)
		return 3
	}
	return 0
}

func pgCommitChild() error {
	var cfg pgCommitConfig
	ch, err := systemtest.ChildConfig(envPGCommit, &cfg)
	if err != nil {
		return err
	}
	rep := crashtest.NewReporter(os.Stdout)
	hook := crashtest.NewHook(ch.Plan, rep, nil)
	off := time.Duration(ch.Gen) * systemtest.GenerationSkew
	now := func() time.Time { return time.Now().Add(off) }
	ctx := context.Background()
	w, err := crashtest.OpenWitness(cfg.Witness, ch.Gen)
	if err != nil {
		return err
	}
	defer w.Close()
	a, err := openPGCommitApp(ctx, cfg, now, hook.Hit, w, rep)
	if err != nil {
		return err
	}
	defer a.db.Close()
	// One name in every generation: a new child takes back at once the
	// resume claims a dead one left.
	wk, err := approval.NewWorker(a.db.Approvals(), approval.ResumeGraphConsuming(a.run, a.db.Approvals()),
		approval.WorkerOptions{Name: "pg-commit", Retry: &retry.Policy{Initial: time.Millisecond, Multiplier: 1}})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		done := 0
		for i := range cfg.Bookings {
			th := pgBookingThread(i)
			snap, err := a.run.GetState(ctx, th)
			switch {
			case errors.Is(err, graph.ErrThreadNotFound):
				_, err = a.run.Invoke(ctx, th, graph.Set(pgBooking{Booking: th}, "Booking"))
			case err != nil:
			case snap.Status == graph.StatusPending:
				_, err = a.run.Continue(ctx, th)
			case snap.Status == graph.StatusDone:
				done++
			}
			if err != nil {
				return fmt.Errorf("%s: %w", th, err)
			}
		}
		page, err := a.inbox.List(ctx, approval.Filter{Limit: approval.MaxPageSize})
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			var ad *approval.AlreadyDecidedError
			if _, err := a.inbox.Approve(ctx, it.ID, "front-desk", "ok"); err != nil && !errors.As(err, &ad) {
				return err
			}
			rep.Decided(it.ID, string(approval.Approved))
		}
		if _, err := wk.RunOnce(ctx); err != nil {
			return err
		}
		if done == cfg.Bookings {
			// Finished once no decision waits to be marked resumed
			// either (a dead child's claim on one was taken back above).
			un, err := a.db.Approvals().Unresumed(ctx, 1)
			if err != nil {
				return err
			}
			held, err := a.db.Approvals().Claims(ctx, "pg-commit", 1)
			if err != nil {
				return err
			}
			if len(un)+len(held) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return errors.New("stuck: the bookings are not done after a minute")
		}
	}
	rep.Hits(hook.Hits())
	rep.Done()
	return rep.Err()
}

// pgCommitKills is how many times the test kills at each point: 3 in the
// default run, 12 with LOCKSTEP_LONG=1.
func pgCommitKills() int {
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		return 12
	}
	return 3
}

// TestCrashPostgresCommitPoints (R02, R03, D16, D17 on Postgres): children
// book six bookings on one Postgres schema (each approved, then charged
// once through a ledger fenced by the saver, its outcome committed with
// the step's result, and confirmed) and are SIGKILLed at the saver's
// commit points in turn (pgCommitPoints), each at a seeded early hit,
// until every point has killed a child three times (LOCKSTEP_LONG=1:
// twelve); a scenario (a fresh schema) ends with a child that finishes.
// After every death: every acknowledged checkpoint on its thread's chain,
// no fork; no charge twice; nothing half-saved (an approval consumed
// exactly when its thread holds the answer). After every scenario: every
// booking done with its log, its approval decided, consumed and resumed
// once, its charge made exactly once and its ledger entry done; nothing
// unresumed. A failure prints the seed and the plan; LOCKSTEP_SEED=<seed>
// replays the plans.
func TestCrashPostgresCommitPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	seed := systemtest.Seed(t, "LOCKSTEP_SEED")
	t.Logf("seed %d (LOCKSTEP_SEED=%d go test -run '^TestCrashPostgresCommitPoints$' ./internal/systemtest/crash replays its plans)", seed, seed)
	rnd := mrand.New(mrand.NewPCG(seed, 18))
	const bookings = 6
	want := pgCommitKills()
	kills := map[crashtest.Point]int{}
	ctx := t.Context()
	for scenario := 0; ; scenario++ {
		if !slices.ContainsFunc(pgCommitPoints, func(p crashtest.Point) bool { return kills[p] < want }) {
			break
		}
		if scenario > 4*want {
			t.Fatalf("seed %d: after %d scenarios the points were killed at %v times, want %d each (a point the saver no longer calls?)", seed, scenario, kills, want)
		}
		url, schema := pgschema.New(t, "crash_")
		cfg := pgCommitConfig{URL: url, Schema: schema, Witness: filepath.Join(t.TempDir(), "witness"), Bookings: bookings}
		env := []string{systemtest.EnvChild + "=" + pgCommitRole, envPGCommit + "=" + mustJSON(t, cfg)}
		var hist crashtest.History
		for gen := 0; ; gen++ {
			// Each point short of kills in turn, at an early hit; then a
			// child that finishes.
			plan := crashtest.Plan{}
			if gen < len(pgCommitPoints) {
				if p := pgCommitPoints[gen]; kills[p] < want {
					plan = crashtest.Plan{Point: p, Occurrence: 1 + rnd.IntN(3)}
				} else {
					continue
				}
			}
			res, err := crashtest.Run(ctx, crashtest.Spawn{Env: env, Plan: plan, Gen: gen})
			if err != nil {
				t.Fatalf("seed %d scenario %d gen %d plan %s: %v", seed, scenario, gen, plan, err)
			}
			hist.Add(res)
			if err := checkPGCommit(ctx, cfg, &hist, !res.Killed); err != nil {
				t.Fatalf("seed %d scenario %d gen %d plan %s (killed at %q; kills %v): %v", seed, scenario, gen, plan, res.KilledAt(), hist.Kills, err)
			}
			if !res.Killed {
				if scenario == 0 {
					t.Logf("a finishing child's hits: %v", res.Hits)
				}
				break
			}
			if res.Kill != nil {
				kills[res.Kill.Point]++
			}
		}
	}
	t.Logf("kills per point: %v", kills)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkPGCommit checks a scenario's schema after a child ended: what must
// hold after any death, and, when finished, that every booking reached
// its documented end.
func checkPGCommit(ctx context.Context, cfg pgCommitConfig, hist *crashtest.History, finished bool) error {
	// An hour on: every lease and claim the dead children left has lapsed.
	now := func() time.Time {
		return time.Now().Add(time.Hour + time.Duration(len(hist.Kills)+1)*systemtest.GenerationSkew)
	}
	a, err := openPGCommitApp(ctx, cfg, now, nil, nil, nil)
	if err != nil {
		return err
	}
	defer a.db.Close()
	threads := make([]string, cfg.Bookings)
	for i := range threads {
		threads[i] = pgBookingThread(i)
	}
	_, vs := crashtest.VerifyCheckpoints(ctx, a.db.Saver(), threads, hist.Checkpoints, crashtest.CheckpointOptions{Snapshot: systemtest.Snapshots(a.run)})
	effects, err := crashtest.ReadWitness(cfg.Witness)
	if err != nil {
		return err
	}
	vs = append(vs, crashtest.VerifyEffects(effects, hist.Effects)...)
	if err := vs.Err(); err != nil {
		return err
	}
	var problems []string
	charged := map[string]int{}
	for _, e := range effects {
		charged[e.Key]++
	}
	// Nothing half-saved: a decided approval is consumed exactly when its
	// thread holds the answer (no longer waits on it).
	decisions, err := pgDecisions(ctx, a.db)
	if err != nil {
		return err
	}
	perThread := map[string]int{}
	for _, d := range decisions {
		perThread[d.thread]++
		snap, err := a.run.GetState(ctx, d.thread)
		if err != nil {
			return err
		}
		waits := snap.Status == graph.StatusWaiting && slices.ContainsFunc(snap.Interrupts, func(in interrupt.Interrupt) bool { return in.ID == d.id })
		if d.consumed == waits {
			problems = append(problems, fmt.Sprintf("approval %s of %s: consumed %v, and the thread %s (waiting on it: %v): half-saved", d.id, d.thread, d.consumed, snap.Status, waits))
		}
	}
	for _, th := range threads {
		if c := charged["charge:"+th]; c > 1 || finished && c != 1 {
			problems = append(problems, fmt.Sprintf("%s charged %d times", th, c))
		}
		if !finished {
			continue
		}
		snap, err := a.run.GetState(ctx, th)
		if err != nil {
			return err
		}
		want := pgBooking{Booking: th, Log: []string{"reserve", "charge", "confirm"}, Decision: string(approval.Approved), Charge: "ch-" + th}
		if snap.Status != graph.StatusDone || !cmp.Equal(want, snap.Values) {
			problems = append(problems, fmt.Sprintf("%s: %s %+v, want done %+v", th, snap.Status, snap.Values, want))
		}
		if e, err := a.led.Get(ctx, "charge:"+th); err != nil || e.State != ledger.StateDone {
			problems = append(problems, fmt.Sprintf("%s: the charge's ledger entry is %s (%v), want done", th, e.State, err))
		}
		if perThread[th] != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d approvals decided, want 1", th, perThread[th]))
		}
	}
	if finished {
		for _, d := range decisions {
			rec, err := a.db.Approvals().Get(ctx, d.id)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("approval %s: %v", d.id, err))
			case rec.Resume.At.IsZero():
				problems = append(problems, fmt.Sprintf("approval %s of %s was never resumed: %+v", d.id, d.thread, rec.Resume))
			}
		}
		if un, err := a.db.Approvals().Unresumed(ctx, 0); err != nil || len(un) > 0 {
			problems = append(problems, fmt.Sprintf("approvals left unresumed: %d (%v)", len(un), err))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// pgDecision is a decided approval and whether it is consumed, as the
// tables hold them.
type pgDecision struct {
	id, thread string
	consumed   bool
}

// pgDecisions reads every decided approval of the schema.
func pgDecisions(ctx context.Context, db *postgres.DB) ([]pgDecision, error) {
	s := `"` + db.Schema() + `"`
	rows, err := db.Pool().Query(ctx, `SELECT d.id, d.thread, c.approval_id IS NOT NULL FROM `+s+`.approval_decisions d
		LEFT JOIN `+s+`.approval_consumptions c ON c.approval_id = d.id ORDER BY d.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pgDecision
	for rows.Next() {
		var d pgDecision
		if err := rows.Scan(&d.id, &d.thread, &d.consumed); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
