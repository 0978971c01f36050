package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// askState drives a graph whose only node asks whatever question the
// state holds: an approval request, or any other value.
type askState struct {
	Question json.RawMessage
	Answer   approval.Decision
}

func newAsker(t testing.TB) (*graph.Runnable[askState], *checkpoint.MemorySaver) {
	t.Helper()
	saver := checkpoint.NewMemorySaver(nil)
	r, err := graph.New[askState]().
		AddNode("ask", func(ctx context.Context, s askState) (graph.Update[askState], error) {
			d, err := interrupt.Ask[approval.Decision](ctx, s.Question)
			if err != nil {
				return graph.Update[askState]{}, err
			}
			return graph.Set(askState{Answer: d}, "Answer"), nil
		}).
		AddEdge(graph.START, "ask").
		AddEdge("ask", graph.END).
		Compile(graph.WithSaver(saver))
	if err != nil {
		t.Fatal(err)
	}
	return r, saver
}

func ask(t testing.TB, r *graph.Runnable[askState], thread string, question any) string {
	t.Helper()
	q, err := json.Marshal(question)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), thread, graph.Set(askState{Question: q}, "Question"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Interrupts) != 1 {
		t.Fatalf("thread %s: %d interrupts", thread, len(res.Interrupts))
	}
	return res.Interrupts[0].ID
}

func requestFor(t testing.TB, tool, owner string, created time.Time, ttl time.Duration) approval.Request {
	t.Helper()
	args := json.RawMessage(`{"target":"x"}`)
	h, err := approval.ArgsHash(tool, args)
	if err != nil {
		t.Fatal(err)
	}
	return approval.Request{Type: approval.RequestType, Tool: tool, Args: args, ArgsHash: h, CallID: "c-" + tool,
		Rationale: "because", Risk: approval.RiskHigh, Rule: "risk:high", Owner: owner, CreatedAt: created, ExpiresAt: created.Add(ttl)}
}

func threads(items []approval.Item) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Thread)
	}
	return out
}

