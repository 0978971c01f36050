package approval_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/retry"
)

const helperEnv = "LOCKSTEP_APPROVAL_HELPER"

// TestWorkerResumes: decisions recorded through the inbox reach the paused
// threads through the worker: an approval pays once, a rejection never, an
// edit pays the edited amount; every thread is resumed once.
func TestWorkerResumes(t *testing.T) {
	onEveryStore(t, func(t *testing.T, dk desk) {
		ctx, clock, store, f, in := context.Background(), dk.clock, dk.store, dk.f, dk.in
		ids := map[string]string{}
		for _, th := range []string{"approve", "reject", "edit"} {
			ids[th] = f.start(t, th, "order-"+th, 40)
		}
		clock.Add(time.Minute)
		if _, err := in.Approve(ctx, ids["approve"], "alice", "ok"); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Reject(ctx, ids["reject"], "bob", "refund already issued by phone"); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Edit(ctx, ids["edit"], "carol", json.RawMessage(`{"order":"order-edit","amount":25}`), "half"); err != nil {
			t.Fatal(err)
		}
		for th := range ids {
			if s := f.state(t, th); s.Status != graph.StatusWaiting {
				t.Fatalf("thread %s is %s before the worker ran; deciding must not resume", th, s.Status)
			}
		}
		w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
		rep, err := w.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(approval.WorkerReport{Resumed: 3}, rep); diff != "" {
			t.Errorf("first pass (-want +got):\n%s", diff)
		}
		want := map[string]refundState{
			"approve": {Order: "order-approve", Amount: 40, Outcome: approval.Approved, Reviewer: "alice", Note: "ok", Paid: 40},
			"reject":  {Order: "order-reject", Amount: 40, Outcome: approval.Rejected, Reviewer: "bob", Note: "refund already issued by phone"},
			"edit":    {Order: "order-edit", Amount: 40, Outcome: approval.Edited, Reviewer: "carol", Note: "half", Paid: 25},
		}
		for th, w := range want {
			s := f.state(t, th)
			if s.Status != graph.StatusDone {
				t.Errorf("thread %s: %s, want done", th, s.Status)
			}
			if diff := cmp.Diff(w, s.Values); diff != "" {
				t.Errorf("thread %s (-want +got):\n%s", th, diff)
			}
		}
		for th, n := range map[string]int{"approve": 1, "reject": 0, "edit": 1} {
			if got := f.witness.count(th); got != n {
				t.Errorf("thread %s paid %d times, want %d", th, got, n)
			}
		}
		rep, err = w.RunOnce(ctx)
		if err != nil || rep != (approval.WorkerReport{}) {
			t.Errorf("second pass: %+v, %v; want nothing to do", rep, err)
		}
		// A stray second resume is refused by the runtime before any node runs.
		rec, err := store.Get(ctx, ids["approve"])
		if err != nil {
			t.Fatal(err)
		}
		if rec.Resume.At.IsZero() || rec.Resume.Note != "resumed" {
			t.Errorf("record not marked resumed: %+v", rec.Resume)
		}
		if err := approval.ResumeGraph(f.run)(ctx, rec); !errors.Is(err, graph.ErrUnknownInterrupt) {
			t.Errorf("resuming again: %v, want ErrUnknownInterrupt", err)
		}
		if got := f.witness.total(); got != 2 {
			t.Errorf("%d payments in all, want 2", got)
		}
	})
}

// TestSweepExpiresAndResumes (R36 a, f): nobody decided; after the
// deadline (the process may have been down across it) the sweeper turns
// pending into expired, the worker resumes the thread, and the node gets
// an Expired decision, the rejection the model sees. Nothing is paid.
func TestSweepExpiresAndResumes(t *testing.T) {
	onEveryStore(t, func(t *testing.T, dk desk) {
		ctx, clock, store, f, in := context.Background(), dk.clock, dk.store, dk.f, dk.in
		id := f.start(t, "late", "order-late", 90)
		clock.Set(epoch.Add(ttl - time.Nanosecond))
		if rep, err := in.Sweep(ctx); err != nil || rep != (approval.SweepReport{}) {
			t.Fatalf("sweep before the deadline: %+v, %v; want nothing", rep, err)
		}
		clock.Set(epoch.Add(ttl))
		clock.Add(3 * time.Hour) // down across the deadline
		rep, err := in.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(approval.SweepReport{Expired: 1}, rep); diff != "" {
			t.Errorf("sweep (-want +got):\n%s", diff)
		}
		if rep, err := in.Sweep(ctx); err != nil || rep != (approval.SweepReport{}) {
			t.Errorf("second sweep: %+v, %v; want nothing", rep, err)
		}
		w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
		if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 1 {
			t.Fatalf("worker: %+v, %v", rep, err)
		}
		s := f.state(t, "late")
		if s.Status != graph.StatusDone || s.Values.Outcome != approval.Expired || s.Values.Reviewer != approval.ExpiryReviewer || s.Values.Paid != 0 {
			t.Errorf("thread after expiry: %s %+v", s.Status, s.Values)
		}
		if !strings.Contains(s.Values.Note, "escalate to payments") {
			t.Errorf("the model's note %q should tell it to escalate to the owner", s.Values.Note)
		}
		if f.witness.total() != 0 {
			t.Error("an expired refund was paid")
		}
		_, err = in.Approve(ctx, id, "alice", "")
		var lost *approval.AlreadyDecidedError
		if !errors.As(err, &lost) || lost.Winner.Outcome != approval.Expired {
			t.Errorf("approve after the sweep: %v, want *AlreadyDecidedError naming the expiry", err)
		}
	})
}

