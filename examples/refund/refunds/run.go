package refunds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// The two reviewers of the payments team, who click at the same moment.
const (
	ReviewerA = "Alice Moreau"
	ReviewerB = "Bilal Haddad"
)

// Counts is what a run did. Payments is read from refund_payments, so it
// counts every run in every process; the others count this run only.
type Counts struct {
	Payments int // rows in refund_payments after the run
	Paid     int // refunds this run paid
	Decided  int // reviewers' decisions recorded (race winners)
	Lost     int // reviewers' clicks refused because someone decided first
	Expired  int // requests the expiry sweeper rejected
	Resumed  int // threads the approval worker resumed
	Restarts int // simulated crashes and restarts
}

// Run plays the example on cfg.DB and tells what happens on cfg.Out:
//
//  1. Thread ThreadPaid: Mia Chen asks for a refund; the agent looks the
//     order up and asks to refund it, with its rationale; the request
//     waits for the payments team, with the customer, the order and her
//     history for context. ReviewerA and ReviewerB approve it at the same
//     moment (two goroutines): one decision is recorded, the other
//     reviewer is told who won. The process then "dies" before any worker
//     resumed the thread (simulated: Run closes its App and opens a new
//     one on the file, as a restarted process would), and the new App's
//     worker resumes the thread with the recorded decision: paid once. A
//     second worker pass finds nothing to do.
//  2. Thread ThreadExpired: Leo Park asked Asked ago (simulated: the
//     agent's clock is set back by Asked while it handles his request, so
//     nothing sleeps) and nobody decided within TTL. The sweeper rejects
//     the expired request, the worker resumes the thread, and the agent
//     tells Leo his refund was not approved in time and what happens next.
//
// A thread that already finished is not run again: a second run pays
// nothing. When a thread cannot be finished now (an earlier run of the
// program was killed while it resumed the thread, and its claim or lease
// still holds it), Run says so and returns an error that says when to run
// it again; it never reports a decision delivered that was not.
func Run(ctx context.Context, cfg Config) (_ Counts, err error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	p := demo.NewPrinter(out)
	var c Counts
	a, err := Open(ctx, cfg)
	if err != nil {
		return c, err
	}
	defer func() {
		if a != nil {
			err = errors.Join(err, a.Close())
		}
	}()
	before, err := a.Shop.Payments(ctx)
	if err != nil {
		return c, err
	}
	p.Printf("lockstep refund desk on %s (offline: a scripted model and a fake shop in tables shop_orders and refund_payments)\n", cfg.DB)
	if a, err = paidStory(ctx, a, cfg, p, &c); err != nil {
		return c, err
	}
	if err := expiryStory(ctx, a, p, &c); err != nil {
		return c, err
	}
	after, err := a.Shop.Payments(ctx)
	if err != nil {
		return c, err
	}
	c.Payments, c.Paid = len(after), len(after)-len(before)
	p.Printf("\nrefund_payments holds %d payment(s)", len(after))
	for i, pay := range after {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		p.Printf("%s%s (%s, %s)", sep, pay.ID, pay.Order, Euros(pay.AmountCents))
	}
	p.Printf(". This run paid %d. Running it again pays nothing twice.\n", c.Paid)
	return c, p.Err()
}

// begin prints a story's opening and starts its thread if it has not
// started yet, or continues it from where an interrupted earlier run left
// it (demo.Continue). It returns the thread's snapshot.
func begin(ctx context.Context, a *App, s story, p *demo.Printer) (graph.Snapshot[nodes.AgentState], error) {
	p.Printf("\nThread %s: %q\n", s.thread, s.ask)
	snap, err := a.Runnable.GetState(ctx, s.thread)
	switch {
	case errors.Is(err, graph.ErrThreadNotFound):
		mark := len(a.log.Events())
		if _, err := a.Start(ctx, s.thread); err != nil {
			return graph.Snapshot[nodes.AgentState]{}, err
		}
		printEvents(p, a, mark)
	case err != nil:
		return graph.Snapshot[nodes.AgentState]{}, err
	case demo.Stopped(snap.Status):
		mark := len(a.log.Events())
		snap, err = demo.Continue(ctx, a.Runnable, p, s.thread, snap)
		printEvents(p, a, mark)
		return snap, err
	}
	return a.Runnable.GetState(ctx, s.thread)
}

