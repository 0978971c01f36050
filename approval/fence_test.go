package approval_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/approvaltest"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/postgres"
)

// The fenced fixture: one SQLite file holding the saver, the approval
// store and the ledger, opened together (the store and the ledger on the
// saver's DB, the ledger fenced by the saver), and a graph whose one node,
// "refund", asks for an approval and then charges inside graph.Durable
// through an executor on that ledger. Two Runnables (runners "A" and "B")
// run it on the same thread, as two processes would: their run IDs start
// with their runner's name, so that hooks can tell whose run they are in.

const fenceTTL = 10 * time.Minute // the graph's lease; the saver's clock is the fake one

type fenceState struct {
	Order  string
	Amount int
	Paid   json.RawMessage
}

// fenceHooks are the test's points in runner A's run (B runs through).
type fenceHooks struct {
	afterAsk     func(ctx context.Context) // after the decision arrived, before the durable step
	beforeCharge func(ctx context.Context) // in the durable step, before the executor
	inCharge     func(ctx context.Context) // in the tool's body, after the effect
}

type fenceFixture struct {
	clock   *fakeClock
	path    string // the database file (SQLite)
	effects string // if set, every charge appends a line to this file
	saver   fenceSaver
	sq      *sqlite.Saver // the SQLite saver (nil on Postgres)
	store   approval.Consumer
	ledger  ledger.Ledger
	charges atomic.Int32
	hooks   map[string]*fenceHooks // by runner
}

// fenceSaver is what the fixture needs of a saver: the inbox lists its
// interrupts.
type fenceSaver interface {
	checkpoint.Saver
	checkpoint.InterruptLister
}

// fenceBackends are the backends the fencing tests run on: SQLite, and
// Postgres when LOCKSTEP_POSTGRES_URL is set (skipped otherwise, failed
// under CI=true without it).
var fenceBackends = []struct {
	name string
	open func(t *testing.T, clock *fakeClock) *fenceFixture
}{
	{"sqlite", newFenceFixture},
	{"postgres", openPostgresFence},
}

// openPostgresFence opens the fixture on a schema of its own of the test
// database, dropped at cleanup: the stores of one postgres.DB, the ledger
// with its default fence (the DB's saver).
func openPostgresFence(t *testing.T, clock *fakeClock) *fenceFixture {
	t.Helper()
	url := os.Getenv("LOCKSTEP_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true: .ci/run starts a cluster and sets it")
		}
		t.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres tests skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_fence_" + hex.EncodeToString(b[:])
	db, err := postgres.Open(ctx, url, postgres.Config{Schema: schema, Now: clock.Now, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		db.Close()
	})
	// No Fence: the DB's ledger is fenced by its saver by default.
	led, err := db.Ledger().WithOptions(ledger.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &fenceFixture{clock: clock, saver: db.Saver(), store: db.Approvals(), ledger: led, hooks: map[string]*fenceHooks{}}
}

// runnerOf names the runner ("A", "B") of the run executing ctx.
func runnerOf(ctx context.Context) string {
	info, _ := graph.TaskFrom(ctx)
	r, _, _ := strings.Cut(info.Run, "-")
	return r
}

func (f *fenceFixture) hook(ctx context.Context, pick func(h *fenceHooks) func(context.Context)) {
	if h := f.hooks[runnerOf(ctx)]; h != nil {
		if fn := pick(h); fn != nil {
			fn(ctx)
		}
	}
}

func newFenceFixture(t *testing.T, clock *fakeClock) *fenceFixture {
	t.Helper()
	return openFenceFixture(t, clock, filepath.Join(t.TempDir(), "lockstep.db"), nil)
}