// TestExpirySeenStaysExpired: whoever first sees a request expired (a
// reviewer's approve, reject or edit, a Store.Decide, Inbox.Get, a
// listing, the sweeper) records the expiry. When the clock then steps back
// before the deadline (an NTP step), nothing can approve the request any
// more, the inbox does not list it, and the worker gives the thread the
// expiry: nothing is paid.
func TestExpirySeenStaysExpired(t *testing.T) {
	observers := []struct {
		name string
		see  func(ctx context.Context, in *approval.Inbox, store approval.Store, it approval.Item) error
	}{
		{"approve", func(ctx context.Context, in *approval.Inbox, _ approval.Store, it approval.Item) error {
			_, err := in.Approve(ctx, it.ID, "alice", "")
			return wantExpired(err)
		}},
		{"reject", func(ctx context.Context, in *approval.Inbox, _ approval.Store, it approval.Item) error {
			_, err := in.Reject(ctx, it.ID, "bob", "no")
			return wantExpired(err)
		}},
		{"edit", func(ctx context.Context, in *approval.Inbox, _ approval.Store, it approval.Item) error {
			_, err := in.Edit(ctx, it.ID, "carol", json.RawMessage(`{"order":"order-late","amount":5}`), "")
			return wantExpired(err)
		}},
		{"store decide", func(ctx context.Context, _ *approval.Inbox, store approval.Store, it approval.Item) error {
			_, err := store.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
			return wantExpired(err)
		}},
		{"get", func(ctx context.Context, in *approval.Inbox, _ approval.Store, it approval.Item) error {
			_, err := in.Get(ctx, it.ID)
			return wantExpired(err)
		}},
		{"list", func(ctx context.Context, in *approval.Inbox, _ approval.Store, _ approval.Item) error {
			p, err := in.List(ctx, approval.Filter{Tool: "no-such-tool"}) // filtered out, and still seen
			if err != nil || len(p.Items) != 0 || p.Expired != 1 {
				return fmt.Errorf("List: %d items, %d expiries recorded, %v; want 0, 1, nil", len(p.Items), p.Expired, err)
			}
			return nil
		}},
		{"sweep", func(ctx context.Context, in *approval.Inbox, _ approval.Store, _ approval.Item) error {
			rep, err := in.Sweep(ctx)
			if err != nil || rep != (approval.SweepReport{Expired: 1}) {
				return fmt.Errorf("Sweep: %+v, %v; want one expiry", rep, err)
			}
			return nil
		}},
	}
	for _, k := range storeKinds {
		for _, o := range observers {
			t.Run(k.name+"/"+o.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newClock()
				store, _ := k.open(t, clock.Now)
				f := newFixture(t, clock, store)
				in := approval.NewInbox(f.saver, store)
				id := f.start(t, "late", "order-late", 90)
				it, err := in.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				clock.Set(epoch.Add(ttl))
				if err := o.see(ctx, in, store, it); err != nil {
					t.Fatalf("at the deadline: %v", err)
				}
				clock.Set(epoch.Add(ttl - time.Hour)) // the clock steps back
				if _, err := in.Approve(ctx, id, "alice", ""); !errors.Is(err, approval.ErrExpired) {
					t.Errorf("approve after the clock stepped back: %v, want ErrExpired", err)
				}
				if _, err := store.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); !errors.Is(err, approval.ErrExpired) {
					t.Errorf("Store.Decide after the clock stepped back: %v, want ErrExpired", err)
				}
				if p, err := in.List(ctx, approval.Filter{}); err != nil || len(p.Items) != 0 {
					t.Errorf("List after the clock stepped back: %d items, %v; want none", len(p.Items), err)
				}
				w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
				if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 1 {
					t.Fatalf("worker: %+v, %v", rep, err)
				}
				s := f.state(t, "late")
				if s.Status != graph.StatusDone || s.Values.Outcome != approval.Expired || s.Values.Reviewer != approval.ExpiryReviewer {
					t.Errorf("thread: %s %+v, want done with the expiry", s.Status, s.Values)
				}
				if n := f.witness.total(); n != 0 {
					t.Errorf("%d payments for a request that expired", n)
				}
			})
		}
	}
}

// wantExpired returns nil for an error matching approval.ErrExpired, and
// an error saying what came instead otherwise.
func wantExpired(err error) error {
	if errors.Is(err, approval.ErrExpired) {
		return nil
	}
	return fmt.Errorf("got %v, want an error matching ErrExpired", err)
}

// TestApproversRaceSweeper (R36 d): 32 approvers race the sweeper on each
// of 20 approvals, one round per approval, the approvers starting within
// a few hundred microseconds of the sweep so that either side can win. On
// SQL the approvers' process runs 1 ns behind the sweeper's (clock skew),
// so both sides are entitled to decide; on memory, with one clock, the
// deadline arrives as the sweep starts. Either way each approval ends in
// exactly one terminal state, consistent with what every caller was told,
// and the worker then pays exactly the approved ones.
func TestApproversRaceSweeper(t *testing.T) {
	const approvals, approvers = 20, 32
	deadline := epoch.Add(ttl)
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			sweepClock, approveClock := newClock(), newClock()
			var sweepStore, approveStore approval.Store
			if k.name == "sql" {
				db, _ := tempDB(t)
				sweepStore, approveStore = openSQLStore(t, db, sweepClock.Now), openSQLStore(t, db, approveClock.Now)
			} else {
				approveClock = sweepClock
				sweepStore = approval.NewMemoryStore(sweepClock.Now)
				approveStore = sweepStore
			}
			f := newFixture(t, sweepClock, sweepStore)
			in := approval.NewInbox(f.saver, sweepStore)
			approved, expired, lost := 0, 0, 0
			for round := range approvals {
				sweepClock.Set(epoch)
				id := f.start(t, fmt.Sprintf("t%02d", round), fmt.Sprintf("o%02d", round), 10)
				it, err := in.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				approveClock.Set(deadline.Add(-time.Nanosecond))
				if k.name == "sql" {
					sweepClock.Set(deadline)
				}
				var (
					wg       sync.WaitGroup
					gate     = make(chan struct{})
					mu       sync.Mutex
					won      int
					recorded int // approvers who arrived late and recorded the expiry
					bad      []error
				)
				for i := range approvers {
					wg.Go(func() {
						<-gate
						time.Sleep(time.Duration(i*round%17) * 20 * time.Microsecond)
						_, err := approveStore.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							won++
						case errors.Is(err, approval.ErrAlreadyDecided):
						case errors.Is(err, approval.ErrExpired):
							recorded++
						default:
							bad = append(bad, err)
						}
					})
				}
				var rep approval.SweepReport
				var sweepErr error
				wg.Go(func() {
					<-gate
					sweepClock.Set(deadline)
					rep, sweepErr = in.Sweep(ctx)
				})
				close(gate)
				wg.Wait()
				if sweepErr != nil || len(bad) > 0 {
					t.Fatalf("round %d: sweep: %v; approvers: %v", round, sweepErr, bad)
				}
				rec, err := sweepStore.Get(ctx, id)
				if err != nil {
					t.Fatalf("round %d: no terminal state: %v", round, err)
				}
				switch rec.Decision.Outcome {
				case approval.Approved:
					approved++
					if won != 1 || rep.Expired != 0 || recorded != 0 {
						t.Errorf("round %d: approved, but %d approvers, %d late approvers and the sweeper (%+v) were told they won", round, won, recorded, rep)
					}
				case approval.Expired:
					expired++
					if won != 0 || rep.Expired+recorded != 1 {
						t.Errorf("round %d: expired, but %d approvers, %d late approvers and the sweeper (%+v) were told they won", round, won, recorded, rep)
					}
				default:
					t.Errorf("round %d: %s", round, rec.Decision.Outcome)
				}
				lost += rep.Lost
			}
			t.Logf("%s: %d approved, %d expired; the sweeper lost %d races it had joined", k.name, approved, expired, lost)
			w := newWorker(t, sweepStore, approval.ResumeGraph(f.run), approval.WorkerOptions{})
			if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != approvals {
				t.Fatalf("worker: %+v, %v", rep, err)
			}
			if f.witness.total() != approved {
				t.Errorf("%d payments, want %d", f.witness.total(), approved)
			}
		})
	}
}

