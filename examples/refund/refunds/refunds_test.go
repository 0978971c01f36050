package refunds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// TestMain runs the crash test's child (the test binary re-runs itself
// with REFUNDS_CHILD set) and checks for goroutine leaks otherwise.
func TestMain(m *testing.M) {
	if role := os.Getenv("REFUNDS_CHILD"); role != "" {
		os.Exit(child(role, os.Getenv("REFUNDS_DB")))
	}
	goleak.VerifyTestMain(m)
}

// crashLease is how long a killed child keeps the thread and its claim on
// the approval.
const crashLease = 300 * time.Millisecond

// child is the crash test's child process. It returns only when it was
// not killed.
func child(role, db string) int {
	ctx := context.Background()
	switch role {
	case "resume-then-die":
		// Resume the approved refund; die as soon as the tool node
		// returned (the refund is paid and recorded, the step is not
		// checkpointed).
		ctx = testhook.With(ctx, func(point string) {
			if point == testhook.GraphAfterTask {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		})
		a, err := refunds.Open(ctx, refunds.Config{DB: db, Lease: crashLease})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		rep, err := a.Worker.RunOnce(ctx)
		fmt.Fprintf(os.Stderr, "the worker returned: %+v, %v\n", rep, err)
		return 4
	}
	return 2
}

// startChild runs the test binary as role on db and returns nil when it
// was killed with SIGKILL, as planned.
func startChild(role, db string) error {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REFUNDS_CHILD="+role, "REFUNDS_DB="+db)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("child %s: %v (stderr: %s)", role, err, stderr.String())
}

func run(t *testing.T, db string) (refunds.Counts, string) {
	t.Helper()
	var out bytes.Buffer
	c, err := refunds.Run(context.Background(), refunds.Config{DB: db, Out: &out})
	if err != nil {
		t.Fatalf("Run: %v\noutput:\n%s", err, out.String())
	}
	return c, out.String()
}

// wantLines checks that out holds every line of want, in order.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("output lacks %q (after the lines before it)\noutput:\n%s", w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// open opens the file as another process would.
func open(t *testing.T, db string) (*sqlite.Saver, *refunds.Shop, *approval.SQLStore) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	shop, err := refunds.OpenShop(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, shop, store
}

func payments(t *testing.T, shop *refunds.Shop) []string {
	t.Helper()
	ps, err := shop.Payments(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %s %d", p.ID, p.Order, p.AmountCents))
	}
	return out
}

func status(t *testing.T, s *sqlite.Saver, thread string) string {
	t.Helper()
	in, err := demo.Inspect(context.Background(), s, thread)
	if err != nil {
		t.Fatalf("inspect %s: %v", thread, err)
	}
	return in.Status
}

// TestRefund: two reviewers approve at once and one wins; the refund is
// paid once across a crash and restart; the other request expires and the
// agent explains it. A second run pays nothing.
func TestRefund(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	c, out := run(t, db)
	if d := cmp.Diff(refunds.Counts{Payments: 1, Paid: 1, Decided: 1, Lost: 1, Expired: 1, Resumed: 2, Restarts: 1}, c); d != "" {
		t.Errorf("first run counts (-want +got):\n%s", d)
	}
	wantLines(t, out,
		`Thread refund-A-1001: "Hi, this is Mia Chen.`,
		"lookup_order: executed",
		"issue_refund: blocked",
		"The thread is waiting, not failed. Approval ",
		`The agent's rationale: "Order A-1001 (wireless headphones, 89.90 EUR) qualifies for a refund: the parcel was lost in transit.`,
		"Context: Mia Chen <mia@example.com>; order A-1001, Wireless headphones, 89.90 EUR, placed 2026-04-02; history: 2 order(s), 0 refund(s).",
		"Alice Moreau and Bilal Haddad click Approve at the same moment",
		"'s decision is recorded: approved at",
		" is told: approval ",
		`The process "dies" now, after the decision and before any worker resumed the thread (simulated: the program drops everything it holds and closes the file).`,
		"Restarted: the program opens "+db+" again, as a new process would. The thread is waiting; 1 decision(s) wait to be resumed.",
		"Its approval worker resumes 1 thread(s):",
		"issue_refund: approved",
		"issue_refund: executed",
		"Status done. Agent to the customer: Good news, Mia Chen: your refund of 89.90 EUR for order A-1001 has been issued.",
		"A second worker pass resumes 0 thread(s)",
		`Thread refund-A-1002: "Hello, Leo Park here.`,
		"issue_refund: blocked",
		"Leo asked 3h0m0s ago (simulated",
		"The expiry sweeper rejects 1 expired request(s) as system:expiry",
		"issue_refund: expired",
		"Status done. Agent to the customer: I'm sorry, Leo Park: I could not get your refund of 249.00 EUR for order A-1002 approved in time, so it has not been issued.",
		"refund_payments holds 1 payment(s): RF-0001 (A-1001, 89.90 EUR). This run paid 1.",
	)
	// One reviewer won; the other was told who.
	won := regexp.MustCompile(`\n  (.+)'s decision is recorded`).FindStringSubmatch(out)
	told := regexp.MustCompile(`\n  (.+) is told: approval "([0-9a-f]+)": already approved by "(.+)" at `).FindStringSubmatch(out)
	if won == nil || told == nil || won[1] == told[1] || told[3] != won[1] || !slices.Contains([]string{refunds.ReviewerA, refunds.ReviewerB}, won[1]) {
		t.Fatalf("race: winner %q, told %q", won, told)
	}

	s, shop, store := open(t, db)
	if d := cmp.Diff([]string{"RF-0001 A-1001 8990"}, payments(t, shop)); d != "" {
		t.Errorf("refund_payments (-want +got):\n%s", d)
	}
	for _, thread := range []string{refunds.ThreadPaid, refunds.ThreadExpired} {
		if st := status(t, s, thread); st != "done" {
			t.Errorf("%s: status %s, want done", thread, st)
		}
	}
	// The audit trail: the winner's approval ran once, with the approved
	// arguments.
	tr, err := store.Audit(ctx, told[2])
	if err != nil {
		t.Fatal(err)
	}
	if tr.Decision.Reviewer != won[1] || tr.Decision.Outcome != approval.Approved || tr.Execution == nil || tr.Execution.ArgsHash != tr.Decision.ArgsHash {
		t.Errorf("audit: decision %+v, execution %+v", tr.Decision, tr.Execution)
	}

	c, out = run(t, db)
	if d := cmp.Diff(refunds.Counts{Payments: 1}, c); d != "" {
		t.Errorf("second run counts (-want +got):\n%s", d)
	}
	wantLines(t, out, "Already finished (status done)", "Already finished (status done)", "This run paid 0.")
}

// TestRefundExpiredIsRejection: the expired request's decision is the
// sweeper's rejection, never an approval, and nothing ran for it.
func TestRefundExpiredIsRejection(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	clock := &testClock{t: time.Now()}
	a, err := refunds.Open(ctx, refunds.Config{DB: db, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.Start(ctx, refunds.ThreadExpired)
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("start: %v, %v", res.Status, err)
	}
	id := res.Interrupts[0].ID
	clock.Advance(refunds.TTL)
	// At the deadline nobody can approve any more, and the late click
	// records the expiry, so the sweeper has nothing left to do.
	if _, err := a.Inbox.Approve(ctx, id, refunds.ReviewerA, "late"); !errors.Is(err, approval.ErrExpired) {
		t.Fatalf("late approval: %v, want ErrExpired", err)
	}
	sw, err := a.Inbox.Sweep(ctx)
	if err != nil || sw != (approval.SweepReport{}) {
		t.Fatalf("sweep: %+v, %v; want nothing left to expire", sw, err)
	}
	rep, err := a.Worker.RunOnce(ctx)
	if err != nil || rep.Resumed != 1 {
		t.Fatalf("worker: %+v, %v", rep, err)
	}
	tr, err := a.Store.Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Decision.Outcome != approval.Expired || tr.Decision.Reviewer != approval.ExpiryReviewer || tr.Execution != nil {
		t.Errorf("audit: decision %+v, execution %+v", tr.Decision, tr.Execution)
	}
	ps, err := a.Shop.Payments(ctx)
	if err != nil || len(ps) != 0 {
		t.Errorf("payments %v, %v; want none", ps, err)
	}
	if d := cmp.Diff([]string{"lookup_order:executed", "issue_refund:blocked", "issue_refund:expired"}, a.Statuses()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
}

// TestRefundCrashMidResume: a worker process is killed (SIGKILL) right
// after the approved refund was paid, before the step was checkpointed.
// After the restart the thread is pending, not waiting; a new worker
// finishes it, and the refund is paid once.
func TestRefundCrashMidResume(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	cfg := refunds.Config{DB: db, Lease: crashLease}
	a, err := refunds.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Start(ctx, refunds.ThreadPaid)
	if err != nil || len(res.Interrupts) != 1 {
		a.Close()
		t.Fatalf("start: %v, %v", res.Status, err)
	}
	id := res.Interrupts[0].ID
	if _, err := a.Inbox.Approve(ctx, id, refunds.ReviewerA, "ok"); err != nil {
		a.Close()
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	if err := startChild("resume-then-die", db); err != nil {
		t.Fatal(err)
	}
	s, shop, store := open(t, db)
	if d := cmp.Diff([]string{"RF-0001 A-1001 8990"}, payments(t, shop)); d != "" {
		t.Fatalf("after the crash, refund_payments (-want +got):\n%s", d)
	}
	if st := status(t, s, refunds.ThreadPaid); st != "pending" {
		t.Errorf("after the crash the thread is %s, want pending (answered, step not checkpointed)", st)
	}
	rec, err := store.Get(ctx, id)
	if err != nil || !rec.Resume.At.IsZero() {
		t.Fatalf("after the crash the approval is marked resumed: %+v, %v", rec.Resume, err)
	}

	// Restart: once the dead worker's leases lapse, a new worker finishes
	// the thread without paying again.
	a, err = refunds.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(10 * time.Second)
	var rep approval.WorkerReport
	for rep.Resumed+rep.Stale == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted worker did not resume the thread: %+v", rep)
		}
		time.Sleep(crashLease / 3)
		if rep, err = a.Worker.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the restarted worker: %+v; decisions %v", rep, a.Statuses())
	snap, err := a.Runnable.GetState(ctx, refunds.ThreadPaid)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != graph.StatusDone || !strings.HasPrefix(demo.LastAnswer(snap.Values.Messages), "Good news, Mia Chen") {
		t.Errorf("after the restart: status %s, answer %q", snap.Status, demo.LastAnswer(snap.Values.Messages))
	}
	if d := cmp.Diff([]string{"RF-0001 A-1001 8990"}, payments(t, shop)); d != "" {
		t.Errorf("after the restart, refund_payments (-want +got):\n%s", d)
	}
	if slices.Contains(a.Statuses(), "issue_refund:executed") {
		t.Errorf("the restarted worker ran issue_refund again: %v", a.Statuses())
	}
	if rec, err = store.Get(ctx, id); err != nil || rec.Resume.At.IsZero() {
		t.Errorf("the approval is not marked resumed: %+v, %v", rec.Resume, err)
	}
}

// testClock is an injected clock a test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRefundHeldByAKilledRun: a run of the program was killed while it
// resumed the approved refund, so its claim on the approval and its lease
// on the thread still hold. Run again at once, the program must not say
// the decision was delivered while the refund is unpaid, nor store a retry
// time from a clock moved for the expiry story (it once saved one hours
// ahead, and the next runs left the refund unpaid for that long): it says
// when to run it again and fails, and a run after the leases pays once.
func TestRefundHeldByAKilledRun(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	a, err := refunds.Open(ctx, refunds.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Start(ctx, refunds.ThreadPaid)
	if err != nil || len(res.Interrupts) != 1 {
		a.Close()
		t.Fatalf("start: %v, %v", res.Status, err)
	}
	id := res.Interrupts[0].ID
	if _, err := a.Inbox.Approve(ctx, id, refunds.ReviewerA, "ok"); err != nil {
		a.Close()
		t.Fatal(err)
	}
	a.Close()
	// What the killed run left behind: its claim on the approval and its
	// lease on the thread, both for held.
	const held = time.Second
	s, shop, store := open(t, db)
	if ok, err := store.ClaimResume(ctx, id, held); err != nil || !ok {
		t.Fatalf("the killed run's claim: %v, %v", ok, err)
	}
	head, err := s.Get(ctx, checkpoint.Ref{Thread: refunds.ThreadPaid}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, checkpoint.Ref{Thread: refunds.ThreadPaid, ID: head.Checkpoint.ID}, checkpoint.Lease{Owner: "killed-run", TTL: held}); err != nil {
		t.Fatalf("the killed run's lease: %v", err)
	}
	heldUntil := time.Now().Add(held)

	var out bytes.Buffer
	_, err = refunds.Run(ctx, refunds.Config{DB: db, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "thread "+refunds.ThreadPaid) || !strings.Contains(err.Error(), "run the program again after") {
		t.Errorf("run while the killed run's leases hold: %v; want an error saying when to run it again\noutput:\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "delivered once") || len(payments(t, shop)) != 0 {
		t.Errorf("the run claims the decision was delivered, with %d payment(s):\n%s", len(payments(t, shop)), out.String())
	}
	rec, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if limit := heldUntil.Add(time.Minute); rec.Resume.NotBefore.After(limit) {
		t.Errorf("the approval's next attempt is stored for %v, after %v: a time from a moved clock", rec.Resume.NotBefore, limit)
	}

	// After the leases, the program finishes both stories and pays once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(held / 2)
		out.Reset()
		c, err := refunds.Run(ctx, refunds.Config{DB: db, Out: &out})
		if err == nil {
			if c.Payments != 1 {
				t.Errorf("%d payments, want 1\n%s", c.Payments, out.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program did not finish after the leases: %v\n%s", err, out.String())
		}
	}
	for _, thread := range []string{refunds.ThreadPaid, refunds.ThreadExpired} {
		if st := status(t, s, thread); st != "done" {
			t.Errorf("%s: status %s, want done", thread, st)
		}
	}
	if d := cmp.Diff([]string{"RF-0001 A-1001 8990"}, payments(t, shop)); d != "" {
		t.Errorf("refund_payments (-want +got):\n%s", d)
	}
}

// abandonRefund leaves in db what a run killed inside issue_refund's body
// leaves: the ledger's intent for the approved refund of ThreadPaid, with
// no outcome and a lease that has lapsed, and, when paid, the payment the
// shop made before the kill.
func abandonRefund(t *testing.T, db string, paid bool) {
	t.Helper()
	ctx := context.Background()
	s, shop, _ := open(t, db)
	args, err := canon.JSON(json.RawMessage(`{"order_id":"A-1001","amount_cents":8990,"reason":"the parcel was lost in transit"}`))
	if err != nil {
		t.Fatal(err)
	}
	key := nodes.IdempotencyKey(refunds.ThreadPaid, "issue_refund", args)
	hash, err := approval.ArgsHash("issue_refund", args)
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, started, err := led.Begin(ctx, ledger.Intent{Key: key, Tool: "issue_refund", ArgsHash: hash, Owner: "killed-run", Lease: time.Minute}); err != nil || !started {
		t.Fatalf("the killed run's intent: %v, %v", started, err)
	}
	if paid {
		if _, err := shop.Refund(ctx, "A-1001", 8990, "the parcel was lost in transit", key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRefundOutcomeUnknown: an earlier run was killed inside the approved
// refund, after or before the shop paid. Run again, the program tells the
// outcome-unknown approval as a step of its story: what it means, and a
// reviewer who checks refund_payments before deciding (never the two
// reviewers' blind race) and says what she found. Either way the refund is
// paid exactly once and the customer is told it was issued.
func TestRefundOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paid  bool
		found string
	}{
		{"paid before the kill", true, "already paid 89.90 EUR for order A-1001, so the earlier attempt did pay"},
		{"killed before the payment", false, "no payment for order A-1001, so the earlier attempt did not pay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := filepath.Join(t.TempDir(), "lockstep.db")
			a, err := refunds.Open(ctx, refunds.Config{DB: db})
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Start(ctx, refunds.ThreadPaid)
			if err != nil || len(res.Interrupts) != 1 {
				a.Close()
				t.Fatalf("start: %v, %v", res.Status, err)
			}
			gate := res.Interrupts[0].ID
			if _, err := a.Inbox.Approve(ctx, gate, refunds.ReviewerB, "lost parcel"); err != nil {
				a.Close()
				t.Fatal(err)
			}
			a.Close()
			abandonRefund(t, db, tc.paid)

			c, out := run(t, db)
			wantLines(t, out,
				"issue_refund: approved",
				"The thread waits again: the approved call found an earlier attempt of itself, stopped inside the call.",
				"asks whether to run issue_refund",
				"again (rule outcome_unknown): an earlier attempt was stopped inside the call, so it may already have paid.",
				refunds.ReviewerA+" checks refund_payments before deciding, for the call's idempotency key ",
				tc.found,
				refunds.ReviewerA+"'s decision is recorded: approved at",
				"Status done. Agent to the customer: Good news, Mia Chen: your refund of 89.90 EUR for order A-1001 has been issued.",
			)
			if strings.Count(out, "click Approve at the same moment") != 0 {
				t.Errorf("the reviewers approved the outcome-unknown request in a blind race:\n%s", out)
			}
			if c.Payments != 1 {
				t.Errorf("%d payments, want 1\n%s", c.Payments, out)
			}
			_, shop, store := open(t, db)
			if d := cmp.Diff([]string{"RF-0001 A-1001 8990"}, payments(t, shop)); d != "" {
				t.Errorf("refund_payments (-want +got):\n%s", d)
			}
			// The second approval's decision says what the reviewer checked.
			page, err := store.Unresumed(ctx, 0)
			if err != nil || len(page) != 0 {
				t.Errorf("unresumed decisions after the run: %+v, %v", page, err)
			}
		})
	}
}