// openFenceFixture opens the fixture on the file at path; hook is the
// saver's test hook (Config.Hook).
func openFenceFixture(t *testing.T, clock *fakeClock, path string, hook func(string)) *fenceFixture {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(path, sqlite.Config{Now: clock.Now, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	store := openSQLStore(t, s.DB(), clock.Now)
	led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: clock.Now, Fence: s})
	if err != nil {
		t.Fatal(err)
	}
	return &fenceFixture{clock: clock, path: path, saver: s, sq: s, store: store, ledger: led, hooks: map[string]*fenceHooks{}}
}

// effectCount counts the charges made on order, in every process, from
// the effects file.
func (f *fenceFixture) effectCount(t *testing.T, order string) int {
	t.Helper()
	b, err := os.ReadFile(f.effects)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), order+"\n")
}

// runnable compiles the graph for runner name, with tool options opts.
func (f *fenceFixture) runnable(t *testing.T, name string, toolOpts ...nodes.ToolOption) *graph.Runnable[fenceState] {
	t.Helper()
	tool, err := nodes.NewTool("charge", "Charge the refund. Returns the charge.",
		func(ctx context.Context, a approvaltest.RefundArgs, env nodes.Env) (map[string]any, error) {
			f.charges.Add(1)
			if f.effects != "" {
				if err := appendLine(f.effects, a.Order); err != nil {
					return nil, err
				}
			}
			f.hook(ctx, func(h *fenceHooks) func(context.Context) { return h.inCharge })
			return map[string]any{"order": a.Order, "charged": a.Amount}, nil
		}, toolOpts...)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithLedger(f.ledger))
	if err != nil {
		t.Fatal(err)
	}
	schema := approvaltest.RefundSchema(t)
	refund := func(ctx context.Context, st fenceState) (graph.Update[fenceState], error) {
		var none graph.Update[fenceState]
		req := approvaltest.NewRequest(t, schema, epoch, st.Order, st.Amount)
		d, err := interrupt.Ask[approval.Decision](ctx, req)
		if err != nil {
			return none, err
		}
		if !d.Allows() {
			return none, errors.New("rejected")
		}
		f.hook(ctx, func(h *fenceHooks) func(context.Context) { return h.afterAsk })
		paid, err := graph.Durable(ctx, "pay", func(ctx context.Context) (json.RawMessage, error) {
			f.hook(ctx, func(h *fenceHooks) func(context.Context) { return h.beforeCharge })
			res, err := ex.Execute(ctx, nodes.Call{ID: "call-1", Tool: "charge", Args: req.Args})
			return res.Output, err
		})
		if err != nil {
			return none, err
		}
		return graph.Set(fenceState{Paid: paid}, "Paid"), nil
	}
	var seq atomic.Int32
	r, err := graph.New[fenceState]().AddNode("refund", refund).AddEdge(graph.START, "refund").AddEdge("refund", graph.END).
		Compile(graph.WithSaver(f.saver), graph.WithRunner(name), graph.WithLeaseTTL(fenceTTL),
			graph.WithRunIDs(func() string { return fmt.Sprintf("%s-%d", name, seq.Add(1)) }))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs thread up to its approval, decides it, and returns the
// approval's record.
func (f *fenceFixture) start(t *testing.T, r *graph.Runnable[fenceState], thread string) approval.Record {
	t.Helper()
	ctx := context.Background()
	res, err := r.Invoke(ctx, thread, graph.Set(fenceState{Order: "order-" + thread, Amount: 70}, "Order", "Amount"))
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("start: %v %+v", err, res)
	}
	item, err := approval.NewInbox(f.saver, f.store).Get(ctx, res.Interrupts[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Decide(ctx, item, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
		t.Fatal(err)
	}
	rec, err := f.store.Get(ctx, item.ID)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// gate blocks a hook until released, and says when it is reached.
type gate struct {
	reached, release chan struct{}
	once             sync.Once
}

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) wait(context.Context) {
	g.once.Do(func() {
		close(g.reached)
		<-g.release
	})
}

// resumeAsync resumes rec on r with its decision, consuming it, in a
// goroutine; the channel gives the run's error.
func resumeAsync(r *graph.Runnable[fenceState], store approval.Consumer, rec approval.Record) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := r.Resume(context.Background(), rec.Thread, graph.Command[fenceState]{ResumeByID: map[string]any{rec.ID: rec.Decision}},
			graph.WithAnswerJoin(store.Consumption(rec.ID)))
		done <- err
	}()
	return done
}