// TestCrashAfterDecisionBeforeResume (R37): a separate process (a CLI
// without the graph) records an approval and is SIGKILLed before anything
// resumes the thread. After the "restart" (a new store on a new
// connection to the same file) the worker resumes the thread once, and the
// refund is paid once, however often and however many workers run.
func TestCrashAfterDecisionBeforeResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	ctx := context.Background()
	clock := newClock()
	_, path := tempDB(t)
	f := newFixture(t, clock, nil)
	id := f.start(t, "crash", "order-crash", 70)
	in := approval.NewInbox(f.saver, approval.NewMemoryStore(clock.Now))
	it, err := in.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	item, err := json.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDecideThenDie$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "APPROVAL_DB="+path, "APPROVAL_ITEM="+string(item))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want it killed\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\n%s", err, out)
	}
	if !strings.Contains(string(out), "DECIDED approved") {
		t.Fatalf("child did not decide before dying:\n%s", out)
	}
	if s := f.state(t, "crash"); s.Status != graph.StatusWaiting || f.witness.total() != 0 {
		t.Fatalf("before restart: %s, %d payments; want waiting, none", s.Status, f.witness.total())
	}

	// Restart: a new connection to the file, two workers.
	store := openSQLStore(t, openDB(t, path), clock.Now)
	rec, err := store.Get(ctx, id)
	if err != nil {
		t.Fatalf("the decision did not survive the crash: %v", err)
	}
	if rec.Decision.Outcome != approval.Approved || !rec.Resume.At.IsZero() {
		t.Fatalf("after the crash: %+v", rec)
	}
	resume := approval.ResumeGraph(f.run)
	var wg sync.WaitGroup
	reps := make([]approval.WorkerReport, 3)
	for i := range reps {
		w := newWorker(t, store, resume, approval.WorkerOptions{})
		wg.Go(func() {
			r, err := w.RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			reps[i] = r
		})
	}
	wg.Wait()
	resumed := 0
	for _, r := range reps {
		resumed += r.Resumed
	}
	if resumed != 1 {
		t.Errorf("workers resumed %d times in all (%+v), want 1", resumed, reps)
	}
	if s := f.state(t, "crash"); s.Status != graph.StatusDone || s.Values.Paid != 70 {
		t.Errorf("after restart: %s %+v", s.Status, s.Values)
	}
	if n := f.witness.count("crash"); n != 1 {
		t.Errorf("paid %d times, want 1", n)
	}
	if rec, _ := store.Get(ctx, id); rec.Resume.At.IsZero() {
		t.Errorf("the approval stays unresumed: %+v", rec.Resume)
	}
}

// TestHelperDecideThenDie is the crash child of
// TestCrashAfterDecisionBeforeResume: it records the decision and kills
// itself where it would resume the thread.
func TestHelperDecideThenDie(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("crash child only")
	}
	ctx := context.Background()
	db, err := sql.Open("sqlite3", sqliteDSN(os.Getenv("APPROVAL_DB")))
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.OpenSQLStore(ctx, db, func() time.Time { return epoch.Add(time.Minute) })
	if err != nil {
		t.Fatal(err)
	}
	var it approval.Item
	if err := json.Unmarshal([]byte(os.Getenv("APPROVAL_ITEM")), &it); err != nil {
		t.Fatal(err)
	}
	d, err := store.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Note: "refund ok"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("DECIDED", d.Outcome)
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL) // afterApprovalUpdateBeforeResume
	time.Sleep(time.Minute)
}

// TestWorkerDiesAfterClaim (R37 in process): a worker dies after claiming
// a decision and before resuming it (its claim is all it leaves). Another
// worker leaves it alone while the claim lasts, then resumes it once.
func TestWorkerDiesAfterClaim(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	f := newFixture(t, clock, store)
	in := approval.NewInbox(f.saver, store)
	id := f.start(t, "dies", "order-dies", 10)
	if _, err := in.Approve(ctx, id, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.ClaimResume(ctx, id, time.Minute); err != nil || !ok {
		t.Fatalf("the dying worker's claim: %v, %v", ok, err)
	}
	w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
	if rep, err := w.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
		t.Fatalf("while the claim lasts: %+v, %v; want nothing due", rep, err)
	}
	clock.Add(time.Minute)
	if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 1 {
		t.Fatalf("after the claim lapsed: %+v, %v", rep, err)
	}
	if n := f.witness.count("dies"); n != 1 {
		t.Errorf("paid %d times, want 1", n)
	}
}

