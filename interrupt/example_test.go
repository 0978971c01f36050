package interrupt_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// In a graph, Ask pauses the node until a human answers; on resume the
// node runs again from its first line and the same call returns the
// answer.
func ExampleAsk_graph() {
	type S struct{ Room string }
	ctx := context.Background()
	g := graph.New[S]().
		AddNode("pick", func(ctx context.Context, s S) (graph.Update[S], error) {
			room, err := interrupt.Ask[string](ctx, "which room?")
			if err != nil {
				return graph.Update[S]{}, err // the pause, or a real failure
			}
			return graph.Set(S{Room: room}, "Room"), nil
		}).
		AddEdge(graph.START, "pick")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	res, _ := r.Invoke(ctx, "booking-1", graph.Update[S]{})
	var q string
	_ = res.Interrupts[0].Decode(&q)
	fmt.Println(res.Status, q)

	res, _ = r.Resume(ctx, "booking-1", graph.Command[S]{Resume: "sea view"})
	fmt.Println(res.Status, res.Values.Room)

	// Outside a running node there is nobody to ask.
	_, err := interrupt.Ask[string](ctx, "which room?")
	fmt.Println(err == interrupt.ErrNoRuntime)
	// Output:
	// waiting which room?
	// done sea view
	// true
}

// AskKey names each question, so one node can wait on several at once;
// they are answered by interrupt ID, in one resume or several.
func ExampleAskKey() {
	type S struct{ Signed []string }
	ctx := context.Background()
	g := graph.New[S]().
		AddNode("sign", func(ctx context.Context, s S) (graph.Update[S], error) {
			var signed []string
			var pause error
			for _, who := range []string{"legal", "finance"} {
				ok, err := interrupt.AskKey[bool](ctx, who, "sign the contract, "+who+"?")
				switch {
				case interrupt.Is(err):
					pause = err // ask the others too before pausing
				case err != nil:
					return graph.Update[S]{}, err
				case ok:
					signed = append(signed, who)
				}
			}
			if pause != nil {
				return graph.Update[S]{}, pause
			}
			return graph.Set(S{Signed: signed}, "Signed"), nil
		}).
		AddEdge(graph.START, "sign")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	res, _ := r.Invoke(ctx, "contract-9", graph.Update[S]{})
	var questions []string
	answers := map[string]any{}
	for _, in := range res.Interrupts {
		var q string
		_ = in.Decode(&q)
		questions = append(questions, q)
		answers[in.ID] = true
	}
	sort.Strings(questions)
	fmt.Println(res.Status, len(res.Interrupts), questions)

	res, _ = r.Resume(ctx, "contract-9", graph.Command[S]{ResumeByID: answers})
	fmt.Println(res.Status, res.Values.Signed)
	// Output:
	// waiting 2 [sign the contract, finance? sign the contract, legal?]
	// done [legal finance]
}

// A NodeInterrupt stops the run with a value for the reviewer and takes no
// answer: the reviewer fixes the state, and the run continues.
func ExampleNodeInterrupt() {
	type S struct {
		Amount   int
		Approved bool
		Paid     string
	}
	ctx := context.Background()
	g := graph.New[S]().
		AddNode("review", func(ctx context.Context, s S) (graph.Update[S], error) {
			if s.Amount > 100 && !s.Approved {
				return graph.Update[S]{}, &interrupt.NodeInterrupt{Value: fmt.Sprintf("refund of %d needs approval", s.Amount)}
			}
			return graph.Update[S]{}, nil
		}).
		AddNode("pay", func(ctx context.Context, s S) (graph.Update[S], error) {
			return graph.Set(S{Paid: fmt.Sprint(s.Amount)}, "Paid"), nil
		}).
		AddEdge(graph.START, "review").
		AddEdge("review", "pay")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	res, _ := r.Invoke(ctx, "refund-3", graph.Set(S{Amount: 250}, "Amount"))
	var why string
	_ = res.Interrupts[0].Decode(&why)
	fmt.Println(res.Status, res.Next, why)

	// The reviewer approves by writing the state as the node before review
	// would have, so review runs again and lets the refund through.
	_, _ = r.UpdateState(ctx, "refund-3", graph.Set(S{Approved: true}, "Approved"), graph.UpdateOptions{AsNode: graph.START})
	res, _ = r.Continue(ctx, "refund-3")
	fmt.Println(res.Status, res.Values.Paid)
	// Output:
	// waiting [review] refund of 250 needs approval
	// done 250
}