// runWrites lists the checkpoints run saved on thread.
func runWrites(t *testing.T, s checkpoint.Saver, thread, run string) []string {
	t.Helper()
	tuples, err := s.List(context.Background(), thread, checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tp := range tuples {
		if tp.Checkpoint.Metadata.RunID == run {
			out = append(out, "checkpoint "+tp.Checkpoint.ID)
		}
	}
	return out
}

// TestStaleRunnerFenced is the #8796 scenario for approvals and the
// ledger (D17) on SQLite: runner A resumes a thread and is paused past its
// lease; runner B takes the thread over; when A goes on, its approval
// consumption, its ledger intent and its ledger outcome are each refused
// with an error matching checkpoint.ErrThreadBusy, and nothing of them
// lands.
func TestStaleRunnerFenced(t *testing.T) {
	for _, be := range fenceBackends {
		t.Run(be.name, func(t *testing.T) { testStaleRunnerFenced(t, be.open) })
	}
}

func testStaleRunnerFenced(t *testing.T, open func(t *testing.T, clock *fakeClock) *fenceFixture) {
	ctx := context.Background()

	t.Run("approval consumption", func(t *testing.T) {
		// A and B both resume the approval; A is paused past its lease
		// before its first write, which carries the answer and the
		// consumption; B takes the thread over and is paused in turn.
		// A's write comes first and is refused; B's consumes.
		f := open(t, newClock())
		a, b := f.runnable(t, "A"), f.runnable(t, "B")
		rec := f.start(t, b, "consume")
		ga, gb := newGate(), newGate()
		f.hooks["A"] = &fenceHooks{afterAsk: ga.wait}
		f.hooks["B"] = &fenceHooks{afterAsk: gb.wait}
		doneA := resumeAsync(a, f.store, rec)
		<-ga.reached // A holds the lease; its answer and consumption are held
		f.clock.Add(2 * fenceTTL)
		doneB := resumeAsync(b, f.store, rec)
		<-gb.reached // B holds the lease now
		close(ga.release)
		errA := <-doneA
		if !errors.Is(errA, checkpoint.ErrThreadBusy) {
			t.Fatalf("A's resume: %v, want ErrThreadBusy", errA)
		}
		if tr, err := f.store.Audit(ctx, rec.ID); err != nil || !tr.Consumed.IsZero() {
			t.Fatalf("after A's refused save: consumed at %v (%v), want not consumed", tr.Consumed, err)
		}
		f.clock.Add(time.Minute)
		consumedAt := f.clock.Now()
		close(gb.release)
		if err := <-doneB; err != nil {
			t.Fatalf("B: %v", err)
		}
		tr, err := f.store.Audit(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Consumed.Equal(consumedAt) {
			t.Errorf("consumed at %v, want B's save at %v", tr.Consumed, consumedAt)
		}
		if n := f.charges.Load(); n != 1 {
			t.Errorf("charged %d times, want 1", n)
		}
		if w := runWrites(t, f.saver, rec.Thread, "A-1"); len(w) > 0 {
			t.Errorf("A's run saved %v", w)
		}
	})

	t.Run("ledger intent", func(t *testing.T) {
		// A passes its durable step's fence and is paused before the
		// executor records the intent; B runs the charge and is inside
		// the tool's body when A goes on. Unfenced, A would take B's live
		// intent for an earlier run's (D17's successor rule, applied by a
		// run that is not the successor) and, the tool deduping by key,
		// charge again.
		f := open(t, newClock())
		a, b := f.runnable(t, "A", nodes.DedupesByKey()), f.runnable(t, "B", nodes.DedupesByKey())
		rec := f.start(t, b, "intent")
		ga, gb := newGate(), newGate()
		f.hooks["A"] = &fenceHooks{beforeCharge: ga.wait}
		f.hooks["B"] = &fenceHooks{inCharge: gb.wait}
		doneA := resumeAsync(a, f.store, rec)
		<-ga.reached
		f.clock.Add(2 * fenceTTL)
		doneB := make(chan error, 1)
		go func() { _, err := b.Continue(ctx, rec.Thread); doneB <- err }()
		<-gb.reached // B's intent is pending, its charge made
		close(ga.release)
		errA := <-doneA
		close(gb.release)
		if err := <-doneB; err != nil {
			t.Fatalf("B: %v", err)
		}
		if !errors.Is(errA, checkpoint.ErrThreadBusy) {
			t.Errorf("A: %v, want ErrThreadBusy", errA)
		}
		if n := f.charges.Load(); n != 1 {
			t.Errorf("charged %d times, want 1", n)
		}
		s, err := b.GetState(ctx, rec.Thread)
		if err != nil || s.Status != graph.StatusDone {
			t.Fatalf("thread: %v %s", err, s.Status)
		}
	})

	t.Run("ledger outcome", func(t *testing.T) {
		// A records its intent and charges, and is paused before the
		// outcome; B takes over and finds A's intent of unknown outcome
		// (its tool cannot reconcile), so it stops. A's outcome, and the
		// write that would carry it, are refused: the intent stays A's,
		// pending, for a reconcile to settle.
		f := open(t, newClock())
		a, b := f.runnable(t, "A"), f.runnable(t, "B")
		rec := f.start(t, b, "outcome")
		g := newGate()
		f.hooks["A"] = &fenceHooks{inCharge: g.wait}
		doneA := resumeAsync(a, f.store, rec)
		<-g.reached
		f.clock.Add(2 * fenceTTL)
		if _, err := b.Continue(ctx, rec.Thread); !errors.Is(err, ledger.ErrOutcomeUnknown) {
			t.Fatalf("B: %v, want ErrOutcomeUnknown", err)
		}
		close(g.release)
		if err := <-doneA; !errors.Is(err, checkpoint.ErrThreadBusy) {
			t.Errorf("A: %v, want ErrThreadBusy", err)
		}
		args, err := canon.JSON(rec.Request.Args)
		if err != nil {
			t.Fatal(err)
		}
		key := nodes.IdempotencyKey(rec.Thread, "charge", args)
		e, err := f.ledger.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if e.State != ledger.StatePending || !strings.HasPrefix(e.Run, "A-") {
			t.Errorf("the ledger holds %s by run %s, want A's intent pending", e.State, e.Run)
		}
		if n := f.charges.Load(); n != 1 {
			t.Errorf("charged %d times, want 1", n)
		}
	})
}

// appendLine appends line to the file at path, synced: an effect that
// survives the process that made it.
func appendLine(path, line string) error {
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fh.WriteString(line + "\n"); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

const (
	fenceCrashRole  = "fence-crash"
	envFenceDB      = "FENCE_DB"
	envFenceEffects = "FENCE_EFFECTS"
	envFencePoint   = "FENCE_POINT" // "<saver hook point>#<hit>"
	envFenceApprove = "FENCE_APPROVAL"
)

// reconciled is the charge tool's Reconcile hook: the effects file says
// whether an earlier attempt charged the order.
func (f *fenceFixture) reconciled() nodes.ToolOption {
	return nodes.Reconcile(func(ctx context.Context, a approvaltest.RefundArgs, env nodes.Env) (map[string]any, bool, error) {
		b, err := os.ReadFile(f.effects)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, false, err
		}
		if strings.Contains(string(b), a.Order+"\n") {
			return map[string]any{"order": a.Order, "charged": a.Amount}, true, nil
		}
		return nil, false, nil
	})
}

// TestCrashConsumesWithItsWrite kills the resuming process at the
// commits that carry the approval's consumption (with the answer) and the
// ledger's outcome (with the durable step's result): just before and just
// after each. Whatever the point, after the kill the approval is consumed
// exactly when the thread holds its answer, and the ledger holds the
// charge's outcome exactly when the thread holds its result; a resume
// after the restart finishes the thread with the charge made once.
func TestCrashConsumesWithItsWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	points := []string{
		"sqlite.writes.beforeCommit#1", // the answer and the consumption
		"sqlite.writes.afterCommit#1",
		"sqlite.writes.beforeCommit#2", // the charge's result and its outcome
		"sqlite.writes.afterCommit#2",
	}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path, effects := filepath.Join(dir, "lockstep.db"), filepath.Join(dir, "effects")
			f := openFenceFixture(t, newClock(), path, nil)
			f.effects = effects
			r := f.runnable(t, "B", f.reconciled())
			rec := f.start(t, r, "crash")
			f.sq.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFenceCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+fenceCrashRole, envFenceDB+"="+path, envFenceEffects+"="+effects,
				envFencePoint+"="+point, envFenceApprove+"="+rec.ID)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("child: %v, want it killed at %s\n%s", err, point, out)
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want SIGKILL\n%s", err, out)
			}

			// Restart.
			f = openFenceFixture(t, newClock(), path, nil)
			f.effects = effects
			r = f.runnable(t, "B", f.reconciled())
			tr, err := f.store.Audit(ctx, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			answered, stepSaved := f.threadHolds(t, rec)
			if consumed := !tr.Consumed.IsZero(); consumed != answered {
				t.Errorf("after the kill: consumed %v, the thread holds the answer %v", consumed, answered)
			}
			args, err := canon.JSON(rec.Request.Args)
			if err != nil {
				t.Fatal(err)
			}
			e, err := f.ledger.Get(ctx, nodes.IdempotencyKey(rec.Thread, "charge", args))
			if err != nil && !errors.Is(err, ledger.ErrNotFound) {
				t.Fatal(err)
			}
			done := err == nil && e.State == ledger.StateDone
			t.Logf("after the kill: answered %v, consumed %v, charge's result saved %v, outcome recorded %v, charges %d",
				answered, !tr.Consumed.IsZero(), stepSaved, done, f.effectCount(t, "order-crash"))
			if done != stepSaved {
				t.Errorf("after the kill: the ledger holds the outcome %v, the thread holds the charge's result %v", done, stepSaved)
			}

			if err := approval.ResumeGraphConsuming(r, f.store)(ctx, rec); err != nil {
				t.Fatalf("resume after the restart: %v", err)
			}
			s, err := r.GetState(ctx, rec.Thread)
			if err != nil || s.Status != graph.StatusDone || len(s.Values.Paid) == 0 {
				t.Fatalf("after the resume: %v %s %s", err, s.Status, s.Values.Paid)
			}
			if n := f.effectCount(t, "order-crash"); n != 1 {
				t.Errorf("charged %d times, want 1", n)
			}
			if tr, err := f.store.Audit(ctx, rec.ID); err != nil || tr.Consumed.IsZero() {
				t.Errorf("after the resume: consumed at %v (%v)", tr.Consumed, err)
			}
		})
	}
}

