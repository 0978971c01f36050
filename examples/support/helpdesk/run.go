package helpdesk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// Thread is the example's thread. Every thread of this example starts with
// ThreadPrefix; its approval worker resumes only those.
const (
	Thread       = "support-login-ticket"
	ThreadPrefix = "support-"
)

// Reviewer is the support lead the program plays.
const Reviewer = "Sam Okafor (support lead)"

// Ask is what the user asks the agent.
const Ask = "find the login ticket and close it"

// DefaultDB is the database file the program uses by default, the same as
// the lockstep CLI's.
const DefaultDB = "./lockstep.db"

// Config configures Run.
type Config struct {
	// DB is the SQLite file (created if missing).
	DB string
	// Out receives the narrative (nil: discarded).
	Out io.Writer
	// Now is the clock of approval requests, decisions and closes (nil:
	// time.Now).
	Now func() time.Time
	// Lease is how long a process that died keeps its claim on a thread
	// (the graph's lease) and on an approval it was resuming (the
	// worker's), before another process may take over. Zero means the
	// defaults (graph.DefaultLeaseTTL, and a minute). Crash tests shorten
	// it; the worker then tries a failed resume again after half of it
	// (demo.WorkerOptions).
	Lease time.Duration
}

// Counts is what a run did. Closures is read from helpdesk_closures, so it
// counts every run in every process; the others count this run only.
type Counts struct {
	Closures  int // rows in helpdesk_closures after the run
	Searches  int // searches the helpdesk ran
	CacheHits int // searches answered from the thread's memo instead
	Closed    int // tickets the helpdesk closed
	Approved  int // approvals the reviewer gave
	Resumed   int // threads the approval worker resumed
}

// script is the model: it searches, searches again (a cache hit), closes
// TKT-3 (gated), and answers according to what became of the close.
func script() nodes.Model {
	return demo.Branch([]scripted.Turn{
		scripted.CallTools("Searching for the login ticket.",
			scripted.Call("search-1", "search_tickets", `{"query":"login"}`)).
			Expecting(scripted.ExpectTools("close_ticket", "search_tickets")),
		scripted.CallTools("Let me run that search once more before I close anything.",
			scripted.Call("search-2", "search_tickets", `{"query":"login"}`)).
			Expecting(scripted.ExpectToolResult("search-1", "TKT-3")),
		scripted.CallTools(`TKT-3 ("Login fails after password reset", Fabrikam) is the login ticket, and it is the only match. Closing it as resolved.`,
			scripted.Call("close-1", "close_ticket", `{"ticket_id":"TKT-3","resolution":"The password reset link was fixed; logging in works again."}`)).
			Expecting(scripted.ExpectToolResult("search-2", `"status":"cache_hit"`)),
	}, map[nodes.Status][]scripted.Turn{
		nodes.StatusExecuted: {scripted.Say("Done: TKT-3, \"Login fails after password reset\", is closed, and Fabrikam has the resolution.")},
		nodes.StatusRejected: {scripted.Say("I left TKT-3 open: a support lead rejected closing it.")},
		nodes.StatusExpired:  {scripted.Say("I left TKT-3 open: nobody approved closing it in time.")},
	})
}

