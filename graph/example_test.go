package graph_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// A node returns exactly the fields it writes; append fields receive the
// items to add.
func ExampleSet() {
	type S struct {
		Count int
		Log   []string `lockstep:"append"`
	}
	g := graph.New[S]().
		AddNode("inc", func(ctx context.Context, s S) (graph.Update[S], error) {
			return graph.Set(S{Count: s.Count + 1, Log: []string{"inc"}}, "Count", "Log"), nil
		}).
		AddEdge(graph.START, "inc")
	r, _ := g.Compile()
	res, _ := r.Invoke(context.Background(), "thread-1", graph.Set(S{Count: 41}, "Count"))
	fmt.Println(res.Values.Count, res.Values.Log, res.Status)
	// Output: 42 [inc] done
}

// A node pauses with interrupt.Ask; the run waits until Resume answers.
func ExampleRunnable_Resume() {
	type S struct{ Decision string }
	ctx := context.Background()
	g := graph.New[S]().
		AddNode("approve", func(ctx context.Context, s S) (graph.Update[S], error) {
			ok, err := interrupt.Ask[bool](ctx, "ship the order?")
			if err != nil {
				return graph.Update[S]{}, err // the pause
			}
			return graph.Set(S{Decision: fmt.Sprint(ok)}, "Decision"), nil
		}).
		AddEdge(graph.START, "approve")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	res, _ := r.Invoke(ctx, "order-7", graph.Update[S]{})
	var q string
	_ = res.Interrupts[0].Decode(&q)
	fmt.Println(res.Status, res.Next, q)

	res, _ = r.Resume(ctx, "order-7", graph.Command[S]{Resume: true})
	fmt.Println(res.Status, res.Values.Decision)
	// Output:
	// waiting [approve] ship the order?
	// done true
}

// GetState tells a waiting thread from a failed one at a glance.
func ExampleRunnable_GetState() {
	type S struct{ Card string }
	ctx := context.Background()
	g := graph.New[S]().
		AddNode("charge", func(ctx context.Context, s S) (graph.Update[S], error) {
			return graph.Update[S]{}, fmt.Errorf("card %s declined", s.Card)
		}).
		AddEdge(graph.START, "charge")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	_, err := r.Invoke(ctx, "t", graph.Set(S{Card: "4242"}, "Card"))
	fmt.Println(err != nil)
	s, _ := r.GetState(ctx, "t")
	fmt.Println(s.Status, s.Next, s.Tasks[0].Error.Message)
	// Output:
	// true
	// failed [charge] card 4242 declined
}

// Durable keeps work before a pause from running again on resume.
func ExampleDurable() {
	type S struct{ Receipt string }
	ctx := context.Background()
	charges := 0
	g := graph.New[S]().
		AddNode("pay", func(ctx context.Context, s S) (graph.Update[S], error) {
			id, err := graph.Durable(ctx, "charge", func(ctx context.Context) (string, error) {
				charges++
				return "ch_1", nil
			})
			if err != nil {
				return graph.Update[S]{}, err
			}
			if _, err := interrupt.Ask[string](ctx, "send receipt?"); err != nil {
				return graph.Update[S]{}, err
			}
			return graph.Set(S{Receipt: id}, "Receipt"), nil
		}).
		AddEdge(graph.START, "pay")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	r.Invoke(ctx, "t", graph.Update[S]{})
	res, _ := r.Resume(ctx, "t", graph.Command[S]{Resume: "yes"})
	fmt.Println(res.Values.Receipt, "charged", charges, "time")
	// Output: ch_1 charged 1 time
}

// Stream yields values after each step and every task's update.
func ExampleRunnable_Stream() {
	type S struct {
		Log []string `lockstep:"append"`
	}
	step := func(name string) graph.NodeFunc[S] {
		return func(ctx context.Context, s S) (graph.Update[S], error) {
			return graph.Set(S{Log: []string{name}}, "Log"), nil
		}
	}
	g := graph.New[S]().AddNode("a", step("a")).AddNode("b", step("b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r, _ := g.Compile()
	for ev, err := range r.Stream(context.Background(), "t", graph.StartWith(graph.Update[S]{})) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		switch ev.Kind {
		case graph.EventUpdates:
			fmt.Printf("step %d: %s wrote %v\n", ev.Step, ev.Node, ev.Update.Fields())
		case graph.EventValues:
			fmt.Printf("step %d: log %v\n", ev.Step, ev.Values.Log)
		}
	}
	// Output:
	// step -1: log []
	// step 0: log []
	// step 1: a wrote [Log]
	// step 1: log [a]
	// step 2: b wrote [Log]
	// step 2: log [a b]
}

// Mermaid draws the compiled graph; conditional edges are dashed.
func ExampleRunnable_Mermaid() {
	type S struct{ OK bool }
	noop := func(ctx context.Context, s S) (graph.Update[S], error) { return graph.Update[S]{}, nil }
	g := graph.New[S]().
		AddNode("check", noop).AddNode("book", noop).
		AddEdge(graph.START, "check").
		AddConditionalEdges("check", func(ctx context.Context, s S) ([]string, error) {
			if s.OK {
				return []string{"book"}, nil
			}
			return []string{graph.END}, nil
		}, "book", graph.END).
		AddEdge("book", graph.END)
	r, _ := g.Compile()
	out := r.Mermaid()
	fmt.Println(out[strings.Index(out, "graph TD;"):strings.Index(out, "\tclassDef")])
	// Output:
	// graph TD;
	// 	__start__([<p>__start__</p>]):::first
	// 	book(book)
	// 	check(check)
	// 	__end__([<p>__end__</p>]):::last
	// 	__start__ --> check;
	// 	book --> __end__;
	// 	check -.-> __end__;
	// 	check -.-> book;
}

// History lists checkpoints newest first; UpdateState edits state as a node
// would.
func ExampleRunnable_History() {
	type S struct {
		Log []string `lockstep:"append"`
	}
	ctx := context.Background()
	step := func(name string) graph.NodeFunc[S] {
		return func(ctx context.Context, s S) (graph.Update[S], error) {
			return graph.Set(S{Log: []string{name}}, "Log"), nil
		}
	}
	g := graph.New[S]().AddNode("a", step("a")).AddNode("b", step("b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	r.Invoke(ctx, "t", graph.Update[S]{})
	hist, _ := r.History(ctx, "t", graph.HistoryOptions{})
	for _, s := range hist {
		fmt.Println(s.Metadata.Source, s.Metadata.Step, s.Next, s.Values.Log)
	}
	// Output:
	// loop 2 [] [a b]
	// loop 1 [b] [a]
	// loop 0 [a] []
	// input -1 [__start__] []
}