// printEvents prints the executor's decisions from mark on.
func printEvents(p *demo.Printer, a *App, mark int) {
	for _, e := range a.log.Events()[mark:] {
		p.Printf("    %s: %s\n", e.Tool, e.Status)
	}
}

// done prints the end of a finished thread.
func done(p *demo.Printer, snap graph.Snapshot[nodes.AgentState]) {
	p.Printf("  Already finished (status done): nothing runs again, nothing is paid twice.\n  Agent to the customer: %s\n", demo.LastAnswer(snap.Values.Messages))
}

// showRequest prints a pending refund request as the reviewers see it.
func showRequest(p *demo.Printer, it approval.Item) {
	req := it.Request
	p.Printf("  The thread is waiting, not failed. Approval %s asks %s: %s %s (risk %s), expires %s.\n",
		it.ID, req.Owner, req.Tool, req.Args, req.Risk, req.ExpiresAt.UTC().Format(time.RFC3339))
	p.Printf("    The agent's rationale: %q\n", req.Rationale)
	var rc ReviewContext
	if json.Unmarshal(req.Context, &rc) == nil {
		p.Printf("    Context: %s <%s>; order %s, %s, %s, placed %s; history: %d order(s), %d refund(s).\n",
			rc.Customer, rc.Email, rc.Order.ID, rc.Order.Item, Euros(rc.Order.AmountCents), rc.Order.PlacedOn, rc.History.Orders, rc.History.Refunds)
	}
}

// paidStory is the first story. It returns the App to go on with: a new
// one, after the simulated crash and restart.
func paidStory(ctx context.Context, a *App, cfg Config, p *demo.Printer, c *Counts) (*App, error) {
	s := stories()[0]
	snap, err := begin(ctx, a, s, p)
	if err != nil {
		return a, err
	}
	if snap.Status == graph.StatusDone {
		done(p, snap)
		return a, nil
	}
	page, err := a.Inbox.List(ctx, approval.Filter{Thread: s.thread})
	if err != nil {
		return a, err
	}
	for _, it := range page.Items {
		if it.Request.Kind == approval.KindOutcomeUnknown {
			if err := reviewUnknown(ctx, a, p, it, c); err != nil {
				return a, err
			}
			continue
		}
		showRequest(p, it)
		cl, err := race(ctx, a.Inbox, it.ID)
		if err != nil {
			return a, err
		}
		p.Printf("  %s and %s click Approve at the same moment (two goroutines, Inbox.Approve).\n", ReviewerA, ReviewerB)
		if cl.Recorded {
			c.Decided++
			p.Printf("  %s's decision is recorded: %s at %s.\n", cl.Winner.Reviewer, cl.Winner.Outcome, cl.Winner.DecidedAt.UTC().Format(time.RFC3339))
		}
		for _, who := range []string{ReviewerA, ReviewerB} {
			if told, ok := cl.Told[who]; ok {
				c.Lost++
				p.Printf("  %s is told: %v.\n", who, told)
			}
		}
	}

	// The crash: this process stops before a worker resumed the thread.
	p.Printf("  The process \"dies\" now, after the decision and before any worker resumed the thread (simulated: the program drops everything it holds and closes the file).\n")
	if err := a.Close(); err != nil {
		return nil, err
	}
	c.Restarts++
	if a, err = Open(ctx, cfg); err != nil {
		return nil, err
	}
	if snap, err = a.Runnable.GetState(ctx, s.thread); err != nil {
		return a, err
	}
	unresumed, err := demo.Unresumed(ctx, a.Store, demo.Prefix(ThreadPrefix))
	if err != nil {
		return a, err
	}
	p.Printf("  Restarted: the program opens %s again, as a new process would. The thread is %s; %d decision(s) wait to be resumed.\n", cfg.DB, snap.Status, len(unresumed))
	for round := 0; ; round++ {
		mark := len(a.log.Events())
		rep, err := a.Worker.RunOnce(ctx)
		if err != nil {
			return a, err
		}
		c.Resumed += rep.Resumed
		p.Printf("  Its approval worker resumes %d thread(s):\n", rep.Resumed)
		printEvents(p, a, mark)
		if snap, err = a.Runnable.GetState(ctx, s.thread); err != nil {
			return a, err
		}
		if snap.Status == graph.StatusDone {
			break
		}
		// The resumed call may find that an earlier run was stopped inside
		// it: the thread then waits again, on whether to run it again.
		page, err := a.Inbox.List(ctx, approval.Filter{Thread: s.thread})
		if err != nil {
			return a, err
		}
		unknown := slices.DeleteFunc(page.Items, func(it approval.Item) bool { return it.Request.Kind != approval.KindOutcomeUnknown })
		if len(unknown) == 0 || round > 0 {
			return a, notFinished(ctx, a, p, s.thread, snap)
		}
		p.Printf("  The thread waits again: the approved call found an earlier attempt of itself, stopped inside the call.\n")
		for _, it := range unknown {
			if err := reviewUnknown(ctx, a, p, it, c); err != nil {
				return a, err
			}
		}
	}
	p.Printf("  Status %s. Agent to the customer: %s\n", snap.Status, demo.LastAnswer(snap.Values.Messages))
	rep, err := a.Worker.RunOnce(ctx)
	if err != nil {
		return a, err
	}
	p.Printf("  A second worker pass resumes %d thread(s): the decision was delivered once.\n", rep.Resumed)
	return a, nil
}