// Run plays the example on cfg.DB and tells what happens on cfg.Out: the
// agent searches for "login" (the helpdesk runs the search), searches again
// (answered from the thread's memo: a cache hit), and asks to close TKT-3,
// which is destructive: the thread waits with the approval request. The
// reviewer approves it in the approval inbox, the approval worker resumes
// the thread, and the helpdesk closes TKT-3, once. A thread that already
// finished is not run again.
func Run(ctx context.Context, cfg Config) (_ Counts, err error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{Hook: testhook.From(ctx)}) // a crash test's hook, if ctx carries one
	if err != nil {
		return Counts{}, err
	}
	defer func() { err = errors.Join(err, saver.Close()) }()
	db := saver.DB()
	desk, err := OpenHelpdesk(ctx, db, cfg.Now)
	if err != nil {
		return Counts{}, err
	}
	led, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: saver}) // fenced by the thread's lease (D17)
	if err != nil {
		return Counts{}, err
	}
	store, err := approval.OpenSQLStore(ctx, db, cfg.Now)
	if err != nil {
		return Counts{}, err
	}
	tools, err := Tools(desk)
	if err != nil {
		return Counts{}, err
	}
	log := &demo.DecisionLog{}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())), nodes.WithLedger(led), nodes.WithLogger(log.Logger()))
	if err != nil {
		return Counts{}, err
	}
	agent, err := newAgent(script(), ex, nodes.WithNodeClock(cfg.Now), nodes.WithOutcomeRecorder(store))
	if err != nil {
		return Counts{}, err
	}
	opts := []graph.Option{graph.WithSaver(saver), graph.WithName(GraphName)}
	if cfg.Lease > 0 {
		opts = append(opts, graph.WithLeaseTTL(cfg.Lease))
	}
	r, err := agent.Compile(opts...)
	if err != nil {
		return Counts{}, err
	}
	owns := demo.Prefix(ThreadPrefix)
	inbox := approval.NewInbox(saver, store).ForThreads(owns)
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), demo.WorkerOptions(cfg.Lease, owns))
	if err != nil {
		return Counts{}, err
	}

	p := demo.NewPrinter(cfg.Out)
	p.Printf("lockstep support desk on %s (offline: a scripted model and a fake helpdesk in tables helpdesk_tickets and helpdesk_closures)\n", cfg.DB)
	p.Printf("\nThread %s: %q.\n", Thread, Ask)
	var c Counts
	printEvents := func(from int) {
		for _, e := range log.Events()[from:] {
			p.Printf("    %-15s %-10s %s%s\n", e.Tool+":", e.Status, e.Args, explain(e.Status))
		}
	}
	snap, err := r.GetState(ctx, Thread)
	switch {
	case errors.Is(err, graph.ErrThreadNotFound):
		if _, err := r.Invoke(ctx, Thread, graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: Ask}}}, "Messages")); err != nil {
			return c, err
		}
		printEvents(0)
		if snap, err = r.GetState(ctx, Thread); err != nil {
			return c, err
		}
	case err != nil:
		return c, err
	}
	if snap.Status == graph.StatusFailed || snap.Status == graph.StatusPending {
		p.Printf("  Found it %s (next %v) after an interrupted earlier run: continuing it.\n", snap.Status, snap.Next)
		if _, err := r.Continue(ctx, Thread); err != nil {
			return c, err
		}
		if snap, err = r.GetState(ctx, Thread); err != nil {
			return c, err
		}
	}
	if snap.Status == graph.StatusWaiting {
		p.Printf("  The thread is waiting, not failed: status %s, next %v.\n", snap.Status, snap.Next)
		var approved []string
		for round := 0; ; round++ {
			page, err := inbox.List(ctx, approval.Filter{Thread: Thread})
			if err != nil {
				return c, err
			}
			for _, it := range page.Items {
				req := it.Request
				if req.Kind == approval.KindOutcomeUnknown {
					// Not the first request: whether to run a close again
					// that an earlier run was stopped inside.
					d, err := reviewUnknown(ctx, desk, inbox, p, it)
					if err != nil {
						return c, err
					}
					c.Approved++
					approved = append(approved, it.ID)
					p.Printf("  %s's decision is recorded: %s at %s.\n", d.Reviewer, d.Outcome, d.DecidedAt.UTC().Format(time.RFC3339))
					continue
				}
				p.Printf("  Approval %s asks %s: %s %s (risk %s, rule %s).\n", it.ID, req.Owner, req.Tool, req.Args, req.Risk, req.Rule)
				p.Printf("    The agent's rationale: %q\n", req.Rationale)
				d, err := inbox.Approve(ctx, it.ID, Reviewer, "checked with Fabrikam: login works again")
				if err != nil {
					return c, err
				}
				c.Approved++
				approved = append(approved, it.ID)
				p.Printf("  %s approves it in the approval inbox (at %s).\n", d.Reviewer, d.DecidedAt.UTC().Format(time.RFC3339))
			}
			mark := len(log.Events())
			rep, err := worker.RunOnce(ctx)
			if err != nil {
				return c, err
			}
			c.Resumed += rep.Resumed
			p.Printf("  The approval worker resumes the thread (%d resumed):\n", rep.Resumed)
			printEvents(mark)
			if snap, err = r.GetState(ctx, Thread); err != nil {
				return c, err
			}
			if snap.Status == graph.StatusDone {
				break
			}
			if round == 0 && waitsOnUnknown(snap) {
				p.Printf("  The thread waits again: the approved call found an earlier attempt of itself, stopped inside the call.\n")
				continue
			}
			// An earlier run of the program may have been stopped while it
			// resumed the thread: say so, and when to run again, rather
			// than an answer the thread has not reached.
			rec, why, after, ok, err := demo.Undelivered(ctx, store, demo.TaskInterrupts(snap))
			if err != nil {
				return c, err
			}
			if !ok {
				return c, fmt.Errorf("helpdesk: thread %s is %s, not done; inspect it with lockstep state %s, then run the program again", Thread, snap.Status, Thread)
			}
			p.Printf("  The approval worker could not resume the thread now: the decision on approval %s (%s by %s) is not delivered yet: %s.\n",
				rec.ID, rec.Decision.Outcome, rec.Decision.Reviewer, why)
			return c, fmt.Errorf("helpdesk: thread %s is %s: approval %s is decided but not delivered yet; run the program again after %s (lockstep state %s shows why it waits)",
				Thread, snap.Status, rec.ID, after.UTC().Format(time.RFC3339), Thread)
		}
		p.Printf("  Status %s. Agent: %s\n", snap.Status, demo.LastAnswer(snap.Values.Messages))
		for _, id := range approved {
			tr, err := store.Audit(ctx, id)
			if err != nil {
				return c, err
			}
			if e := tr.Execution; e != nil {
				p.Printf("  Audit of approval %s: %s by %s; ran under idempotency key %.12s…, result %s.\n", id, tr.Decision.Outcome, tr.Decision.Reviewer, e.IdempotencyKey, e.Result)
			}
		}
	} else {
		p.Printf("  Already finished (status %s): nothing runs again, nothing is closed twice.\n  Agent: %s\n", snap.Status, demo.LastAnswer(snap.Values.Messages))
	}

	c.Searches, c.Closed = desk.Searches(), desk.Closes()
	c.CacheHits = log.Count("search_tickets", nodes.StatusCacheHit)
	if c.Closures, err = desk.Closures(ctx); err != nil {
		return c, err
	}
	p.Printf("\nThis run: the helpdesk ran %d search(es), the memo answered %d, and %d ticket(s) were closed. helpdesk_closures holds %d close(s).\n",
		c.Searches, c.CacheHits, c.Closed, c.Closures)
	return c, p.Err()
}