// threadHolds reports whether rec's thread holds the approval's answer,
// and the result of the charge's durable step, in any checkpoint.
func (f *fenceFixture) threadHolds(t *testing.T, rec approval.Record) (answered, stepSaved bool) {
	t.Helper()
	tuples, err := f.saver.List(context.Background(), rec.Thread, checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range tuples {
		for _, w := range tp.Pending {
			switch {
			case w.Channel == checkpoint.ChannelResume && strings.Contains(string(w.Value), rec.ID):
				answered = true
			case strings.HasPrefix(w.Channel, checkpoint.ChannelStepPrefix):
				stepSaved = true
			}
		}
	}
	return answered, stepSaved
}

// TestHelperFenceCrash is the child of TestCrashConsumesWithItsWrite: it
// resumes the approval, consuming it, and kills itself at the saver's
// hook point named by envFencePoint.
func TestHelperFenceCrash(t *testing.T) {
	if os.Getenv(helperEnv) != fenceCrashRole {
		t.Skip("crash child only")
	}
	point, nth, _ := strings.Cut(os.Getenv(envFencePoint), "#")
	want := 1
	if _, err := fmt.Sscan(nth, &want); err != nil {
		t.Fatal(err)
	}
	hits := 0
	hook := func(p string) {
		if p != point {
			return
		}
		if hits++; hits == want {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	f := openFenceFixture(t, newClock(), os.Getenv(envFenceDB), hook)
	f.effects = os.Getenv(envFenceEffects)
	r := f.runnable(t, "B", f.reconciled())
	ctx := context.Background()
	rec, err := f.store.Get(ctx, os.Getenv(envFenceApprove))
	if err != nil {
		t.Fatal(err)
	}
	err = approval.ResumeGraphConsuming(r, f.store)(ctx, rec)
	t.Fatalf("the resume ended (%v) before %s", err, os.Getenv(envFencePoint))
}

// TestWorkerFencesByDefault is the #8796 scenario through two approval
// Workers with their default options (D16, D17): a Worker whose store is
// a Consumer on the saver's database consumes the approval in the save
// that carries the decision, so that worker A, paused past its lease
// while worker B took the thread and the approval's claim over, commits
// neither its checkpoint nor the consumption (its resume is refused with
// ErrThreadBusy and retried later), and B's resume consumes it. With
// WorkerOptions.NoConsume nothing is consumed.
func TestWorkerFencesByDefault(t *testing.T) {
	for _, be := range fenceBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			f := be.open(t, newClock())
			a, b := f.runnable(t, "A"), f.runnable(t, "B")
			rec := f.start(t, b, "worker")
			worker := func(name string, r *graph.Runnable[fenceState], noConsume bool) *approval.Worker {
				w, err := approval.NewWorker(f.store, approval.ResumeGraph(r), approval.WorkerOptions{Name: name, Lease: fenceTTL, NoConsume: noConsume})
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			type pass struct {
				rep approval.WorkerReport
				err error
			}
			runOnce := func(w *approval.Worker) <-chan pass {
				done := make(chan pass, 1)
				go func() {
					rep, err := w.RunOnce(ctx)
					done <- pass{rep, err}
				}()
				return done
			}
			ga, gb := newGate(), newGate()
			f.hooks["A"] = &fenceHooks{afterAsk: ga.wait}
			f.hooks["B"] = &fenceHooks{afterAsk: gb.wait}
			doneA := runOnce(worker("A", a, false))
			<-ga.reached // A holds the thread; its answer and consumption are held
			f.clock.Add(2 * fenceTTL)
			doneB := runOnce(worker("B", b, false))
			<-gb.reached // B holds the thread and the approval's claim now
			close(ga.release)
			pa := <-doneA
			if pa.err != nil || pa.rep.Deferred != 1 || pa.rep.Resumed != 0 {
				t.Fatalf("worker A: %+v, %v; want one deferred resume", pa.rep, pa.err)
			}
			if tr, err := f.store.Audit(ctx, rec.ID); err != nil || !tr.Consumed.IsZero() {
				t.Fatalf("after A's refused resume: consumed at %v (%v), want not consumed", tr.Consumed, err)
			}
			if w := runWrites(t, f.saver, rec.Thread, "A-1"); len(w) > 0 {
				t.Errorf("A's run saved %v", w)
			}
			f.clock.Add(time.Minute)
			consumedAt := f.clock.Now()
			close(gb.release)
			if pb := <-doneB; pb.err != nil || pb.rep.Resumed != 1 {
				t.Fatalf("worker B: %+v, %v; want one resume", pb.rep, pb.err)
			}
			tr, err := f.store.Audit(ctx, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !tr.Consumed.Equal(consumedAt) {
				t.Errorf("consumed at %v, want B's save at %v", tr.Consumed, consumedAt)
			}
			if n := f.charges.Load(); n != 1 {
				t.Errorf("charged %d times, want 1", n)
			}

			// NoConsume resumes without consuming.
			rec2 := f.start(t, b, "no-consume")
			if p := <-runOnce(worker("C", b, true)); p.err != nil || p.rep.Resumed != 1 {
				t.Fatalf("NoConsume worker: %+v, %v", p.rep, p.err)
			}
			if tr, err := f.store.Audit(ctx, rec2.ID); err != nil || !tr.Consumed.IsZero() {
				t.Errorf("NoConsume: consumed at %v (%v), want never", tr.Consumed, err)
			}
		})
	}
}

// TestWorkerRefusesForeignStore: a Worker whose Consumer store is on
// another database than the graph's saver does not resume without
// consuming: the resume fails with an error matching
// checkpoint.ErrNotJoinable, nothing of it is saved, the approval stays
// due (its failure recorded), and Run stops with that error.
func TestWorkerRefusesForeignStore(t *testing.T) {
	ctx := context.Background()
	f := newFenceFixture(t, newClock())
	other, err := sqlite.Open(filepath.Join(t.TempDir(), "other.db"), sqlite.Config{Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	// The graph saves to other: f.store is not on its database.
	r, err := graph.New[fenceState]().AddNode("refund", func(ctx context.Context, st fenceState) (graph.Update[fenceState], error) {
		_, err := interrupt.Ask[approval.Decision](ctx, approvaltest.NewRequest(t, approvaltest.RefundSchema(t), epoch, st.Order, st.Amount))
		return graph.Update[fenceState]{}, err
	}).AddEdge(graph.START, "refund").AddEdge("refund", graph.END).Compile(graph.WithSaver(other))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "foreign", graph.Set(fenceState{Order: "order-foreign", Amount: 70}, "Order", "Amount"))
	if err != nil || len(res.Interrupts) != 1 {
		t.Fatalf("start: %v %+v", err, res)
	}
	item, err := approval.NewInbox(other, f.store).Get(ctx, res.Interrupts[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Decide(ctx, item, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
		t.Fatal(err)
	}
	rec := approval.Record{ID: item.ID}
	w, err := approval.NewWorker(f.store, approval.ResumeGraph(r), approval.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.RunOnce(ctx)
	if !errors.Is(err, checkpoint.ErrNotJoinable) || rep.Deferred != 1 {
		t.Fatalf("RunOnce: %+v, %v; want one deferred resume and ErrNotJoinable", rep, err)
	}
	f.clock.Add(time.Hour) // the retry is due
	if err := w.Run(ctx, time.Millisecond); !errors.Is(err, checkpoint.ErrNotJoinable) {
		t.Fatalf("Run: %v, want ErrNotJoinable", err)
	}
	got, err := f.store.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Resume.At.IsZero() || got.Resume.Attempts == 0 || !strings.Contains(got.Resume.LastError, "not opened on the saver's database") {
		t.Errorf("resume bookkeeping %+v, want a recorded failed attempt, not resumed", got.Resume)
	}
	if snap, err := r.GetState(ctx, "foreign"); err != nil || snap.Status != graph.StatusWaiting {
		t.Errorf("thread: %v %v, want it still waiting", snap.Status, err)
	}
	if tr, err := f.store.Audit(ctx, rec.ID); err != nil || !tr.Consumed.IsZero() {
		t.Errorf("consumed at %v (%v), want not consumed", tr.Consumed, err)
	}
}