// reviewUnknown is the careful review of an outcome-unknown request: an
// earlier attempt of the refund was stopped inside the call, so it may
// already have paid, and the agent's rationale was written before it.
// ReviewerA looks in refund_payments for a payment under the call's
// idempotency key (nodes.IdempotencyKey of the thread, the tool and the
// arguments: the key it ran, and runs again, under) before deciding.
// Either way she approves, and says why: when there is none the earlier
// attempt did not pay, and running the call again pays once; when there
// is one, running it again reuses the key, which the shop answers with
// that payment instead of paying twice, and the agent can tell the
// customer. (A service that did not deduplicate by key would call for a
// rejection saying what happened.)
func reviewUnknown(ctx context.Context, a *App, p *demo.Printer, it approval.Item, c *Counts) error {
	req := it.Request
	var args RefundArgs
	if err := json.Unmarshal(req.Args, &args); err != nil {
		return fmt.Errorf("refunds: approval %s: arguments: %w", it.ID, err)
	}
	p.Printf("  Approval %s asks whether to run %s %s again (rule %s): an earlier attempt was stopped inside the call, so it may already have paid. Its outcome is unknown, and the agent's rationale was written before it.\n",
		it.ID, req.Tool, req.Args, req.Rule)
	key := nodes.IdempotencyKey(it.Thread, req.Tool, req.Args)
	pay, found, err := a.Shop.PaymentByKey(ctx, key)
	if err != nil {
		return err
	}
	var note string
	if found {
		p.Printf("  %s checks refund_payments before deciding, for the call's idempotency key %.12s…: %s already paid %s for order %s, so the earlier attempt did pay. Running the call again reuses that key, which the shop answers with that payment instead of paying twice: she approves, so that the agent can tell the customer.\n",
			ReviewerA, key, pay.ID, Euros(pay.AmountCents), pay.Order)
		note = "checked refund_payments: " + pay.ID + " already paid this; running it again under the same key returns it"
	} else {
		p.Printf("  %s checks refund_payments before deciding, for the call's idempotency key %.12s…: no payment for order %s, so the earlier attempt did not pay. She approves running it again.\n",
			ReviewerA, key, args.OrderID)
		note = "checked refund_payments: no payment for " + args.OrderID + " under this call's key; run it again"
	}
	d, err := a.Inbox.Approve(ctx, it.ID, ReviewerA, note)
	var won *approval.AlreadyDecidedError
	switch {
	case errors.As(err, &won):
		c.Lost++
		p.Printf("  %s is told: %v.\n", ReviewerA, won)
		return nil
	case err != nil:
		return err
	}
	c.Decided++
	p.Printf("  %s's decision is recorded: %s at %s.\n", d.Reviewer, d.Outcome, d.DecidedAt.UTC().Format(time.RFC3339))
	return nil
}

// clicks is what became of the reviewers' simultaneous clicks.
type clicks struct {
	// Winner is the decision recorded for the approval.
	Winner approval.Decision
	// Recorded says whether one of the clicks recorded it (false when
	// someone else had decided first).
	Recorded bool
	// Told maps each reviewer whose click was refused to what they were
	// told.
	Told map[string]*approval.AlreadyDecidedError
}