// TestInboxList: the pending approvals of several threads, oldest first,
// filtered by tool, owner, thread, age and nearness of expiry, paged with a
// cursor; other interrupts and undecodable requests are left out; decided
// and expired approvals leave the list.
func TestInboxList(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	r, saver := newAsker(t)
	in := approval.NewInbox(saver, store)

	reqs := map[string]approval.Request{
		"t0": requestFor(t, "refund", "payments", epoch, time.Hour),
		"t1": requestFor(t, "send_email", "support", epoch.Add(time.Minute), 10*time.Minute),
		"t2": requestFor(t, "refund", "payments", epoch.Add(2*time.Minute), 24*time.Hour),
		"t3": requestFor(t, "delete_account", "security", epoch.Add(3*time.Minute), 2*time.Hour),
		"t5": requestFor(t, "refund", "payments", epoch.Add(4*time.Minute), time.Hour),
	}
	low := reqs["t1"]
	low.Risk = approval.RiskLow
	reqs["t1"] = low
	id := map[string]string{}
	for _, th := range []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"} {
		switch th {
		case "t4":
			id[th] = ask(t, r, th, "what is your name?") // not an approval
		case "t6":
			id[th] = ask(t, r, th, map[string]any{"type": approval.RequestType, "tool": 5}) // does not decode
		default:
			id[th] = ask(t, r, th, reqs[th])
		}
	}
	clock.Set(epoch.Add(5 * time.Minute))

	tests := []struct {
		name string
		f    approval.Filter
		want []string
	}{
		{"all", approval.Filter{}, []string{"t0", "t1", "t2", "t3", "t5"}},
		{"tool", approval.Filter{Tool: "refund"}, []string{"t0", "t2", "t5"}},
		{"owner", approval.Filter{Owner: "support"}, []string{"t1"}},
		{"thread", approval.Filter{Thread: "t3"}, []string{"t3"}},
		{"risk tier", approval.Filter{Risk: approval.RiskLow}, []string{"t1"}},
		{"another risk tier", approval.Filter{Risk: approval.RiskHigh}, []string{"t0", "t2", "t3", "t5"}},
		{"a tier none has", approval.Filter{Risk: approval.RiskCritical}, []string{}},
		{"risk tier and tool", approval.Filter{Risk: approval.RiskHigh, Tool: "refund", Limit: 1}, []string{"t0", "t2", "t5"}},
		{"min age", approval.Filter{MinAge: 3 * time.Minute}, []string{"t0", "t1", "t2"}},
		{"expiring soon", approval.Filter{ExpiringWithin: 10 * time.Minute}, []string{"t1"}},
		{"expiring within the hour", approval.Filter{ExpiringWithin: time.Hour}, []string{"t0", "t1", "t5"}},
		{"tool and age", approval.Filter{Tool: "refund", MinAge: 3 * time.Minute}, []string{"t0", "t2"}},
		{"no match", approval.Filter{Tool: "wire_transfer"}, []string{}},
		{"pages of 2", approval.Filter{Limit: 2}, []string{"t0", "t1", "t2", "t3", "t5"}},
		{"pages of 1 of one tool", approval.Filter{Tool: "refund", Limit: 1}, []string{"t0", "t2", "t5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := threads(allPending(t, in, tc.f))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("page shapes", func(t *testing.T) {
		var pages [][]string
		f := approval.Filter{Limit: 2}
		for {
			p, err := in.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, threads(p.Items))
			if p.Next == "" {
				break
			}
			f.Cursor = p.Next
		}
		if diff := cmp.Diff([][]string{{"t0", "t1"}, {"t2", "t3"}, {"t5"}}, pages); diff != "" {
			t.Errorf("pages (-want +got):\n%s", diff)
		}
	})

	t.Run("item", func(t *testing.T) {
		got, err := in.Get(ctx, id["t1"])
		if err != nil {
			t.Fatal(err)
		}
		want := approval.Item{ID: id["t1"], Thread: "t1", Node: "ask", Request: reqs["t1"]}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(approval.Item{}, "Checkpoint", "TaskID", "PausedAt")); diff != "" {
			t.Errorf("Get (-want +got):\n%s", diff)
		}
		if got.Checkpoint == "" || got.TaskID == "" || got.PausedAt.IsZero() {
			t.Errorf("Get: missing where the thread waits: %+v", got)
		}
	})

	// Decided approvals leave the list; so do expired ones.
	if _, err := in.Approve(ctx, id["t2"], "alice", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Reject(ctx, id["t3"], "bob", ""); err != nil {
		t.Fatal(err)
	}
	clock.Set(epoch.Add(11 * time.Minute)) // t1 expired
	p, err := in.List(ctx, approval.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"t0", "t5"}, threads(p.Items)); diff != "" {
		t.Errorf("after deciding t2 and t3 and t1 expiring (-want +got):\n%s", diff)
	}
	// Listing saw t1 expired, so it recorded the expiry.
	if p.Expired != 1 {
		t.Errorf("List recorded %d expiries, want 1 (t1)", p.Expired)
	}
	if rec, err := store.Get(ctx, id["t1"]); err != nil || rec.Decision.Outcome != approval.Expired || rec.Decision.Reviewer != approval.ExpiryReviewer {
		t.Errorf("t1 after List saw it expired: %+v, %v; want recorded as expired by %s", rec.Decision, err, approval.ExpiryReviewer)
	}
	// The sweeper rejects t6 (undecodable), and leaves the plain question
	// alone.
	rep, err := in.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(approval.SweepReport{Expired: 1, Invalid: 1}, rep); diff != "" {
		t.Errorf("sweep (-want +got):\n%s", diff)
	}
	if _, err := store.Get(ctx, id["t4"]); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("the plain question was decided: %v", err)
	}
	w := newWorker(t, store, approval.ResumeGraph(r), approval.WorkerOptions{})
	if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 4 {
		t.Fatalf("worker: %+v, %v", rep, err)
	}
	for th, want := range map[string]approval.Outcome{"t1": approval.Expired, "t2": approval.Approved, "t3": approval.Rejected, "t6": approval.Expired} {
		s, err := r.GetState(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != graph.StatusDone || s.Values.Answer.Outcome != want {
			t.Errorf("thread %s: %s with %q, want done with %q", th, s.Status, s.Values.Answer.Outcome, want)
		}
	}
}

