package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// Ticket is the state of the example's support graph.
type Ticket struct {
	Amount int
	Result string
}

// A gated refund pauses its thread with a request; a reviewer approves it
// from the inbox (a second reviewer arrives too late); the worker resumes
// the thread, and the refund runs.
func Example() {
	ctx := context.Background()
	now := func() time.Time { return time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) }
	saver := checkpoint.NewMemorySaver(nil)
	store := approval.NewMemoryStore(now) // approval.OpenSQLStore(ctx, db, now) in production

	// The node asks as the tool node does: interrupt.Ask with a Request.
	refund := func(ctx context.Context, t Ticket) (graph.Update[Ticket], error) {
		args, _ := json.Marshal(map[string]int{"amount": t.Amount})
		hash, _ := approval.ArgsHash("refund", args)
		d, err := interrupt.Ask[approval.Decision](ctx, approval.Request{
			Type: approval.RequestType, Tool: "refund", Args: args, ArgsHash: hash,
			Rationale: "the parcel was lost", Risk: approval.RiskHigh, Owner: "payments",
			CreatedAt: now(), ExpiresAt: now().Add(time.Hour),
		})
		if err != nil {
			return graph.Update[Ticket]{}, err
		}
		if !d.Allows() {
			return graph.Set(Ticket{Result: "not refunded: " + d.Note}, "Result"), nil
		}
		return graph.Set(Ticket{Result: fmt.Sprintf("refunded %d", t.Amount)}, "Result"), nil
	}
	run, err := graph.New[Ticket]().
		AddNode("refund", refund).
		AddEdge(graph.START, "refund").
		AddEdge("refund", graph.END).
		Compile(graph.WithSaver(saver))
	if err != nil {
		panic(err)
	}

	res, _ := run.Invoke(ctx, "ticket-1", graph.Set(Ticket{Amount: 40}, "Amount"))
	fmt.Println("run:", res.Status)

	inbox := approval.NewInbox(saver, store)
	page, _ := inbox.List(ctx, approval.Filter{Owner: "payments"})
	for _, it := range page.Items {
		fmt.Println("pending:", it.Thread, it.Request.Tool, string(it.Request.Args))
	}
	id := page.Items[0].ID
	d, _ := inbox.Approve(ctx, id, "alice", "lost parcels are refunded")
	_, err = inbox.Reject(ctx, id, "bob", "")
	fmt.Println("approved by", d.Reviewer+"; bob too late:", errors.Is(err, approval.ErrAlreadyDecided))

	worker, err := approval.NewWorker(store, approval.ResumeGraph(run), approval.WorkerOptions{})
	if err != nil {
		panic(err)
	}
	rep, _ := worker.RunOnce(ctx)
	fmt.Println("resumed:", rep.Resumed)

	s, _ := run.GetState(ctx, "ticket-1")
	fmt.Println(s.Status, "-", s.Values.Result)
	// Output:
	// run: waiting
	// pending: ticket-1 refund {"amount":40}
	// approved by alice; bob too late: true
	// resumed: 1
	// done - refunded 40
}