// race has both reviewers approve approval id at the same moment (two
// goroutines calling Inbox.Approve).
func race(ctx context.Context, inbox *approval.Inbox, id string) (clicks, error) {
	reviewers := [...]struct{ name, note string }{
		{ReviewerA, "the carrier confirmed the loss"},
		{ReviewerB, "lost parcel, first refund for this customer"},
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		decs  [len(reviewers)]approval.Decision
		errs  [len(reviewers)]error
	)
	for i, r := range reviewers {
		wg.Go(func() {
			<-start
			decs[i], errs[i] = inbox.Approve(ctx, id, r.name, r.note)
		})
	}
	close(start)
	wg.Wait()
	out := clicks{Told: map[string]*approval.AlreadyDecidedError{}}
	for i, err := range errs {
		var ad *approval.AlreadyDecidedError
		switch {
		case err == nil:
			out.Winner, out.Recorded = decs[i], true
		case errors.As(err, &ad):
			out.Told[reviewers[i].name] = ad
			if !out.Recorded {
				out.Winner = ad.Winner
			}
		default:
			return clicks{}, err
		}
	}
	return out, nil
}

// Asked is how long ago Leo Park asked for his refund, in the expiry
// story: longer than TTL, so that his request has expired when the story
// looks at it.
const Asked = TTL + time.Hour

// expiryStory is the second story.
func expiryStory(ctx context.Context, a *App, p *demo.Printer, c *Counts) error {
	s := stories()[1]
	var snap graph.Snapshot[nodes.AgentState]
	err := a.asIfAgo(Asked, func() (err error) {
		snap, err = begin(ctx, a, s, p)
		return err
	})
	if err != nil {
		return err
	}
	if snap.Status == graph.StatusDone {
		done(p, snap)
		return nil
	}
	p.Printf("  Leo asked %v ago (simulated: the agent's clock was set back by that much while it handled his request; no lease or retry time is), and nobody decided within the request's %v.\n", Asked, TTL)
	// The request as the thread holds it: asking the inbox would already
	// record its expiry.
	for _, in := range snap.Interrupts {
		if req, ok, err := approval.ParseRequest(in.Value); ok && err == nil {
			showRequest(p, approval.Item{ID: in.ID, Thread: s.thread, Request: req})
		}
	}
	sw, err := a.Inbox.Sweep(ctx)
	if err != nil {
		return err
	}
	c.Expired += sw.Expired
	p.Printf("  The expiry sweeper rejects %d expired request(s) as %s (expiry means reject, never approve).\n", sw.Expired, approval.ExpiryReviewer)
	mark := len(a.log.Events())
	rep, err := a.Worker.RunOnce(ctx)
	if err != nil {
		return err
	}
	c.Resumed += rep.Resumed
	p.Printf("  The approval worker resumes %d thread(s):\n", rep.Resumed)
	printEvents(p, a, mark)
	if snap, err = a.Runnable.GetState(ctx, s.thread); err != nil {
		return err
	}
	if snap.Status != graph.StatusDone {
		return notFinished(ctx, a, p, s.thread, snap)
	}
	p.Printf("  Status %s. Agent to the customer: %s\n", snap.Status, demo.LastAnswer(snap.Values.Messages))
	return nil
}

// notFinished says why the approval worker did not finish the thread of
// snap, and returns the error Run ends with: when to run the program
// again, and how to look at the thread meanwhile.
func notFinished(ctx context.Context, a *App, p *demo.Printer, thread string, snap graph.Snapshot[nodes.AgentState]) error {
	rec, why, after, ok, err := demo.Undelivered(ctx, a.Store, demo.TaskInterrupts(snap))
	if err != nil {
		return err
	}
	if !ok {
		p.Printf("  The thread is %s, not done.\n", snap.Status)
		return fmt.Errorf("refunds: thread %s is %s, not done; inspect it with lockstep state %s, then run the program again", thread, snap.Status, thread)
	}
	p.Printf("  The approval worker could not resume the thread now: the decision on approval %s (%s by %s) is not delivered yet: %s.\n",
		rec.ID, rec.Decision.Outcome, rec.Decision.Reviewer, why)
	return fmt.Errorf("refunds: thread %s is %s: approval %s is decided but not delivered yet; run the program again after %s (lockstep state %s shows why it waits)",
		thread, snap.Status, rec.ID, after.UTC().Format(time.RFC3339), thread)
}