// TestStoppedWorkerHandsBackItsClaim: a worker whose context ends during
// a resume (Ctrl-C) hands its claim back, so that the program run again
// resumes the thread at once instead of after the lease, once.
func TestStoppedWorkerHandsBackItsClaim(t *testing.T) {
	onEveryStore(t, func(t *testing.T, dk desk) {
		ctx, clock, store, f, in := context.Background(), dk.clock, dk.store, dk.f, dk.in
		id := f.start(t, "stopped", "order-stopped", 10)
		if _, err := in.Approve(ctx, id, "alice", ""); err != nil {
			t.Fatal(err)
		}
		stopped, stop := context.WithCancel(ctx)
		w := newWorker(t, store, func(context.Context, approval.Record) error {
			stop() // Ctrl-C while the thread is being resumed
			return context.Canceled
		}, approval.WorkerOptions{Lease: time.Hour})
		if _, err := w.RunOnce(stopped); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped worker: %v", err)
		}
		rec, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Resume.NotBefore.Equal(clock.Now()) || !strings.Contains(rec.Resume.LastError, "the worker stopped") {
			t.Errorf("after the stop: %+v; want the claim handed back now, saying why", rec.Resume)
		}
		again := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
		if rep, err := again.RunOnce(ctx); err != nil || rep.Resumed != 1 {
			t.Fatalf("run again at once: %+v, %v; want it resumed", rep, err)
		}
		if n := f.witness.count("stopped"); n != 1 {
			t.Errorf("paid %d times, want 1", n)
		}
	})
}

// TestResumeDiesMidNode (R37, the inner window): the run dies after the
// answer was saved and before the payment. Resuming again is refused by
// the runtime (already answered) and the thread is pending; the worker's
// next attempt continues it, and the refund is paid once.
func TestResumeDiesMidNode(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	f := newFixture(t, clock, store)
	in := approval.NewInbox(f.saver, store)
	id := f.start(t, "mid", "order-mid", 10)
	if _, err := in.Approve(ctx, id, "alice", ""); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := approval.ResumeGraph(f.run)
	w := newWorker(t, store, func(ctx context.Context, rec approval.Record) error {
		run, stop := context.WithCancel(ctx)
		defer stop()
		f.beforePay = func(ctx context.Context) error {
			fired := false
			once.Do(func() { fired = true; stop() })
			if fired {
				return ctx.Err()
			}
			return nil
		}
		return resume(run, rec)
	}, approval.WorkerOptions{})
	rep, err := w.RunOnce(ctx)
	if err != nil || rep.Deferred != 1 {
		t.Fatalf("first pass: %+v, %v; want one deferred attempt", rep, err)
	}
	if s := f.state(t, "mid"); s.Status != graph.StatusPending || f.witness.total() != 0 {
		t.Fatalf("after the stop: %s, %d payments; want pending, none", s.Status, f.witness.total())
	}
	rec, _ := store.Get(ctx, id)
	if rec.Resume.Attempts != 1 || rec.Resume.LastError == "" {
		t.Errorf("the failed attempt is not recorded: %+v", rec.Resume)
	}
	clock.Add(time.Second)
	if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 1 {
		t.Fatalf("second pass: %+v, %v", rep, err)
	}
	if s := f.state(t, "mid"); s.Status != graph.StatusDone || s.Values.Paid != 10 || f.witness.total() != 1 {
		t.Errorf("after the retry: %s %+v, %d payments; want done, paid once", s.Status, s.Values, f.witness.total())
	}
}

// TestResumedRunStoppedAfterAStepIsContinued (R37): the resumed run saves
// the approval's step (the decision is delivered, the refund paid) and
// then fails in the next node. The retry finds the interrupt answered and
// the thread failed: the worker continues the thread instead of marking
// the approval stale and leaving the thread stuck, and nothing is paid
// twice.
func TestResumedRunStoppedAfterAStepIsContinued(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	f := newFixture(t, clock, store)
	notified := 0
	r, err := graph.New[refundState]().
		AddNode("refund", f.refundNode).
		AddNode("notify", func(ctx context.Context, s refundState) (graph.Update[refundState], error) {
			if notified++; notified == 1 {
				return graph.Update[refundState]{}, errors.New("mail server unavailable")
			}
			return graph.Update[refundState]{}, nil
		}).
		AddEdge(graph.START, "refund").AddEdge("refund", "notify").
		Compile(graph.WithSaver(f.saver))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "th", graph.Set(refundState{Order: "o-1", Amount: 10}, "Order", "Amount"))
	if err != nil || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke = %+v, %v", res, err)
	}
	in := approval.NewInbox(f.saver, store)
	if _, err := in.Approve(ctx, res.Interrupts[0].ID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, store, approval.ResumeGraph(r), approval.WorkerOptions{})
	if rep, err := w.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{Deferred: 1}) {
		t.Fatalf("first pass: %+v, %v; want one deferred attempt", rep, err)
	}
	if s, _ := r.GetState(ctx, "th"); s.Status != graph.StatusFailed || f.witness.total() != 1 {
		t.Fatalf("after the failure: %s, %d payments; want failed, paid once", s.Status, f.witness.total())
	}
	clock.Add(time.Second)
	if rep, err := w.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{Resumed: 1}) {
		t.Fatalf("second pass: %+v, %v; want the thread continued", rep, err)
	}
	if s, _ := r.GetState(ctx, "th"); s.Status != graph.StatusDone || s.Values.Paid != 10 || f.witness.total() != 1 || notified != 2 {
		t.Errorf("after the retry: %s %+v, %d payments, notify ran %d times; want done, paid once, notify twice", s.Status, s.Values, f.witness.total(), notified)
	}
}