// TestInboxInvalid (R38 through the inbox): unknown IDs, IDs of other
// interrupts, decided approvals, bad filters and cursors fail with typed
// errors and change nothing.
func TestInboxInvalid(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	db, _ := tempDB(t)
	store := openSQLStore(t, db, clock.Now)
	r, saver := newAsker(t)
	in := approval.NewInbox(saver, store)
	pending := ask(t, r, "p", requestFor(t, "refund", "payments", epoch, time.Hour))
	decided := ask(t, r, "d", requestFor(t, "refund", "payments", epoch, time.Hour))
	question := ask(t, r, "q", "what is your name?")
	if _, err := in.Approve(ctx, decided, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	before := dumpTables(t, db)

	calls := []struct {
		name string
		call func() error
		want error
	}{
		{"decide unknown ID", func() error { _, err := in.Approve(ctx, "no-such-approval", "alice", ""); return err }, approval.ErrNotFound},
		{"decide empty ID", func() error { _, err := in.Approve(ctx, "", "alice", ""); return err }, approval.ErrNotFound},
		{"decide a plain question", func() error { _, err := in.Approve(ctx, question, "alice", ""); return err }, approval.ErrNotFound},
		{"decide again", func() error { _, err := in.Reject(ctx, decided, "bob", ""); return err }, approval.ErrAlreadyDecided},
		{"get unknown ID", func() error { _, err := in.Get(ctx, "no-such-approval"); return err }, approval.ErrNotFound},
		{"get decided", func() error { _, err := in.Get(ctx, decided); return err }, approval.ErrAlreadyDecided},
		{"reviewer expires", func() error {
			_, err := in.Decide(ctx, pending, approval.Verdict{Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer})
			return err
		}, approval.ErrInvalidDecision},
		{"outcome yes", func() error {
			_, err := in.Decide(ctx, pending, approval.Verdict{Outcome: "yes", Reviewer: "alice"})
			return err
		}, approval.ErrInvalidDecision},
		{"no reviewer", func() error { _, err := in.Approve(ctx, pending, "", ""); return err }, approval.ErrInvalidDecision},
		{"edit to another tool", func() error {
			_, err := in.Decide(ctx, pending, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Tool: "wire_transfer", Args: json.RawMessage(`{"target":"y"}`)})
			return err
		}, approval.ErrInvalidArgs},
		{"negative limit", func() error { _, err := in.List(ctx, approval.Filter{Limit: -1}); return err }, approval.ErrInvalidFilter},
		{"limit too large", func() error { _, err := in.List(ctx, approval.Filter{Limit: approval.MaxPageSize + 1}); return err }, approval.ErrInvalidFilter},
		{"negative age", func() error { _, err := in.List(ctx, approval.Filter{MinAge: -time.Second}); return err }, approval.ErrInvalidFilter},
		{"unknown risk tier", func() error { _, err := in.List(ctx, approval.Filter{Risk: "severe"}); return err }, approval.ErrInvalidFilter},
		{"garbage cursor", func() error { _, err := in.List(ctx, approval.Filter{Cursor: "garbage"}); return err }, approval.ErrInvalidFilter},
		{"oversized tool", func() error {
			_, err := in.List(ctx, approval.Filter{Tool: strings.Repeat("t", approval.MaxFilterBytes+1)})
			return err
		}, approval.ErrInvalidFilter},
		{"oversized owner", func() error {
			_, err := in.List(ctx, approval.Filter{Owner: strings.Repeat("o", approval.MaxFilterBytes+1)})
			return err
		}, approval.ErrInvalidFilter},
		{"oversized thread", func() error {
			_, err := in.List(ctx, approval.Filter{Thread: strings.Repeat("t", approval.MaxFilterBytes+1)})
			return err
		}, approval.ErrInvalidFilter},
		{"cursor the saver refuses", func() error { _, err := in.List(ctx, approval.Filter{Cursor: "c1.eHl6"}); return err }, approval.ErrInvalidFilter},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if diff := cmp.Diff(before, dumpTables(t, db)); diff != "" {
				t.Errorf("tables changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestAuditTrail: the trail of a refund says who approved what and when,
// what they were shown, when the thread resumed, and what ran with its
// result.
func TestAuditTrail(t *testing.T) {
	onEveryStore(t, func(t *testing.T, dk desk) {
		ctx, clock, store, f, in := context.Background(), dk.clock, dk.store, dk.f, dk.in
		id := f.start(t, "audit", "order-77", 120)
		shown, err := in.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		clock.Add(10 * time.Minute)
		d, err := in.Edit(ctx, id, "alice@example.com", json.RawMessage(`{"order":"order-77","amount":100}`), "cap at 100")
		if err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Minute)
		w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
		if rep, err := w.RunOnce(ctx); err != nil || rep.Resumed != 1 {
			t.Fatalf("worker: %+v, %v", rep, err)
		}
		got, err := store.Audit(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := approval.Trail{
			Record: approval.Record{
				ID: id, Thread: "audit", Checkpoint: shown.Checkpoint, Request: shown.Request,
				Decision: approval.Decision{ID: id, Outcome: approval.Edited, Reviewer: "alice@example.com", Note: "cap at 100",
					Args: json.RawMessage(`{"amount":100,"order":"order-77"}`), ArgsHash: d.ArgsHash, DecidedAt: epoch.Add(10 * time.Minute)},
				Resume: approval.Resume{At: epoch.Add(11 * time.Minute), Note: "resumed"},
			},
			Execution: &approval.Execution{IdempotencyKey: "refund:order-77", ArgsHash: d.ArgsHash,
				Result: json.RawMessage(`{"refunded":100}`), At: epoch.Add(11 * time.Minute)},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Audit (-want +got):\n%s", diff)
		}
		// What was shown is what the model asked: tool, exact arguments
		// and hash, rationale, context, risk, rule, owner, times.
		var args refundArgs
		if err := json.Unmarshal(got.Request.Args, &args); err != nil || args != (refundArgs{Order: "order-77", Amount: 120}) {
			t.Errorf("shown arguments %s", got.Request.Args)
		}
		if got.Request.Rationale == "" || len(got.Request.Context) == 0 || got.Request.Owner != "payments" || got.Request.ExpiresAt.IsZero() {
			t.Errorf("the snapshot lost what was shown: %+v", got.Request)
		}
	})
}

// TestInboxContainsForThreads: the ForThreads filter is the application's
// code. One that panics on a thread owns it not: the inbox lists, gets
// and sweeps the other threads' approvals as before, and the panic goes
// no further.
func TestInboxContainsForThreads(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	store := approval.NewMemoryStore(clock.Now)
	r, saver := newAsker(t)
	idA := ask(t, r, "ta", requestFor(t, "refund", "payments", epoch, time.Hour))
	idB := ask(t, r, "tb", requestFor(t, "refund", "payments", epoch, time.Hour))
	in := approval.NewInbox(saver, store).ForThreads(func(thread string) bool {
		if thread == "tb" {
			panic("no owner table")
		}
		return true
	})
	if got := threads(allPending(t, in, approval.Filter{})); !cmp.Equal(got, []string{"ta"}) {
		t.Errorf("List: %v, want only ta", got)
	}
	if _, err := in.Get(ctx, idA); err != nil {
		t.Errorf("Get of ta's approval: %v", err)
	}
	if _, err := in.Get(ctx, idB); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("Get of tb's approval: %v, want ErrNotFound (not this inbox's)", err)
	}
	clock.Set(epoch.Add(2 * time.Hour))
	rep, err := in.Sweep(ctx)
	if err != nil || rep.Expired != 1 {
		t.Errorf("Sweep: %+v, %v; want ta's approval expired, tb's left", rep, err)
	}
	if _, err := store.Get(ctx, idB); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("tb's approval after the sweep: %v, want undecided", err)
	}
}