// waitsOnUnknown reports whether the thread of snap waits on an
// outcome-unknown approval request.
func waitsOnUnknown(snap graph.Snapshot[nodes.AgentState]) bool {
	for _, in := range snap.Interrupts {
		if req, ok, err := approval.ParseRequest(in.Value); ok && err == nil && req.Kind == approval.KindOutcomeUnknown {
			return true
		}
	}
	return false
}

// reviewUnknown is the careful review of an outcome-unknown request: an
// earlier attempt of the close was stopped inside the call, so the ticket
// may already be closed, and the agent's rationale was written before it.
// The support lead looks in helpdesk_closures for a close under the
// call's idempotency key (nodes.IdempotencyKey of the thread, the tool and
// the arguments) before deciding, says what was found, and approves: when
// there is none the earlier attempt did not close the ticket, and running
// the call again closes it once; when there is one, running it again
// reuses the key, which the helpdesk answers with that close instead of
// closing twice.
func reviewUnknown(ctx context.Context, desk *Helpdesk, inbox *approval.Inbox, p *demo.Printer, it approval.Item) (approval.Decision, error) {
	req := it.Request
	var args CloseArgs
	if err := json.Unmarshal(req.Args, &args); err != nil {
		return approval.Decision{}, fmt.Errorf("helpdesk: approval %s: arguments: %w", it.ID, err)
	}
	p.Printf("  Approval %s asks whether to run %s %s again (rule %s): an earlier attempt was stopped inside the call, so the ticket may already be closed. Its outcome is unknown, and the agent's rationale was written before it.\n",
		it.ID, req.Tool, req.Args, req.Rule)
	key := nodes.IdempotencyKey(it.Thread, req.Tool, req.Args)
	cl, found, err := desk.ClosureByKey(ctx, key)
	if err != nil {
		return approval.Decision{}, err
	}
	note := "checked helpdesk_closures: no close of " + args.TicketID + " under this call's key; run it again"
	if found {
		p.Printf("  %s checks helpdesk_closures before deciding, for the call's idempotency key %.12s…: %s was closed at %s, so the earlier attempt did close it. Running the call again reuses that key, which the helpdesk answers with that close instead of closing twice: approving it lets the agent tell the customer.\n",
			Reviewer, key, cl.Ticket, cl.ClosedAt)
		note = "checked helpdesk_closures: " + cl.Ticket + " was closed at " + cl.ClosedAt + "; running it again under the same key returns that close"
	} else {
		p.Printf("  %s checks helpdesk_closures before deciding, for the call's idempotency key %.12s…: no close of %s, so the earlier attempt did not close it: approving runs it again.\n",
			Reviewer, key, args.TicketID)
	}
	return inbox.Approve(ctx, it.ID, Reviewer, note)
}

// explain says in words what a decision status means here.
func explain(st nodes.Status) string {
	switch st {
	case nodes.StatusExecuted:
		return " (the helpdesk was called)"
	case nodes.StatusCacheHit:
		return " (the same search, answered from the thread's memo: the helpdesk was not called)"
	case nodes.StatusBlocked:
		return " (destructive: waits for a human)"
	case nodes.StatusApproved:
		return " (a human approved exactly these arguments)"
	}
	return ""
}