// TestWorkerBusyThread: a thread held by another runner is retried later,
// not marked resumed; a thread that no longer waits is marked and left.
func TestWorkerBusyThread(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	schema := refundSchema(t)
	for _, id := range []string{"busy", "gone"} {
		if _, err := store.Decide(ctx, newItem(t, schema, clock.Now(), id), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]int{}
	w := newWorker(t, store, func(_ context.Context, rec approval.Record) error {
		calls[rec.ID]++
		switch {
		case rec.ID == "gone":
			return &graph.ResumeError{Thread: rec.Thread, Kind: graph.ErrUnknownInterrupt, InterruptID: rec.ID}
		case calls[rec.ID] == 1:
			return &checkpoint.BusyError{Thread: rec.Thread}
		}
		return nil
	}, approval.WorkerOptions{Concurrency: 1})
	rep, err := w.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(approval.WorkerReport{Stale: 1, Deferred: 1}, rep); diff != "" {
		t.Errorf("first pass (-want +got):\n%s", diff)
	}
	rec, _ := store.Get(ctx, "gone")
	if rec.Resume.At.IsZero() || !strings.Contains(rec.Resume.Note, "no longer waits") {
		t.Errorf("gone: %+v", rec.Resume)
	}
	clock.Add(time.Second)
	rep, err = w.RunOnce(ctx)
	if err != nil || rep != (approval.WorkerReport{Resumed: 1}) {
		t.Errorf("second pass: %+v, %v", rep, err)
	}
	if calls["gone"] != 1 || calls["busy"] != 2 {
		t.Errorf("calls %v", calls)
	}
}

// TestWorkerRun: the loop sweeps and resumes on its own: an approved
// refund is paid within the first pass, a forgotten one expires at its
// deadline and its thread gets the rejection, until the context ends.
func TestWorkerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &fakeClock{t: time.Now()} // the bubble's clock, for the requests
		store := approval.NewMemoryStore(nil)
		f := newFixture(t, clock, store)
		in := approval.NewInbox(f.saver, store)
		approved := f.start(t, "approved", "o1", 5)
		f.start(t, "forgotten", "o2", 5)
		if _, err := in.Approve(context.Background(), approved, "alice", ""); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl+time.Hour)
		defer cancel()
		w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{Sweeper: in})
		if err := w.Run(ctx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run: %v", err)
		}
		for th, want := range map[string]approval.Outcome{"approved": approval.Approved, "forgotten": approval.Expired} {
			if s := f.state(t, th); s.Status != graph.StatusDone || s.Values.Outcome != want {
				t.Errorf("thread %s: %s %q, want done %q", th, s.Status, s.Values.Outcome, want)
			}
		}
		if f.witness.total() != 1 {
			t.Errorf("%d payments, want 1", f.witness.total())
		}
	})
}

// TestWorkerRunStopsOnAClosedStore: a worker whose store is closed stops
// with ErrClosed instead of logging a failed pass every interval forever.
func TestWorkerRunStopsOnAClosedStore(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			s, _ := k.open(t, nil)
			if err := s.(interface{ Close() error }).Close(); err != nil {
				t.Fatal(err)
			}
			resumed := 0
			w := newWorker(t, s, func(context.Context, approval.Record) error { resumed++; return nil }, approval.WorkerOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := w.Run(ctx, time.Millisecond); !errors.Is(err, approval.ErrClosed) {
				t.Fatalf("Run on a closed store: %v, want ErrClosed", err)
			}
			if resumed != 0 {
				t.Errorf("%d resumes", resumed)
			}
		})
	}
}

// TestResumeErrorTruncated: a long resume error is kept short.
func TestResumeErrorTruncated(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, _ := k.open(t, clock.Now)
			it := newItem(t, refundSchema(t), clock.Now(), "x")
			if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			if err := s.RetryResume(ctx, "x", strings.Repeat("é", 4000), time.Second); err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			if n := len(rec.Resume.LastError); n > 1024 || n < 1000 || !utf8.ValidString(rec.Resume.LastError) {
				t.Errorf("stored error of %d bytes (valid UTF-8: %v)", n, utf8.ValidString(rec.Resume.LastError))
			}
			if !rec.Resume.NotBefore.Equal(epoch.Add(time.Second)) || rec.Resume.Attempts != 1 {
				t.Errorf("resume state %+v", rec.Resume)
			}
		})
	}
}

// Applications that share a database scope their inbox and worker to the
// threads they own: a foreign approval is not listed, swept, decided or
// resumed with the wrong graph.
func TestScopedInboxAndWorker(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	f := newFixture(t, clock, nil)
	store := approval.NewMemoryStore(clock.Now)
	mine := func(thread string) bool { return strings.HasPrefix(thread, "mine-") }
	f.start(t, "mine-1", "o-1", 40)
	theirs := f.start(t, "theirs-1", "o-2", 40)
	all := approval.NewInbox(f.saver, store)
	scoped := all.ForThreads(mine)
	page, err := scoped.List(ctx, approval.Filter{})
	if err != nil || len(page.Items) != 1 || page.Items[0].Thread != "mine-1" {
		t.Fatalf("scoped List = %+v, %v; want only mine-1", page.Items, err)
	}
	if _, err := scoped.Approve(ctx, theirs, "alice", ""); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("deciding a foreign approval: %v, want ErrNotFound", err)
	}
	clock.Add(48 * time.Hour)
	rep, err := scoped.Sweep(ctx)
	if err != nil || rep.Expired != 1 {
		t.Fatalf("scoped Sweep = %+v, %v; want 1 expired", rep, err)
	}
	if _, err := store.Get(ctx, theirs); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("the scoped sweeper expired a foreign approval: %v", err)
	}
	// Now the foreign approval is decided too; only its own worker resumes it.
	if _, err := all.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var resumed []string
	w := newWorker(t, store, func(ctx context.Context, rec approval.Record) error {
		resumed = append(resumed, rec.Thread)
		return nil
	}, approval.WorkerOptions{Threads: mine})
	if _, err := w.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"mine-1"}, resumed); diff != "" {
		t.Errorf("resumed threads (-want +got):\n%s", diff)
	}
}

// TestWorkerConfigRefused: worker options out of range are refused with a
// typed error when the worker is made (or run), never replaced by the
// defaults.
func TestWorkerConfigRefused(t *testing.T) {
	store := approval.NewMemoryStore(newClock().Now)
	resume := func(context.Context, approval.Record) error { return nil }
	tests := []struct {
		name   string
		store  approval.Store
		resume approval.ResumeFunc
		opts   approval.WorkerOptions
	}{
		{"nil store", nil, resume, approval.WorkerOptions{}},
		{"nil resume", store, nil, approval.WorkerOptions{}},
		{"negative batch", store, resume, approval.WorkerOptions{Batch: -1}},
		{"negative concurrency", store, resume, approval.WorkerOptions{Concurrency: -4}},
		{"negative lease", store, resume, approval.WorkerOptions{Lease: -time.Minute}},
		{"a negative retry wait", store, resume, approval.WorkerOptions{Retry: &retry.Policy{Initial: -time.Second}}},
		{"a retry factor below 1", store, resume, approval.WorkerOptions{Retry: &retry.Policy{Initial: time.Second, Multiplier: 0.5}}},
		{"a retry wait above its cap", store, resume, approval.WorkerOptions{Retry: &retry.Policy{Initial: time.Hour, Max: time.Minute}}},
		{"retry attempts: a decision is retried until it resumes", store, resume, approval.WorkerOptions{Retry: &retry.Policy{MaxAttempts: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := approval.NewWorker(tc.store, tc.resume, tc.opts)
			if w != nil || !errors.Is(err, approval.ErrInvalidConfig) {
				t.Errorf("NewWorker: %v, %v; want nil and ErrInvalidConfig", w, err)
			}
			var pe *retry.PolicyError
			if invalid := tc.opts.Retry != nil && tc.opts.Retry.Validate() != nil; invalid != errors.As(err, &pe) {
				t.Errorf("NewWorker: %v; a refused retry policy, and only that, is a *retry.PolicyError", err)
			}
		})
	}
	w := newWorker(t, store, resume, approval.WorkerOptions{})
	if err := w.Run(context.Background(), -time.Second); !errors.Is(err, approval.ErrInvalidConfig) {
		t.Errorf("Run with a negative interval: %v, want ErrInvalidConfig", err)
	}
	ch := approval.NewMemoryChannel(nil)
	defer ch.Close()
	req := newRequest(t, refundSchema(t), epoch, "o1", 10)
	if _, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Timeout: -time.Second}); !errors.Is(err, approval.ErrInvalidConfig) {
		t.Errorf("Wait with a negative timeout: %v, want ErrInvalidConfig", err)
	}
}

// TestStoreStampsItsOwnTimes: a claim's end and a retry's time are the
// store's now plus the duration the worker asks for, so they are compared
// later by the clock that wrote them; leases that are not positive and
// negative delays are refused. The inbox reads the store's clock too.
func TestStoreStampsItsOwnTimes(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			clock.Set(epoch.Add(3 * time.Hour)) // the store's clock is not the test's wall clock
			s, _ := k.open(t, clock.Now)
			it := newItem(t, refundSchema(t), clock.Now(), "x")
			if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			for _, lease := range []time.Duration{0, -time.Second} {
				if _, err := s.ClaimResume(ctx, "x", lease); !errors.Is(err, approval.ErrInvalidConfig) {
					t.Errorf("ClaimResume with lease %v: %v, want ErrInvalidConfig", lease, err)
				}
			}
			if err := s.RetryResume(ctx, "x", "busy", -time.Second); !errors.Is(err, approval.ErrInvalidConfig) {
				t.Errorf("RetryResume with a negative delay: %v, want ErrInvalidConfig", err)
			}
			if ok, err := s.ClaimResume(ctx, "x", time.Minute); err != nil || !ok {
				t.Fatalf("claim: %v, %v", ok, err)
			}
			rec, _ := s.Get(ctx, "x")
			if want := clock.Now().Add(time.Minute); !rec.Resume.NotBefore.Equal(want) {
				t.Errorf("claimed until %v, want the store's now + lease = %v", rec.Resume.NotBefore, want)
			}
			if err := s.RetryResume(ctx, "x", "busy", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			rec, _ = s.Get(ctx, "x")
			if want := clock.Now().Add(5 * time.Second); !rec.Resume.NotBefore.Equal(want) {
				t.Errorf("retry at %v, want the store's now + delay = %v", rec.Resume.NotBefore, want)
			}
			if !s.Now().Equal(clock.Now()) {
				t.Errorf("Store.Now = %v, want its clock's %v", s.Now(), clock.Now())
			}
		})
	}
}

type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// TestWorkerContainsResumeFunc (issue 16 item 1): the worker runs
// ResumeFuncs on goroutines of its own; one that panics, or returns a
// typed nil error whose Error reads its receiver, or a retry policy's Rand
// or a Threads option that panics, is an attempt that failed (recorded,
// retried after the backoff), never a crash.
func TestWorkerContainsResumeFunc(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resume  approval.ResumeFunc
		opts    approval.WorkerOptions
		note    string // what the approval's last resume error says
		skipped bool   // Threads panicked: nothing handled
	}{
		{"the ResumeFunc panics", func(context.Context, approval.Record) error { panic("resume exploded") }, approval.WorkerOptions{}, "the ResumeFunc panicked: resume exploded", false},
		{"the ResumeFunc returns a typed nil", func(context.Context, approval.Record) error {
			var e *nilErr
			return e
		}, approval.WorkerOptions{}, "the Error method of the ResumeFunc's error panicked", false},
		{"the retry policy's Rand panics", func(context.Context, approval.Record) error { return errors.New("try later") },
			approval.WorkerOptions{Retry: &retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: readerFunc(func([]byte) (int, error) { panic("Rand exploded") })}}, "try later", false},
		{"Threads panics", func(context.Context, approval.Record) error { return nil },
			approval.WorkerOptions{Threads: func(string) bool { panic("threads exploded") }}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			store := approval.NewMemoryStore(clock.Now)
			if _, err := store.Decide(ctx, newItem(t, refundSchema(t), clock.Now(), "a1"), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			opts := tc.opts
			w, err := approval.NewWorker(store, tc.resume, opts)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := w.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := store.Get(ctx, "a1")
			if tc.skipped {
				if rep != (approval.WorkerReport{}) || !rec.Resume.At.IsZero() {
					t.Errorf("report %+v, resume %+v; want nothing handled", rep, rec.Resume)
				}
				return
			}
			if rep != (approval.WorkerReport{Deferred: 1}) || !strings.Contains(rec.Resume.LastError, tc.note) || rec.Resume.Attempts != 1 || !rec.Resume.NotBefore.After(clock.Now()) {
				t.Errorf("report %+v, resume %+v; want one deferred attempt noting %q", rep, rec.Resume, tc.note)
			}
		})
	}
}

// readerFunc is an io.Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// TestWorkerRetrySchedule: after its n-th failed resume an approval is
// due again the worker's retry policy's Wait(n) later, on the store's
// clock: the default (1s doubling to 5 minutes, as before the policy
// type), a policy given, no wait for a zero Initial; a busy thread is
// always retried after the first wait.
func TestWorkerRetrySchedule(t *testing.T) {
	const failures = 10
	busy := fmt.Errorf("resume: %w", checkpoint.ErrThreadBusy)
	for _, tc := range []struct {
		name  string
		retry *retry.Policy
		err   error
		waits []time.Duration // after each failed attempt
	}{
		{"the default: 1s doubling to 5m", nil, errors.New("try later"),
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute}},
		{"DefaultWorkerRetry, given", ptr(approval.DefaultWorkerRetry()), errors.New("try later"),
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute}},
		{"a busy thread: the first wait each time", nil, busy,
			[]time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}},
		{"a policy given", &retry.Policy{Initial: 10 * time.Millisecond, Multiplier: 3, Max: time.Second}, errors.New("try later"),
			[]time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 90 * time.Millisecond, 270 * time.Millisecond, 810 * time.Millisecond, time.Second, time.Second, time.Second, time.Second, time.Second}},
		{"the zero policy: due at once", &retry.Policy{}, errors.New("try later"), make([]time.Duration, failures)},
		{"jitter from the policy's Rand: the low end", &retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: bytes.NewReader(make([]byte, 8*failures))}, errors.New("try later"),
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			store := approval.NewMemoryStore(clock.Now)
			if _, err := store.Decide(ctx, newItem(t, refundSchema(t), clock.Now(), "a1"), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			w := newWorker(t, store, func(context.Context, approval.Record) error { return tc.err }, approval.WorkerOptions{Retry: tc.retry})
			var got []time.Duration
			for range failures {
				rep, err := w.RunOnce(ctx)
				if err != nil || rep != (approval.WorkerReport{Deferred: 1}) {
					t.Fatalf("RunOnce: %+v, %v; want one deferred attempt", rep, err)
				}
				rec, err := store.Get(ctx, "a1")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, rec.Resume.NotBefore.Sub(clock.Now()))
				clock.Set(rec.Resume.NotBefore) // due now
			}
			if d := cmp.Diff(tc.waits, got); d != "" {
				t.Errorf("waits after each failed resume (-want +got):\n%s", d)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestWorkerTakesBackAKilledProcessesClaim: a worker killed after its
// claim (SIGKILL: nothing handed back) leaves a claim that names it. A
// worker of another name waits it out, as before; the process of the
// same name run again takes it back at once, without waiting out the
// lease, and resumes the thread once.
func TestWorkerTakesBackAKilledProcessesClaim(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("parent only")
	}
	ctx := context.Background()
	clock := newClock()
	db, path := tempDB(t)
	store := openSQLStore(t, db, clock.Now)
	f := newFixture(t, clock, store)
	id := f.start(t, "killed", "order-killed", 30)
	if _, err := approval.NewInbox(f.saver, store).Approve(ctx, id, "alice", ""); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperClaimThenDie$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "APPROVAL_DB="+path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want it killed\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\n%s", err, out)
	}
	rec, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Resume.Claimant != "billing-1" || rec.Resume.Claim == "" || !rec.Resume.NotBefore.After(clock.Now()) {
		t.Fatalf("after the kill: %+v, want a live claim of billing-1", rec.Resume)
	}

	other := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{Name: "billing-2"})
	if rep, err := other.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
		t.Fatalf("another worker: %+v, %v; want it to leave the claim alone", rep, err)
	}
	again := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{Name: "billing-1"})
	if rep, err := again.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{Resumed: 1, TakenBack: 1}) {
		t.Fatalf("billing-1 run again: %+v, %v; want the claim taken back and the thread resumed", rep, err)
	}
	if s := f.state(t, "killed"); s.Status != graph.StatusDone || f.witness.count("killed") != 1 {
		t.Errorf("after the take-back: %s, paid %d times; want done, once", s.Status, f.witness.count("killed"))
	}
}

// TestHelperClaimThenDie is the crash child of
// TestWorkerTakesBackAKilledProcessesClaim: a worker named billing-1
// claims the decision and kills itself where it would resume the thread.
func TestHelperClaimThenDie(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("crash child only")
	}
	ctx := context.Background()
	db, err := sql.Open("sqlite3", sqliteDSN(os.Getenv("APPROVAL_DB")))
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.OpenSQLStore(ctx, db, func() time.Time { return epoch })
	if err != nil {
		t.Fatal(err)
	}
	w, err := approval.NewWorker(store, func(context.Context, approval.Record) error {
		syscall.Kill(os.Getpid(), syscall.SIGKILL) // mid-resume
		time.Sleep(time.Minute)
		return nil
	}, approval.WorkerOptions{Name: "billing-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.RunOnce(ctx)
	t.Fatalf("the worker came back from its resume: %v", err)
}

// TestWorkerNeverTakesALiveClaim: a claim of the worker's name is taken
// back only when it has ended. While one attempt of a worker resumes a
// decision, another pass of the same worker and a worker of another name
// both leave it alone (each store kind); a claim of the name that no
// attempt holds (a killed process's) is taken back, once, even by two
// passes at once; and a backoff after a failed attempt is never taken for
// a claim.
func TestWorkerNeverTakesALiveClaim(t *testing.T) {
	onEveryStore(t, func(t *testing.T, dk desk) {
		ctx, store, f, in := context.Background(), dk.store, dk.f, dk.in
		id := f.start(t, "live", "order-live", 10)
		if _, err := in.Approve(ctx, id, "alice", ""); err != nil {
			t.Fatal(err)
		}
		entered, release := make(chan struct{}), make(chan struct{})
		resume := approval.ResumeGraph(f.run)
		w := newWorker(t, store, func(ctx context.Context, rec approval.Record) error {
			close(entered)
			<-release
			return resume(ctx, rec)
		}, approval.WorkerOptions{Name: "billing-1"})
		first := make(chan approval.WorkerReport, 1)
		go func() {
			rep, err := w.RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			first <- rep
		}()
		<-entered
		if rep, err := w.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
			t.Errorf("a second pass of the worker while its attempt runs: %+v, %v; want nothing", rep, err)
		}
		other := newWorker(t, store, resume, approval.WorkerOptions{Name: "billing-2"})
		if rep, err := other.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
			t.Errorf("another worker while the attempt runs: %+v, %v; want nothing", rep, err)
		}
		close(release)
		if rep := <-first; rep != (approval.WorkerReport{Resumed: 1}) {
			t.Errorf("the attempt: %+v, want it resumed", rep)
		}
		if n := f.witness.count("live"); n != 1 {
			t.Errorf("paid %d times, want 1", n)
		}

		// A claim a killed process of the name left: two passes at
		// once take it back once between them.
		claimer := store.(approval.ResumeClaimer)
		id2 := f.start(t, "left", "order-left", 20)
		if _, err := in.Approve(ctx, id2, "alice", ""); err != nil {
			t.Fatal(err)
		}
		if ok, err := claimer.ClaimResumeAs(ctx, id2, approval.Claim{Worker: "billing-1", ID: "killed-1", Lease: time.Hour}); err != nil || !ok {
			t.Fatalf("the killed process's claim: %v, %v", ok, err)
		}
		again := newWorker(t, store, resume, approval.WorkerOptions{Name: "billing-1"})
		var wg sync.WaitGroup
		reps := make([]approval.WorkerReport, 2)
		for i := range reps {
			wg.Go(func() {
				r, err := again.RunOnce(ctx)
				if err != nil {
					t.Error(err)
				}
				reps[i] = r
			})
		}
		wg.Wait()
		if got := reps[0].TakenBack + reps[1].TakenBack; got != 1 || reps[0].Resumed+reps[1].Resumed != 1 {
			t.Errorf("two passes over the killed process's claim: %+v; want it taken back and resumed once", reps)
		}
		if n := f.witness.count("left"); n != 1 {
			t.Errorf("paid %d times, want 1", n)
		}

		// A failed attempt's backoff names no claimant: it is waited out.
		id3 := f.start(t, "backoff", "order-backoff", 5)
		if _, err := in.Approve(ctx, id3, "alice", ""); err != nil {
			t.Fatal(err)
		}
		failing := newWorker(t, store, func(context.Context, approval.Record) error { return errors.New("the payment API is down") },
			approval.WorkerOptions{Name: "billing-1"})
		if rep, err := failing.RunOnce(ctx); err != nil || rep.Deferred != 1 {
			t.Fatalf("failing attempt: %+v, %v", rep, err)
		}
		if rep, err := newWorker(t, store, resume, approval.WorkerOptions{Name: "billing-1"}).RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
			t.Errorf("during the backoff: %+v, %v; want nothing taken", rep, err)
		}
	})
}

// TestClaimResumeAsRefusesBadClaims: a claim without a worker name or ID,
// with names out of bounds, or without a positive lease is an *Error
// matching ErrInvalidConfig, and nothing is claimed; so is a worker name
// out of bounds given to NewWorker or Claims.
func TestClaimResumeAsRefusesBadClaims(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			store, _ := k.open(t, clock.Now)
			if _, err := store.Decide(ctx, newItem(t, refundSchema(t), clock.Now(), "x"), approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			claimer := store.(approval.ResumeClaimer)
			long := strings.Repeat("w", approval.MaxClaimBytes+1)
			for _, c := range []approval.Claim{
				{ID: "c", Lease: time.Minute},
				{Worker: "w", Lease: time.Minute},
				{Worker: long, ID: "c", Lease: time.Minute},
				{Worker: "w", ID: long, Lease: time.Minute},
				{Worker: "w", ID: "c", Lease: time.Minute, TakeBack: long},
				{Worker: "w\xff", ID: "c", Lease: time.Minute},
				{Worker: "w", ID: "c"},
				{Worker: "w", ID: "c", Lease: -time.Second},
			} {
				if ok, err := claimer.ClaimResumeAs(ctx, "x", c); ok || !errors.Is(err, approval.ErrInvalidConfig) {
					t.Errorf("ClaimResumeAs(%+v) = %v, %v; want ErrInvalidConfig", c, ok, err)
				}
			}
			if rec, err := store.Get(ctx, "x"); err != nil || !rec.Resume.NotBefore.IsZero() || rec.Resume.Claimant != "" {
				t.Errorf("after the refused claims: %+v, %v; want nothing claimed", rec.Resume, err)
			}
			if _, err := claimer.Claims(ctx, "", 0); !errors.Is(err, approval.ErrInvalidConfig) {
				t.Errorf("Claims of no worker: %v, want ErrInvalidConfig", err)
			}
			if _, err := approval.NewWorker(store, func(context.Context, approval.Record) error { return nil }, approval.WorkerOptions{Name: long}); !errors.Is(err, approval.ErrInvalidConfig) {
				t.Errorf("NewWorker with a name of %d bytes: %v, want ErrInvalidConfig", len(long), err)
			}
		})
	}
}

// TestWorkerResumesAThreadOneDecisionAtATime: two decisions of one thread
// (a stale one, and the one it waits on now) are resumed one after the
// other, oldest first, and other threads' in parallel. Resumed at once,
// one of a thread's two would find the thread leased to the other, fail
// busy and wait for its backoff.
func TestWorkerResumesAThreadOneDecisionAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clock := newClock()
		store := approval.NewMemoryStore(clock.Now)
		schema := refundSchema(t)
		decide := func(id, thread string) {
			t.Helper()
			it := newItem(t, schema, clock.Now(), id)
			it.Thread = thread
			if _, err := store.Decide(ctx, it, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
				t.Fatal(err)
			}
			clock.Add(time.Second)
		}
		decide("first", "t1")
		decide("other", "t2")
		decide("second", "t1")
		var (
			mu       sync.Mutex
			inFlight = map[string]int{}
			most     = map[string]int{}
			all, top int
			order    []string
		)
		w := newWorker(t, store, func(_ context.Context, rec approval.Record) error {
			mu.Lock()
			inFlight[rec.Thread]++
			all++
			most[rec.Thread] = max(most[rec.Thread], inFlight[rec.Thread])
			top = max(top, all)
			if rec.Thread == "t1" {
				order = append(order, rec.ID)
			}
			mu.Unlock()
			time.Sleep(time.Second) // the bubble's clock: every goroutine gets to start
			mu.Lock()
			inFlight[rec.Thread]--
			all--
			mu.Unlock()
			return nil
		}, approval.WorkerOptions{Concurrency: 4})
		rep, err := w.RunOnce(ctx)
		if err != nil || rep != (approval.WorkerReport{Resumed: 3}) {
			t.Fatalf("RunOnce: %+v, %v; want 3 resumed", rep, err)
		}
		if most["t1"] != 1 || top != 2 {
			t.Errorf("at most %d resumes of thread t1 at once, %d in all; want 1, and 2 (the threads in parallel)", most["t1"], top)
		}
		if d := cmp.Diff([]string{"first", "second"}, order); d != "" {
			t.Errorf("order of t1's decisions (-want +got):\n%s", d)
		}
	})
}
